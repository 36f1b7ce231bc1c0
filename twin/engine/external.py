"""Requests from outside the run (`twin serve`): injected at a sim time, followed token by token.

`External.attach(eng)` registers itself as the engine's "external" extension and puts itself in
front of the engine's arrival source: the requests given to `inject()` merge, in arrival order,
with the scenario's own traffic (or replace it, without `background`). It stages arrivals only up
to the tick being taken (`horizon()` is -inf), so the ids a tick admits are the rows of the batch it
just took, and an injected request learns its id.
The engine calls three hooks, each behind one `eng.external is not None` test (runs without
served requests pay nothing more): `admitted` after each arrival tick, `prefilled` when a prefill
batch ends (first token), `stepped` after each decode step (its tokens, MTP included). They append
(key, sim time, tokens so far, end) to `events`, which the caller drains between advances; `end`
is "admitted" when the scheduler takes the request, "" while streaming, "stop" when done, or a
rejection reason (twin.engine.requests.REJECT_REASONS); right after "stop" comes "times" with a
fifth field: (prefill start, prefill end, prompt tokens the EMS cache served).

`abort(key)`: the request's client went away (vLLM aborts a request whose client disconnects); it
leaves the engine wherever it is, and frees what it held (`drop`), with no event after.
"""
from __future__ import annotations

import math

import numpy as np

from twin.engine.ports import ExtensionHost
from twin.engine.requests import DECODE_QUEUE, DECODING, DONE, PREFILL, QUEUED, REJECT_REASONS, REJECTED
from twin.engine.source import Batch, concat


class External:
    def __init__(self, eng: ExtensionHost, background: bool = False):
        self.eng = eng
        self.base = eng.source if background else None
        self.block_size = eng.source.block_size
        self._pending: list[tuple] = []       # (arrival, input, output, block ids, key), arrival order
        self._taken: list[tuple[int, object]] = []   # (row in the batch just taken, key)
        self.watch: dict[int, list] = {}      # request id -> [key, tokens reported]
        self._rid: dict = {}                  # key -> request id, for the watched requests
        self._watched = np.zeros(0, dtype=np.int64)   # sorted ids of `watch` (rebuilt when it changes)
        self._dirty = False
        self.events: list[tuple] = []

    @classmethod
    def attach(cls, eng: ExtensionHost, background: bool = False) -> "External":
        """Install in front of a new engine's source (before its first advance)."""
        ext = cls(eng, background)
        eng.source = eng.incoming.source = ext
        return eng.extensions.add("external", ext)

    # ---- the source interface (twin.engine.source.Staged reads these) ------------------------------
    @property
    def exhausted(self) -> bool:
        return not self._pending and (self.base is None or self.base.exhausted)

    def horizon(self) -> float:
        return -math.inf

    def mean_rate(self) -> float:
        return self.base.mean_rate() if self.base is not None else 0.0

    def next_arrival(self) -> float:
        mine = self._pending[0][0] if self._pending else math.inf
        return min(mine, self.base.next_arrival()) if self.base is not None else mine

    def set_rate(self, now: float, rate: float) -> None:
        if self.base is None:
            raise ValueError("rate: this twin serves outside requests only (start it with background traffic "
                             "to set a rate)")
        self.base.set_rate(now, rate)

    def take(self, t_end: float) -> Batch | None:
        base = self.base.take(t_end) if self.base is not None else None
        k = 0
        while k < len(self._pending) and self._pending[k][0] < t_end:
            k += 1
        if not k:
            return base
        mine, self._pending = self._pending[:k], self._pending[k:]
        sizes = [len(m[3]) for m in mine]
        ours = Batch(np.array([m[0] for m in mine]), np.array([m[1] for m in mine], dtype=np.int64),
                     np.array([m[2] for m in mine], dtype=np.int64),
                     np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                     np.concatenate([m[3] for m in mine]).astype(np.int64))
        both = concat([base, ours])
        n_base = len(base) if base is not None else 0
        # stable merge by arrival: the background's rows first at equal times
        order = np.argsort(both.arrival, kind="stable")
        if n_base:
            both = _reorder(both, order)
        where = np.empty(len(order), dtype=np.int64)
        where[order] = np.arange(len(order))
        self._taken = [(int(where[n_base + i]), m[4]) for i, m in enumerate(mine)]
        return both

    # ---- injection and the hooks ---------------------------------------------------------------
    def inject(self, arrival: float, input_tokens: int, output_tokens: int, blocks: np.ndarray, key) -> None:
        """A request arriving at sim time `arrival` (moved to now if already past); the arrival
        chain restarts from now, as a rate change restarts it."""
        eng = self.eng
        last = self._pending[-1][0] if self._pending else eng.env.now
        self._pending.append((max(arrival, eng.env.now, last), int(input_tokens), int(output_tokens),
                              np.asarray(blocks, dtype=np.int64), key))
        eng.restart_arrivals()

    def admitted(self, ids: np.ndarray | None) -> None:
        """After a tick: the taken requests' ids (those past `ids` were refused, window full)."""
        if not self._taken:
            return
        taken, self._taken = self._taken, []
        now, req = self.eng.env.now, self.eng.req
        for pos, key in taken:
            if ids is None or pos >= len(ids):
                self.events.append((key, now, 0, "overloaded"))
                continue
            rid = int(ids[0]) + pos
            if req.state[rid] == REJECTED:
                self.events.append((key, now, 0, REJECT_REASONS[int(req.reason[rid]) - 1]))
            else:
                self.watch[rid] = [key, 0]
                self._rid[key] = rid
                self._dirty = True
                self.events.append((key, now, 0, "admitted"))

    def _hits(self, ids: np.ndarray) -> np.ndarray:
        if self._dirty:
            self._watched = np.fromiter(self.watch, dtype=np.int64, count=len(self.watch))
            self._watched.sort()
            self._dirty = False
        return np.isin(ids, self._watched, assume_unique=True) if len(self._watched) else ids[:0] > 0

    def _report(self, rid: int, made: int, done: bool) -> None:
        w = self.watch[rid]
        if made > w[1] or done:
            w[1] = max(made, w[1])
            self.events.append((w[0], self.eng.env.now, w[1], "stop" if done else ""))
        if done:
            req = self.eng.req
            self.events.append((w[0], self.eng.env.now, w[1], "times", (
                float(req.prefill_start[rid]), float(req.prefill_end[rid]), int(req.cached[rid]))))
            del self.watch[rid]
            del self._rid[w[0]]
            self._dirty = True

    def abort(self, key) -> bool:
        """The client of `key` went away: the request leaves now, not yet taken or in the engine
        (`drop`); False if it is not here (already over)."""
        for i, p in enumerate(self._pending):
            if p[4] == key:
                del self._pending[i]
                return True
        rid = self._rid.pop(key, None)
        if rid is None:
            return False
        del self.watch[rid]
        self._dirty = True
        drop(self.eng, rid)
        return True

    def keys(self) -> list:
        """Keys of the requests not over (pending or watched)."""
        return [p[4] for p in self._pending] + list(self._rid)

    def prefilled(self, ids: np.ndarray) -> None:
        """A prefill batch ended: its prompts' first token (a one-token reply is done)."""
        if not self.watch:
            return
        req = self.eng.req
        for rid in ids[self._hits(ids)].tolist():
            made = int(req.generated[rid])
            self._report(rid, made, made >= int(req.output[rid]))

    def stepped(self, ids: np.ndarray, left: np.ndarray, fin: np.ndarray) -> None:
        """A decode step ended: `ids` go on with `left` tokens to make, `fin` are done."""
        if not self.watch:
            return
        out = self.eng.req.output
        hit = self._hits(ids)
        for rid, lf in zip(ids[hit].tolist(), left[hit].tolist()):
            self._report(rid, int(out[rid]) - lf, False)
        for rid in fin[self._hits(fin)].tolist():
            self._report(rid, int(out[rid]), True)

    def lost(self) -> None:
        """Watched requests that ended without a step reporting it (none expected): said once."""
        req = self.eng.req
        for rid in [r for r in self.watch if r < req.base or req.state[r] >= DONE]:
            self._report(rid, self.watch[rid][1], True)


