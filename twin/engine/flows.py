"""Flow-level bandwidth sharing: transfers are fluid flows over links, sharing by max-min fairness.

Rates are recomputed only when a flow starts or ends or a capacity changes (a fault); between
those moments every flow drains at a constant rate, so one wake-up per change is enough.
"""
from __future__ import annotations

import math
from typing import Callable

import simpy


class FlowNet:
    def __init__(self, env: simpy.Environment):
        self.env = env
        self.capacity: dict[str, float] = {}      # link -> bytes/s
        self.flows: dict[int, list] = {}   # id -> [remaining bytes, links, rate, event, latency, on_finish]
        self._next = 0
        self._last = 0.0
        self._gen = 0
        self._armed_at = math.inf                 # time of the pending wake-up
        self.bytes_done: dict[str, float] = {}    # link -> bytes carried (for traffic metrics)

    def set_capacity(self, link: str, bytes_per_s: float) -> None:
        self._drain()
        self.capacity[link] = max(0.0, bytes_per_s)
        self._solve()

    def start(self, nbytes: float, links: tuple, latency_s: float = 0.0,
              on_finish: Callable[[float], None] | None = None) -> simpy.Event | None:
        """A transfer of `nbytes` over `links`; the event fires when the last byte lands. With
        `on_finish`, no event: it is called when the flow ends with the time the last byte lands."""
        for link in links:
            if link not in self.capacity:
                raise KeyError(f"flow link {link!r}: unknown (known: {', '.join(sorted(self.capacity))})")
        done = self.env.event() if on_finish is None else None
        self._drain()
        self.flows[self._next] = [float(nbytes), tuple(links), 0.0, done, latency_s, on_finish]
        self._next += 1
        self._solve()
        return done

    def rate_of(self, link: str) -> float:
        return sum(f[2] for f in self.flows.values() if link in f[1])

    def _drain(self) -> None:
        dt = self.env.now - self._last
        self._last = self.env.now
        if dt <= 0:
            return
        for f in self.flows.values():
            moved = min(f[0], f[2] * dt)
            f[0] -= moved
            for link in f[1]:
                self.bytes_done[link] = self.bytes_done.get(link, 0.0) + moved

    def _solve(self) -> None:
        """Progressive filling: raise all unfrozen flows equally until a link saturates.

        A flow crossing a dead link (capacity 0) waits at rate 0 and is left out of the filling,
        so flows elsewhere keep their fair share; it resumes when the capacity returns."""
        for f in self.flows.values():
            f[2] = 0.0
        cap = dict(self.capacity)
        active = {i: f for i, f in self.flows.items() if all(cap[l] > 0 for l in f[1])}
        while active:
            users: dict[str, int] = {}
            for f in active.values():
                for link in f[1]:
                    users[link] = users.get(link, 0) + 1
            share, tight = min((max(cap[l], 0.0) / n, l) for l, n in users.items())
            frozen = [i for i, f in active.items() if tight in f[1]]
            for f in active.values():
                f[2] += share
                for link in f[1]:
                    cap[link] -= share
            for i in frozen:
                del active[i]
        self._arm()

    def _arm(self) -> None:
        """One wake-up at the earliest finish. A pending wake-up that is not later is kept (if it
        comes early it finds nothing done and re-arms), so most flow changes schedule no event."""
        finish = [(f[0] / f[2]) for f in self.flows.values() if f[2] > 0]
        if not finish:
            return
        delay = max(0.0, min(finish))
        if self.env.now + delay < self._armed_at:
            self._gen += 1
            self._armed_at = self.env.now + delay
            gen = self._gen
            self.env.timeout(delay).callbacks.append(lambda _: self._wake(gen))

    def _wake(self, gen: int) -> None:
        if gen != self._gen:
            return       # a newer, earlier wake-up replaced this one
        self._armed_at = math.inf
        self._drain()
        done = [i for i, f in self.flows.items() if f[0] <= 1e-6 * max(1.0, f[2])]
        for i in done:
            f = self.flows.pop(i)
            if f[5] is None:
                _succeed_after(f[3], f[4])
            else:
                f[5](self.env.now + f[4])
        self._solve()


def _succeed_after(ev: simpy.Event, delay: float) -> None:
    """ev.succeed() `delay` seconds from now as one scheduled event (what simpy.Timeout does)."""
    ev._ok, ev._value = True, None
    ev.env.schedule(ev, delay=delay)
