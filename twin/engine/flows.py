"""Flow-level bandwidth sharing: transfers are fluid flows over links, sharing by max-min fairness.

Rates are recomputed only when a flow starts or ends or a capacity changes (a fault); between
those moments every flow drains at a constant rate, so one wake-up per change is enough.

Deferred completions: while `defer()` says no consumer needs a completion as an event (the engine:
every decode instance is stepping and reads its inbox at step boundaries), the wake-up is kept as
a time only, and `settle()` runs the wake-ups due by now, each at its own time, exactly as the
events would have, before anything reads or changes the flows. `need_events()` turns the pending
wake-up into an event when a consumer starts waiting.

Flows over the same links (a prefill -> decode pair) form a group: max-min fairness gives them
one rate, so the filling runs per group, and as they drain alike a heap per group keeps the next
to finish. A partition that heals releases every KV transfer that waited for it at once (5,260 in
`default` under full-rate random faults): each start and end then costs per group, not per flow,
but for the draining itself.

Every KV transfer passes here (one flow per prefill batch, most of them alone), so the hot path
writes min()/max() of two floats as conditionals (the builtins cost ~0.1 us a call); each gives
the builtin's result exactly. The filling itself is a compiled kernel (`_fill`): with tens of
decode instances, tens of groups are in flight and each start or end re-solves them all.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from heapq import heappop, heappush
from operator import attrgetter
from typing import Callable

import numpy as np
import simpy

from twin.engine.compiled import kernel

DONE_BYTES = 1e-6   # a flow with at most this many bytes per byte/s of rate left is done (float slack)


@dataclass(slots=True)
class Group:
    """The flows over the same links: max-min fairness gives each the same rate, so they drain
    alike and keep their order by bytes left; a heap on it finds the next to finish."""
    rate: float = 0.0
    heap: list = field(default_factory=list)     # its flows, the least remaining first
    ix: tuple = ()                                # its links' indices in the filling's arrays


@dataclass(slots=True)
class Flow:
    """One transfer in progress: bytes left, the links it crosses, its group (its rate, bytes/s),
    and how its end is reported (an event, or a callback with `args` and the landing time);
    `key` is its place in FlowNet.flows."""
    remaining: float
    links: tuple
    group: Group
    key: int
    done: simpy.Event | None = None
    latency_s: float = 0.0
    on_finish: Callable[..., None] | None = None
    args: tuple = ()
    started: float = 0.0

    @property
    def rate(self) -> float:
        return self.group.rate

    def __lt__(self, other: Flow) -> bool:      # the heap's order
        return self.remaining < other.remaining


class FlowNet:
    def __init__(self, env: simpy.Environment, defer: Callable[[], bool] | None = None):
        self.env = env
        self.defer = defer                        # True while completions may wait for settle()
        self.capacity: dict[str, float] = {}      # link -> bytes/s
        self.flows: dict[int, Flow] = {}
        self._groups: dict[tuple, Group] = {}     # links -> the flows over exactly them
        self._spare: dict[tuple, Group] = {}      # links -> their group once its flows ended (reused)
        self._next = 0
        self._last = 0.0
        self._gen = 0
        self._armed_at = math.inf                 # time of the pending wake-up
        self._timer_gen = -1                      # the wake-up generation that has an event
        self._events = 0                          # flows whose consumer waits on an event
        self.landed, self.landed_s = 0, 0.0       # flows ended and their seconds, start to last byte landed
        self._ix: dict[str, int] = {}             # link -> its index in the filling's arrays:
        self._cap = np.zeros(0)                   # its capacity (as `capacity`)
        self._rank = np.zeros(0, dtype=np.int64)  # its place in name order (ties of the filling)
        self._ix_of: dict[tuple, tuple] = {}      # links -> their indices (a link keeps its index)

    def set_capacity(self, link: str, bytes_per_s: float) -> None:
        self.settle()
        now = self.env.now
        self._drain(now)
        self.capacity[link] = max(0.0, bytes_per_s)
        i = self._ix.get(link)
        if i is None:                             # a new link: the arrays grow, the names reorder
            i = self._ix[link] = len(self._ix)
            self._cap = np.append(self._cap, 0.0)
            self._rank = np.empty(len(self._ix), dtype=np.int64)
            self._rank[[self._ix[x] for x in sorted(self._ix)]] = np.arange(len(self._ix))
        self._cap[i] = self.capacity[link]
        self._solve(now)

    def start(self, nbytes: float, links: tuple, latency_s: float = 0.0,
              on_finish: Callable[..., None] | None = None, *args) -> simpy.Event | None:
        """A transfer of `nbytes` over `links`; the event fires when the last byte lands. With
        `on_finish`, no event: `on_finish(*args, at)` is called when the flow ends, `at` the time
        the last byte lands (the caller's payload rides in `args`: no closure per flow).

        A flow that starts alone (most KV transfers) takes its rate here, as `_solve` would set it."""
        links = tuple(links)
        narrowest = self._narrowest(links)
        now = self.env.now
        done = None
        if on_finish is None:
            done = self.env.event()
            self._events += 1
        while self._armed_at <= now:        # settle(): the deferred wake-ups due by now
            self._fire(self._armed_at)
        flows = self.flows
        if flows:
            self._drain(now)
        else:
            self._last = now                # nothing to drain, nothing armed
        group = self._groups.get(links)
        if group is None:               # (most flows start alone: a group each; its indices when solved)
            group = self._groups[links] = self._spare.pop(links, None) or Group()
        flow = flows[self._next] = Flow(float(nbytes), links, group, self._next, done, latency_s, on_finish,
                                        args, now)
        heappush(group.heap, flow)
        self._next += 1
        if len(flows) > 1:
            self._solve(now)
        elif narrowest > 0:     # alone: what _solve and _arm do for one flow, without the calls
            group.rate = narrowest          # (over a dead link it waits at rate 0, unarmed)
            finish = flow.remaining / narrowest
            self._gen += 1
            at = self._armed_at = now + (finish if finish > 0.0 else 0.0)
            if self._events or self.defer is None or not self.defer():
                self._schedule(self._gen, at)
        return done

    def _narrowest(self, links: tuple) -> float:
        """The smallest capacity on `links` (min() without the builtin's cost); a flow over no
        link or an unknown one is refused."""
        if not links:
            raise ValueError("flow links: none (a flow crosses at least one link)")
        capacity = self.capacity
        narrowest = math.inf
        try:
            for link in links:
                if capacity[link] < narrowest:
                    narrowest = capacity[link]
        except KeyError:
            raise KeyError(f"flow link {link!r}: unknown (known: {', '.join(sorted(capacity))})") from None
        return narrowest

    def settle(self) -> None:
        """Run the deferred wake-ups due by now, in time order."""
        while self._armed_at <= self.env.now:
            self._fire(self._armed_at)

    def need_events(self) -> None:
        """A consumer starts waiting: the pending wake-up (if deferred) becomes an event."""
        self.settle()
        if self._armed_at < math.inf and self._timer_gen != self._gen:
            self._schedule(self._gen, self._armed_at)

    def _schedule(self, gen: int, at: float) -> None:
        """An event at exactly `at` (>= now) that fires wake-up `gen` (simpy.Timeout's own push)."""
        self.env.push(at, lambda _: self._wake(gen))
        self._timer_gen = gen

    def _drain(self, now: float) -> None:
        dt = now - self._last
        self._last = now
        if dt <= 0:
            return
        for group in self._groups.values():
            moved = group.rate * dt         # the same bytes off each flow of a group
            for f in group.heap:            # (the same loss, clamped at 0: the order holds, the heap stays)
                left = f.remaining
                f.remaining = left - moved if moved < left else 0.0     # less min(remaining, moved)

    def _solve(self, now: float) -> None:
        """Progressive filling: raise all unfrozen flows equally until a link saturates.

        Flows over the same links rise and freeze together, so it runs over their groups (a count
        each); every share and capacity left is the flow-by-flow filling's, to the bit. A flow
        crossing a dead link (capacity 0) waits at rate 0 and is left out of the filling, so flows
        elsewhere keep their fair share; it resumes when the capacity returns."""
        if len(self.flows) <= 1:            # alone: the rate is its narrowest live link
            if self.flows:
                (f,) = self.flows.values()
                narrowest = self._narrowest(f.links)
                f.group.rate = narrowest if narrowest > 0 else 0.0
                self._arm(now, f.remaining / f.rate if f.rate > 0 else None)
            return                          # none: nothing to arm (_fire cleared the wake-up)
        groups = self._groups
        flat, ends, counts = [], [], []
        for links, group in groups.items():
            if not group.ix:                # (first solved with others: its links' indices, kept per links)
                ix = self._ix_of.get(links)
                if ix is None:
                    ix = self._ix_of[links] = tuple([self._ix[link] for link in links])
                group.ix = ix
            flat += group.ix
            ends.append(len(flat))
            counts.append(len(group.heap))
        rates = np.empty(len(counts))
        _fill(np.array(counts + ends + flat, dtype=np.int64), self._cap, self._rank, rates)
        finish = None                       # the earliest finish, as min() would find it
        for group, rate in zip(groups.values(), rates.tolist()):
            group.rate = rate
            if rate > 0:                    # (its least remaining / rate: division keeps the order)
                t = group.heap[0].remaining / rate
                if finish is None or t < finish:
                    finish = t
        self._arm(now, finish)

    def _arm(self, now: float, finish: float | None) -> None:
        """One wake-up at the earliest finish (`finish` seconds from `now`; None: no flow moves).
        A pending wake-up that is not later is kept (if it comes early it finds nothing done and
        re-arms), so most flow changes schedule no event; none at all while completions are
        deferred."""
        if finish is not None:
            at = now + (finish if finish > 0.0 else 0.0)      # max(0.0, finish)
            if at < self._armed_at:
                self._gen += 1
                self._armed_at = at
        if self._timer_gen != self._gen and self._armed_at < math.inf \
                and (self._armed_at > self.env.now or now == self.env.now) \
                and (self._events or self.defer is None or not self.defer()):
            self._schedule(self._gen, self._armed_at)      # (a due one is run by settle())

    def _wake(self, gen: int) -> None:
        if gen == self._gen and self._armed_at <= self.env.now:
            self._fire(self._armed_at)   # else replaced by an earlier wake-up, or settled already

    def _fire(self, now: float) -> None:
        """The wake-up at `now` (the event's time, or a deferred one's): finished flows end."""
        self._armed_at = math.inf
        self._gen += 1
        self._drain(now)
        done = []                   # the finished flows: the least remaining ones of each group
        for links, group in list(self._groups.items()):
            slack = DONE_BYTES * (group.rate if group.rate > 1.0 else 1.0)    # max(1.0, rate)
            heap = group.heap
            while heap and heap[0].remaining <= slack:
                done.append(heappop(heap))
            if not heap:                    # (kept with rate 0, as a new one starts)
                group.rate = 0.0
                self._spare[links] = self._groups.pop(links)
        flows = self.flows
        if len(done) > 1:
            done.sort(key=attrgetter("key"))
        for f in done:              # in start order, as they sit in `flows`
            del flows[f.key]
            at = now + f.latency_s
            self.landed += 1
            self.landed_s += at - f.started
            if f.on_finish is None:
                self._events -= 1
                self.env.succeed_after(f.done, f.latency_s)
            else:
                f.on_finish(*f.args, at)
        if flows:
            self._solve(now)


@kernel
def _fill(shape, cap, rank, rate):
    """FlowNet._solve's progressive filling over the groups: `rate[g]` out. `shape` holds, one after
    the other (one array to pass), each group's flow count, where its links end and the links
    (indices into `cap`): group g holds `counts[g]` flows over `links[ends[g-1]:ends[g]]`.
    Each round raises every rising group by the share of the tightest link (the least capacity
    left per flow, the first name on a tie: `rank` is the links' order by name), freezes the
    groups over it and takes the share off every link in use once per flow, each subtraction
    rounded as a flow taking its share in turn leaves it (not n * share). A group over a dead
    link (capacity 0) stays at 0. The same float operations in the same order as the dict-based
    filling it replaced, so the same rates to the bit."""
    g_n = len(rate)
    counts, ends, links = shape[:g_n], shape[g_n:2 * g_n], shape[2 * g_n:]
    at = np.full(len(cap), -1, dtype=np.int64)     # link -> its place among the links in use
    loc = np.empty(len(links), dtype=np.int64)     # the groups' links as those places
    l_n = 0
    for j in range(len(links)):
        if at[links[j]] < 0:
            at[links[j]] = l_n
            l_n += 1
        loc[j] = at[links[j]]
    left_cap = np.empty(l_n)                        # capacity left on each link in use
    order = np.empty(l_n, dtype=np.int64)           # its rank by name
    for j in range(len(links)):
        left_cap[loc[j]] = cap[links[j]]
        order[loc[j]] = rank[links[j]]
    rising = np.zeros(g_n, dtype=np.bool_)
    for g in range(g_n):
        rate[g] = 0.0
        live = True
        for j in range(ends[g - 1] if g else 0, ends[g]):
            if not left_cap[loc[j]] > 0:
                live = False
        rising[g] = live
    users = np.zeros(l_n, dtype=np.int64)
    more = True
    while more:
        more = False
        for g in range(g_n):
            if rising[g]:
                more = True
                for j in range(ends[g - 1] if g else 0, ends[g]):
                    users[loc[j]] += counts[g]
        if not more:
            break
        share, tight = 0.0, -1
        for k in range(l_n):
            if users[k] > 0:
                left = left_cap[k]
                s = (0.0 if left < 0.0 else left) / users[k]
                if tight < 0 or s < share or (s == share and order[k] < order[tight]):
                    share, tight = s, k
        still = False
        for g in range(g_n):
            if rising[g]:
                rate[g] += share
                for j in range(ends[g - 1] if g else 0, ends[g]):
                    if loc[j] == tight:
                        rising[g] = False
                still = still or rising[g]
        for k in range(l_n):
            if users[k] > 0:
                if still:                   # what is left matters only to a further round
                    left = left_cap[k]
                    for _ in range(users[k]):
                        left -= share
                    left_cap[k] = left
                users[k] = 0
        more = still
