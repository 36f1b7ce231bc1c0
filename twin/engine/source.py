"""Arrival streams for a live run: trace replay (optionally looped) or synthetic traffic in chunks.

Synthetic traffic is generated chunk by chunk, each chunk from a seed derived from the run's seed
and the chunk's start time, so a run is the same whether it advances in 1 s or 60 s steps. A rate
change (a command at sim time t) discards the pending arrivals after t and regenerates from t.
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

from twin.workload import LapIds, Workload, synthetic
from twin.workload.resolve import open_trace
from twin.model import settings

CHUNK_S = 30.0     # synthetic generation window, sim seconds (a memory/speed trade-off only)
STAGE_S = 1.0      # arrivals written into the request table ahead of their ticks (speed only)
ARRIVAL_TICK_S = 0.005    # assumption: the global scheduler assigns new requests every 5 ms


@dataclass
class Batch:
    """Requests in arrival order; block ids in CSR form (ptr has one more entry than requests)."""
    arrival: np.ndarray
    input: np.ndarray
    output: np.ndarray
    ptr: np.ndarray
    ids: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival)

    def slice(self, i: int, j: int) -> "Batch":
        p = self.ptr[i:j + 1]
        return Batch(self.arrival[i:j], self.input[i:j], self.output[i:j], p - p[0],
                     self.ids[p[0]:p[-1]])


def _from_workload(w: Workload, offset: float) -> Batch:
    return Batch(w.arrival_s + offset, w.input_tokens.astype(np.int64),
                 w.output_tokens.astype(np.int64), w.block_ptr, w.block_ids)


class TraceSource:
    """Replays a trace at `speedup`; with `loop`, starts again after the last request, each lap a new
    user population (`twin.workload.LapIds`: fresh block ids but the widely shared ones)."""

    def __init__(self, trace: str, speedup: float, loop: bool, fmt: str = "auto",
                 lenient: bool = False):
        w = open_trace(trace, fmt, lenient)   # a dashboard upload (parsed when it arrived) or a file
        self.workload = w.scaled(speedup)
        self.loop = loop
        w = self.workload
        self.span = float(w.arrival_s[-1] - w.arrival_s[0]) + (1.0 / max(len(w) / max(w.arrival_s[-1], 1e-9), 1e-9))
        self._batch = _from_workload(w, 0.0)
        self._i = 0
        self._lap = 0
        self._lap_ids = LapIds(w) if loop else None
        self.block_size = w.block_size
        self.exhausted = False

    def mean_lengths(self) -> tuple[float, float]:
        return float(self.workload.input_tokens.mean()), float(self.workload.output_tokens.mean())

    def horizon(self) -> float:
        """Arrivals before this time can be taken without generating any (a trace: all)."""
        return float("inf")

    def mean_rate(self) -> float:
        return len(self.workload) / max(self.span, 1e-9)

    def take(self, t_end: float) -> Batch | None:
        """Requests arriving before t_end not yet taken."""
        parts = []
        while True:
            off = self._lap * self.span
            a = self._batch.arrival
            j = int(np.searchsorted(a + off, t_end, side="left"))
            if j > self._i:
                part = self._batch.slice(self._i, j)
                part.arrival = part.arrival + off
                if self._lap:        # a later lap: new users, the same shared system prompt
                    p = self._batch.ptr
                    part.ids = self._lap_ids(int(p[self._i]), int(p[j]), self._lap)
                parts.append(part)
                self._i = j
            if self._i < len(a) or not self.loop:
                self.exhausted = self._i >= len(a)
                break
            self._i, self._lap = 0, self._lap + 1
        return concat(parts)

    def next_arrival(self) -> float:
        """Arrival time of the next request not yet taken (inf when the trace is done)."""
        a = self._batch.arrival
        if self._i < len(a):
            return float(a[self._i]) + self._lap * self.span
        return float(a[0]) + (self._lap + 1) * self.span if self.loop and len(a) else float("inf")

    def set_rate(self, now: float, rate: float) -> None:
        raise ValueError("rate: a trace replays its own arrival times (change the speed-up or "
                         "switch to a synthetic scenario)")


class SyntheticSource:
    """Synthetic arrivals at `rate` req/s (changeable at any sim time)."""

    def __init__(self, rate: float, seed: int, kw: dict, offset_s: float = 0.0):
        self.rate = rate
        self.offset_s = offset_s       # the diurnal day's start within its period
        self.seed = seed
        self.kw = kw
        self.block_size = kw.get("block_size", 512)
        self._gen_until = 0.0
        self._pending: Batch | None = None
        self._pos = 0          # requests of _pending already taken (a cursor: no re-slicing)
        self._unique = 0
        self.exhausted = False

    def mean_rate(self) -> float:
        return self.rate

    def horizon(self) -> float:
        return self._gen_until

    def _chunk(self, t0: float) -> Batch:
        seed = int(np.random.SeedSequence([self.seed, int(t0 * 1000)]).generate_state(1)[0])
        w = synthetic(self.rate, CHUNK_S, seed, unique_base=self._unique, diurnal_phase_s=t0 + self.offset_s, **self.kw)
        self._unique += len(w.block_ids)
        return _from_workload(w, t0)

    def _extend(self) -> None:
        c = self._chunk(self._gen_until)
        p = self._pending
        rest = p.slice(self._pos, len(p)) if p is not None and self._pos < len(p) else None
        self._pending, self._pos = concat([rest, c]), 0
        self._gen_until += CHUNK_S

    def next_arrival(self) -> float:
        """Arrival time of the next request not yet taken (generating chunks as needed)."""
        while self._pending is None or self._pos >= len(self._pending):
            self._extend()
        return float(self._pending.arrival[self._pos])

    def take(self, t_end: float) -> Batch | None:
        while self._gen_until < t_end:
            self._extend()
        p = self._pending
        if p is None:
            return None
        j = int(p.arrival.searchsorted(t_end, "left"))
        if j <= self._pos:
            return None
        out, self._pos = p.slice(self._pos, j), j
        return out

    def set_rate(self, now: float, rate: float) -> None:
        """From `now` on, arrivals follow the new rate (pending later arrivals are redrawn)."""
        self.rate = settings.get("rate").check(rate)
        self._pending, self._pos = None, 0
        self._gen_until = now


def concat(parts: list) -> Batch | None:
    parts = [p for p in parts if p is not None and len(p.arrival)]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    offs = np.cumsum([0] + [len(p.ids) for p in parts])
    ptr = np.concatenate([parts[0].ptr[:1]] + [p.ptr[1:] + o for p, o in zip(parts, offs)])
    return Batch(np.concatenate([p.arrival for p in parts]), np.concatenate([p.input for p in parts]),
                 np.concatenate([p.output for p in parts]), ptr,
                 np.concatenate([p.ids for p in parts]))


class Staged:
    """A source's next arrivals, staged in the request table ahead of their ticks: one slice and
    one vector write per STAGE_S of arrivals, where a tick of one or two requests cost a slice
    and ten column writes. Requests needing more KV than a die holds (kv_cap tokens) are found
    when staged, so a tick checks for them only when it takes one (`took_long`). Arrivals beyond what the source has generated are never staged early,
    so chunks are generated at the same moments (and a rate change redraws the same ones)."""

    def __init__(self, source, req, blocks: bool, kv_cap: float):
        self.source, self.req, self.blocks, self.kv_cap = source, req, blocks, kv_cap
        self._t: list[float] = []      # arrival times of the staged requests (Python floats, for bisect)
        self._pos = 0                  # of which this many have been admitted
        self._until = -float("inf")    # the source has been staged up to here
        self._long: list[int] = []     # positions in _t of staged requests needing more than kv_cap
        self.took_long = False         # whether the last take() holds such a request

    @property
    def exhausted(self) -> bool:
        return self.source.exhausted and self._pos >= len(self._t)

    def next_arrival(self) -> float:
        return self._t[self._pos] if self._pos < len(self._t) else self.source.next_arrival()

    def take(self, t_end: float, room: int) -> np.ndarray | None:
        """Ids of the requests arriving before t_end not yet taken (now admitted), or None. Past
        `room` (the rows the request window can still take) they are refused without a row."""
        if t_end > self._until:
            self._stage(t_end)
        j = bisect_left(self._t, t_end, self._pos)
        if j == self._pos:
            return None
        n_long = bisect_left(self._long, j) if self._long else 0
        self.took_long = n_long > 0
        if n_long:
            del self._long[:n_long]
        k, self._pos = j - self._pos, j
        if k > room:
            ids = self.req.admit(room) if room > 0 else None
            self.req.refuse_staged(k - max(room, 0))
            return ids
        return self.req.admit(k)

    def _stage(self, t_end: float) -> None:
        until = max(t_end, min(t_end + STAGE_S, self.source.horizon()))
        batch = self.source.take(until)
        self._until = until
        if batch is not None:
            self.req.stage(batch.arrival, batch.input, batch.output,
                           batch.ptr if self.blocks else None, batch.ids if self.blocks else None)
            shift = self._pos
            del self._t[:shift]
            self._long = [i - shift for i in self._long]
            self._pos = 0
            self._long += (np.flatnonzero(batch.input + batch.output > self.kv_cap) + len(self._t)).tolist()
            self._t.extend(batch.arrival.tolist())

    def set_rate(self, now: float, rate: float) -> None:
        """The source redraws its arrivals from `now` on: the staged ones go."""
        self.source.set_rate(now, rate)
        self.req.unstage()
        self._t, self._pos, self._until, self._long = [], 0, -float("inf"), []


def make_source(sc, capacity_rps: float | None = None):
    """The arrivals of scenario `sc`: its trace, or synthetic arrivals at its rate (else its load times
    `capacity_rps`, the deployment's capacity by the predictor)."""
    if sc.workload == "trace":
        return TraceSource(sc.trace, sc.speedup, sc.loop, sc.trace_format, sc.lenient)
    kw = dict(arrival=sc.arrival, cv=sc.cv, diurnal_amplitude=sc.diurnal_amplitude,
              diurnal_period_s=sc.diurnal_period_s, input=sc.input.dist(),
              output=sc.output.dist(), reuse_rate=sc.reuse_rate, prefix_pool=sc.prefix_pool,
              block_size=sc.block_size)
    return SyntheticSource(sc.rate or sc.load * capacity_rps, sc.seed, kw, sc.diurnal_offset_s)

