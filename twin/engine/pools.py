"""Prefill and decode instances as SimPy processes: one event per prefill batch and per decode step.

Sequences in a decode batch are numpy arrays (request id, context length, tokens still to
produce); a step advances all of them at once. A prefill batch looks its prompts up in EMS,
computes only the missed tokens, stores the new blocks and ships the KV to a decode instance.
"""
from __future__ import annotations

import math
from collections import deque
from itertools import islice

import numpy as np
import simpy

from twin.engine import batch_rows
from twin.engine.ems.prefix import lookup
from twin.engine.ports import InstanceHost
from twin.engine.requests import DECODE_QUEUE, PREFILL, QUEUED
_NO_IDS = np.zeros(0, dtype=np.int64)


class Instance:
    """What prefill and decode instances share: placement, queue, health and a wake-up event."""

    def __init__(self, eng: InstanceHost, kind: str, idx: int, slot: int, dies: np.ndarray):
        self.eng, self.kind, self.idx, self.slot = eng, kind, idx, slot
        self.dies = dies                       # topology die indices
        self.nodes = np.unique(dies // eng.dies_per_node)
        self.npus = len(dies) / eng.pm.dies_per_npu
        self.queue: deque[int] = deque()
        self.down: dict[int, str] = {}    # open faults holding this instance down: id -> reason
        self.blocked = False               # cut off from the UB fabric (no path to its peers)
        self.pm = eng.pm               # this instance's view of the network (set by the engine)
        self.memo: dict = eng.timing.memo(kind, self.npus)   # step times under the current network state
        self.cap: int | None = None    # decode: sequences allowed under the TPOT SLO (lazy)
        self.slow_load = 1.0           # a slow die's share of a die's batch (a gray mitigation shrinks it)
        self._wake = eng.env.event()
        self.name = f"{kind}-{idx}"

    @property
    def alive(self) -> bool:
        return not self.down

    @property
    def ready(self) -> bool:
        return not self.down and not self.blocked

    def wake(self) -> None:
        if not self._wake.triggered:
            self._wake.succeed()

    def hold(self, key, reason: str) -> None:
        """Hold the instance down under `key` (a fault id, or a handover's key) until release(key)."""
        self.down[key] = reason
        self.eng.health += 1

    def release(self, key) -> None:
        """Drop the hold `key`: the instance is up again unless another hold remains."""
        self.down.pop(key, None)
        self.eng.health += 1

    def fail(self, fault_id: int, reason: str) -> None:
        """A fault hangs this instance (collectives cannot finish with a dead rank) until recovery
        releases `fault_id`; the batch or step in progress is lost at once (`interrupt`)."""
        self.hold(fault_id, reason)
        self.interrupt(reason)

    def interrupt(self, reason: str) -> None:
        raise NotImplementedError

    def wait(self):
        self._wake = self.eng.env.event()
        return self._wake


class PrefillInstance(Instance):
    """Driven by callbacks, not a process: a batch starts the moment the instance is free and has
    work, and its end is one timeout. The scheduler starts idle instances right after a tick's
    admissions (no wake-up event); faults and requeues wake it with one zero-delay event."""

    def __init__(self, eng, idx, slot, dies):
        super().__init__(eng, "prefill", idx, slot, dies)
        self.queued_tokens = 0
        self.budget = eng.dep.prefill.tokens_per_die * len(dies)
        # chunked prefill (the prefill batching policy's chunk_tokens, as vLLM's max_num_batched_tokens):
        # a batch holds at most `chunk` tokens, a longer prompt goes back to the queue after each chunk
        # (`done`: its tokens prefilled here so far), behind the prompts not yet started, so those wait for one chunk, not a whole long
        # prompt (residual: a steady stream of new prompts filling every batch would delay the rest
        # of a long one, as it would under vLLM's scheduler)
        self.chunk = eng.policies.prefill_batching.chunk_tokens
        if self.chunk:
            self.budget = min(self.budget, self.chunk)
        self.done: dict[int, int] = {}
        self.partial: dict[int, int] = {}     # request id -> its chunk's tokens, for the batch in progress
        self.running: list[int] = []
        self.busy = False             # a batch's timeout is pending
        self._batch = 0               # the batch in progress (a lost batch's end is ignored)

    def enqueue(self, rid: int, wake: bool = True) -> None:
        req = self.eng.req
        r = rid - req.base                 # an id in flight is never below the window
        self.queue.append(rid)
        self.queued_tokens += req.input.a.item(r)
        req.instance.a[r] = self.idx
        if wake:
            self.wake()

    def wake(self) -> None:
        """Start at the current time, after the caller has finished changing state."""
        if not self.busy and not self._wake.triggered:
            self._wake.succeed()
            self._wake.callbacks.append(self._woken)

    def _woken(self, _ev) -> None:
        self._wake = self.eng.env.event()
        self.start()

    def start(self) -> None:
        """Form a batch from the queue (up to the token budget) and run it, if free and ready."""
        if self.busy or not self.queue or self.down or self.blocked:     # (not ready)
            return
        eng = self.eng
        dl = eng.deadlines                 # (drop_head's first test inline: no call before any can be due)
        if dl.on and eng.req.first_arrival + dl.deadline_s <= eng.env.now and not dl.drop_head(self):
            return                         # its clients there all gave up
        req = eng.req
        inp, base, queue = req.input.a, req.base, self.queue      # rows: ids - base (queued: in window)
        policy = eng.policies.prefill_batching
        if self.chunk:
            if self.done and len(queue) > 1:     # prompts not yet started go before the rest of long ones
                order = sorted(queue, key=self.done.__contains__)
                queue.clear()
                queue.extend(order)
            batch, tokens = policy.take(queue, self._chunk_of, self.budget)
            tokens = sum(inp.item(rid - base) for rid in batch)
        elif len(queue) == 1 and policy.lone_whole:     # the policy's batch, without its call and a lambda
            batch = [queue.popleft()]
            tokens = inp.item(batch[0] - base)
        else:
            batch, tokens = policy.take(queue, lambda rid: inp.item(rid - base), self.budget)
        self.queued_tokens -= tokens
        self.running = batch
        start = eng.env.now
        ids = np.array(batch, np.int64)            # (dtype as the positional argument: ~0.1 us less a call)
        sizes = np.empty(len(ids), np.int64)
        if self.chunk and (self.done or any(self._chunk_of(rid) < self._full(rid) for rid in batch)):
            # a prompt's prefix cache is looked up as its first chunk starts; the tokens it serves are
            # not computed (they count in `done`), the chunks cover the rest
            first = [rid for rid in batch if rid not in self.done]
            cached = lookup(eng.ems, req, np.array(first, np.int64), eng.metrics.cur, eng.acct,
                            self.slot) if first else 0
            for rid in first:
                self.done[rid] = req.cached.a.item(rid - base)
            prompts, total, square = self._chunks(ids, sizes, start, first)
            # a prompt with chunks to go still counts in `queued_tokens` (placement sees the work held)
            self.queued_tokens += sum(inp.item(rid - base) for rid in self.partial)
            seconds = eng.timing.prefill_seconds(self, sizes, total, square, 0)
        else:
            prompts, total, square = batch_rows.started(ids, base, start, req.ints, req.floats, sizes)
            cached = lookup(eng.ems, req, ids, eng.metrics.cur, eng.acct, self.slot)
            seconds = eng.timing.prefill_seconds(self, sizes, total, square, cached)
        new, hit = float(prompts - cached), float(cached)
        if not math.isfinite(seconds):       # cut off from its peers: wait for the network
            self.queue.extendleft(reversed(batch))
            self.queued_tokens += tokens - sum(inp.item(rid - base) for rid in self.partial)
            self.running = []
            self.partial = {}
            req.state[ids] = QUEUED
            return
        eng.metrics.add_busy(self.slot, start, seconds, eng.interval_end)
        eng.acct.prefill(self, new, hit)
        self.busy = True
        self._batch += 1
        batch_no = self._batch
        eng.env.call_later(seconds, self._done, (ids, batch_no))

    def interrupt(self, reason: str) -> None:
        """The batch in progress is lost (its requests stay in `running` until detection
        requeues them); the instance is free, but not ready while it is down. Chunks prefilled
        here are lost with it: a prompt split over batches starts again wherever it goes."""
        if self.busy:
            self.busy = False
            self._batch += 1
        req = self.eng.req
        self.queued_tokens -= sum(req.input.a.item(rid - req.base) for rid in self.partial)
        self.done.clear()
        self.partial = {}

    def _full(self, rid: int) -> int:
        """Tokens a request prefills: its prompt and, once requeued, the tokens it made but the first."""
        req = self.eng.req
        r = rid - req.base
        return req.input.a.item(r) + max(req.generated.a.item(r) - 1, 0)

    def _chunk_of(self, rid: int) -> int:
        """Tokens of `rid` the next batch prefills: what is left of it, at most a chunk."""
        return min(self._full(rid) - self.done.get(rid, 0), self.chunk)

    def _chunks(self, ids: np.ndarray, sizes: np.ndarray, now: float, first: list) -> tuple[int, int, int]:
        """batch_rows.started for a batch of chunks: each prefills its chunk, attending to what is
        before it (a chunk c after p tokens costs 2cp + c^2 of attention, in the units where a whole
        prompt n costs n^2: the chunks of a prompt add up to n^2). The requests in `first` start their
        prefill now. Returns (their prompt tokens, tokens to prefill, attention units)."""
        req = self.eng.req
        prompts = total = square = 0
        self.partial = {}
        starting = set(first)
        for i, rid in enumerate(ids.tolist()):
            r = rid - req.base
            p, c = self.done[rid], self._chunk_of(rid)
            req.state.a[r] = PREFILL
            if rid in starting:
                req.prefill_start.a[r] = now
                prompts += req.input.a.item(r)
            if p + c < self._full(rid):
                self.partial[rid] = c
            sizes[i] = c
            total += c
            square += c * (2 * p + c)
        return prompts, total, square

    def _done(self, ev) -> None:
        """The batch's prefill ended (`ev._value`: its request ids, an array, and its number)."""
        ids, batch_no = ev._value
        if batch_no != self._batch:          # lost to a fault (interrupt)
            return
        self.busy = False
        if self.running:
            self.running = []
            if self.partial or self.done:    # prompts with chunks still to go: back to the queue
                ids = self._requeue_partial(ids)
            if len(ids):
                self._prefilled(ids)
        if self.queue:                       # (start() would find nothing to do)
            self.start()

    def _requeue_partial(self, ids: np.ndarray) -> np.ndarray:
        """After a batch of chunks: the prompts not yet whole go back to the queue (QUEUED, their
        chunks counted in `done`), the others leave `done`; returns the ids whose prefill ended."""
        req, partial, done = self.eng.req, self.partial, self.done
        self.partial = {}
        if self.down:                      # held down meanwhile (a hand-over): the rest goes elsewhere
            back = np.array([rid for rid in ids.tolist() if rid in partial], dtype=np.int64)
            self.queued_tokens = sum(req.input.a.item(rid - req.base) for rid in self.queue)
            kept = set(self.queue)         # (what a hand-over with nowhere to go left here, for its return)
            for rid in [r for r in done if r not in kept]:
                del done[rid]
            self.eng.requeue(back)
            return ids[~np.isin(ids, back)]
        for rid in ids.tolist():
            if rid in partial:
                done[rid] = done.get(rid, 0) + partial[rid]
                r = rid - req.base
                req.state.a[r] = QUEUED
                self.queue.append(rid)                 # (still counted in queued_tokens)
            else:
                done.pop(rid, None)
        return ids[np.fromiter((rid not in partial for rid in ids.tolist()), dtype=bool, count=len(ids))]

    def _prefilled(self, ids: np.ndarray) -> None:
        """The batch's prompts are done: single-token replies finish, the rest ship their KV."""
        eng, req = self.eng, self.eng.req
        order = np.empty(len(ids), np.int64)
        prompts, n_send, sent = batch_rows.prefilled(ids, req.base, eng.env.now, req.ints, req.floats, order)
        eng.metrics.cur.input_tokens += float(prompts)
        if eng.external is not None:
            eng.external.prefilled(ids)
        if n_send < len(ids):
            eng.finish(order[n_send:])
        if n_send:
            eng.kv.send(order[:n_send], self, sent)


class DecodeInstance(Instance):
    def __init__(self, eng, idx, slot, dies):
        super().__init__(eng, "decode", idx, slot, dies)
        self.ids = np.zeros(0, dtype=np.int64)
        self.left = np.zeros(0, dtype=np.int64)    # tokens still to produce (<= 0: finished)
        # a sequence's context is input + generated = input + output - left (no array of its
        # own to advance and compact every step); their sum is kept (the step time needs the mean)
        self.ctx_sum = 0
        self.reserved = 0.0              # KV tokens reserved by the admitted sequences
        self.inbox: list[tuple[float, np.ndarray]] = []   # KV landing at a time, not yet queued
        self.no_first = np.zeros(0, dtype=np.int64)   # admitted without a first token (decode-only)
        self.stepping = False            # between its first step and going idle
        self._idle = None                # event the arrival process waits on while it steps
        self.proc: simpy.Process | None = None   # its run() process (set by the engine)

    def enqueue(self, rids: np.ndarray) -> None:
        req = self.eng.req
        rids = np.asarray(rids)
        rows = rids - req.base                 # an id in flight is never below the window
        req.state.a[rows] = DECODE_QUEUE
        req.instance.a[rows] = self.idx
        self.queue.extend(rids.tolist())
        self.wake()

    def deliver(self, rids: np.ndarray, at: float) -> None:
        """KV that lands at time `at`: queued when anything next looks at the queue (a step
        boundary, a fault, the scheduler) at or after `at`, as if enqueued at `at`. Only an idle
        instance needs an event (a wake-up at `at`), so a busy one takes no event per transfer."""
        self.inbox.append((at, rids))
        if not self._wake.triggered:
            self._wake_at(at)

    def _wake_at(self, at: float) -> None:
        self.eng.env.timeout(max(0.0, at - self.eng.env.now)).callbacks.append(lambda _: self.wake())

    def flush_inbox(self) -> None:
        """Queue the KV that has landed by now, in landing order (one enqueue for all of it)."""
        landed = self._landed()
        if len(landed):
            self.enqueue(landed)

    def _landed(self) -> np.ndarray:
        """Take the ids whose KV has landed by now off the inbox, in landing order (not queued)."""
        self.eng.kv.flows.settle()              # KV transfers that have landed by now
        inbox = self.inbox
        if not inbox:
            return _NO_IDS
        now, k, m = self.eng.env.now, 0, len(inbox)
        while k < m and inbox[k][0] <= now:
            k += 1
        if not k:
            return _NO_IDS
        landed = inbox[0][1] if k == 1 else np.concatenate([x[1] for x in inbox[:k]])
        del inbox[:k]
        return landed

    def sync(self) -> None:
        """Write the held sequences' generated counts to the request table: a step only updates
        `left` (generated = output - left), so it does not scatter into the table every step."""
        if len(self.ids):
            req = self.eng.req
            req.generated[self.ids] = req.output[self.ids] - self.left

    def interrupt(self, reason: str) -> None:
        """Lose the step in progress (as SimPy's machine-shop example breaks a machine): only a
        stepping instance is inside a step's timeout; an idle one is waiting for work."""
        if self.stepping and self.proc is not None and self.proc.is_alive:
            self.proc.interrupt(reason)

    def until_idle(self):
        """An event that fires when the instance stops stepping."""
        self._idle = self.eng.env.event()
        return self._idle

    def _go_idle(self) -> None:
        self.stepping = False
        self.eng.kv.flows.need_events()         # its KV transfers must now wake it
        if self._idle is not None and not self._idle.triggered:
            self._idle.succeed()

    def load(self) -> int:
        """Sequences held, running and queued, after queueing the KV landed by now. The caller
        settles the KV flows first (`kv.flows.settle()`, once for all instances it asks: KV
        placement asks every instance per batch); nothing is flushed when nothing has landed."""
        inbox = self.inbox
        if inbox and inbox[0][0] <= self.eng.env.now:
            self.flush_inbox()
        return len(self.ids) + len(self.queue)

    def _take(self, landed: np.ndarray) -> None:
        """Queue `landed` (ids whose KV just landed) and admit from the queue's head. With an
        empty queue the landed ids are admitted without a trip through it (the same order and
        end state: DECODING, or DECODE_QUEUE behind for those not admitted)."""
        if len(landed) and not self.queue and self.ready:
            self.wake()                          # as enqueue() would
            k = self._admit_ids(landed[:max(self._room(), 0)])
            if k < len(landed):
                self.enqueue(landed[k:])
            return
        if len(landed):
            self.enqueue(landed)
        if self.ready:
            self._admit()

    def _admit(self) -> None:
        """Admit from the queue's head."""
        queue, eng = self.queue, self.eng
        dl = eng.deadlines                 # (drop_head's first test inline, as in PrefillInstance.start)
        if not queue or (dl.on and eng.req.first_arrival + dl.deadline_s <= eng.env.now
                         and not dl.drop_head(self)):
            return
        m = min(len(queue), max(self._room(), 0))
        head = queue if m == len(queue) else islice(queue, m)
        k = self._admit_ids(np.fromiter(head, dtype=np.int64, count=m))
        if k == len(queue):
            queue.clear()
        else:
            for _ in range(k):
                queue.popleft()

    def _room(self) -> int:
        """Sequences it may still admit under its TPOT cap."""
        return (self.cap or self.eng.timing.decode_cap(self)) - len(self.ids)

    def _admit_ids(self, t: np.ndarray) -> int:
        """Admit the head of the ids `t` (within the TPOT cap) that the admission policy lets in;
        returns how many."""
        if not len(t):
            return 0
        eng = self.eng
        req = eng.req
        base = req.base
        rows = t - base                           # an id in flight is never below the window
        need = req.input.a[rows] + req.output.a[rows]
        k = eng.policies.decode_admission.admit(need, self.reserved, eng.kv_capacity_tokens * len(self.dies),
                                                not len(self.ids), self)
        if not k:
            return 0
        if k < len(t):
            t = t[:k]
        left = np.empty(k, np.int64)
        need_sum, ctx, no_first = batch_rows.admit(t, base, req.ints, req.floats, self.idx, left)
        self.reserved += float(need_sum)
        self.ctx_sum += ctx
        if no_first:                              # admitted without a first token
            self.no_first = np.concatenate([self.no_first, t[np.isnan(req.first_token.a[rows[:k]])]])
        self.ids = np.concatenate([self.ids, t])
        self.left = np.concatenate([self.left, left])
        return k

    def run(self):
        eng, req, env, timing = self.eng, self.eng.req, self.eng.env, self.eng.timing
        timeout = env.timeout      # bound once: a subclassed Environment binds it per access
        while True:
            if eng.lazy_decode is self:
                eng.take_ticks(env.now)        # arrivals since the last step boundary
            self._take(self._landed())
            if not len(self.ids) or not self.ready:
                if self.inbox:
                    self._wake_at(self.inbox[0][0])
                self._go_idle()
                yield self.wait()
                continue
            n = len(self.ids)
            start = env.now
            seconds = timing.decode_seconds(self, n / self.npus, self.ctx_sum / n)
            if not math.isfinite(seconds):     # cut off from its peers: wait for the network
                self._go_idle()
                yield self.wait()
                continue
            self.stepping = True
            eng.metrics.add_busy(self.slot, start, seconds, eng.interval_end)
            eng.acct.decode(self, n)
            try:
                yield timeout(seconds)
            except simpy.Interrupt:             # a fault hit it mid-step: the step is lost
                continue
            k, fin, made_sum = timing.step(self.ids, self.left)     # in place: the first k go on
            if eng.external is not None:
                eng.external.stepped(self.ids[:k], self.left[:k], fin)
            if len(self.no_first):               # decode-only runs: first token from decode
                req.first_token[self.no_first] = env.now
                self.no_first = self.no_first[:0]
            if len(fin):
                self.ids, self.left = self.ids[:k], self.left[:k]
                need_sum = batch_rows.finish(fin, req.base, req.ints)
                self.ctx_sum -= need_sum
                self.reserved -= float(need_sum)
                eng.finish(fin)
            self.ctx_sum += made_sum
            eng.metrics.cur.output_tokens += made_sum
            if made_sum:           # for the gray faults' TPOT windows: seconds per token each sequence saw
                eng.faults.gray.steps.extend((env.now, seconds * n / made_sum, made_sum))

    def evict(self, mask: np.ndarray | None = None, queue: bool = True) -> np.ndarray:
        """Drop the sequences in `mask` (all by default) and, with `queue`, the waiting ones;
        returns their ids for requeueing."""
        self.flush_inbox()
        mask = np.ones(len(self.ids), dtype=bool) if mask is None else mask
        out = [self.ids[mask]]
        req = self.eng.req
        need = req.input[out[0]] + req.output[out[0]]
        req.generated[out[0]] = req.output[out[0]] - self.left[mask]
        req.progress[out[0]] = self.eng.env.now      # each client had a token until now
        self.ctx_sum -= int((need - self.left[mask]).sum())
        self.reserved -= float(need.sum())
        self.no_first = np.setdiff1d(self.no_first, out[0])
        self.ids, self.left = self.ids[~mask], self.left[~mask]
        if queue:
            out.append(np.array(list(self.queue), dtype=np.int64))
            self.queue.clear()
        return np.concatenate(out)