def drop(eng, rid: int) -> None:
    """Request `rid` is abandoned by its client: out of its queue or decode batch at once, its KV
    reservation and batch slot freed, ended as a client that gave up (the engine's timed_out
    count). One inside work in progress (a prefill batch, KV on its way to decode, a queue a
    fault is moving it between) cannot be taken out: it is cut to the tokens it has made (one at
    least), so it ends when that work does and then holds nothing."""
    req, now = eng.req, eng.env.now
    r = rid - req.base
    state, idx = int(req.state.a[r]), int(req.instance.a[r])
    try:
        if state == QUEUED and idx >= 0:
            inst = eng.prefill[idx]
            inst.queue.remove(rid)
            inst.queued_tokens -= int(req.input.a[r])
            inst.done.pop(rid, None)           # (its chunks so far, with chunked prefill)
        elif state == DECODE_QUEUE and idx >= 0:
            eng.decode[idx].queue.remove(rid)
        elif state == DECODING and idx >= 0 and (eng.decode[idx].ids == rid).any():
            inst = eng.decode[idx]
            inst.evict(inst.ids == rid, queue=False)
        else:
            raise ValueError
    except ValueError:                     # in work in progress, or between places
        if state < DONE:
            req.output.a[r] = max(int(req.generated.a[r]), 1)
            if state == PREFILL and idx >= 0 and eng.prefill[idx].partial.pop(rid, None) is not None:
                eng.prefill[idx].queued_tokens -= int(req.input.a[r])   # its chunk in progress is its last
        return
    req.time_out(np.array([rid], dtype=np.int64), np.array([now]))


def _reorder(b: Batch, order: np.ndarray) -> Batch:
    """The batch's requests in `order`, their block lists moved with them."""
    lens = np.diff(b.ptr)[order]
    ptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    ids = np.concatenate([b.ids[b.ptr[i]:b.ptr[i + 1]] for i in order.tolist()]) if len(b.ids) else b.ids
    return Batch(b.arrival[order], b.input[order], b.output[order], ptr, ids.astype(np.int64))
