"""Request workloads for the engine: real traces and synthetic generators, as numpy arrays.

A run may replay a million requests, so a `Workload` holds one array per field (no per-request
objects) and every loader and generator is vectorised. Prompt prefixes are lists of KV-block ids in
CSR form (`block_ptr`, `block_ids`): the ids are prefix hashes, so the same id means the same reusable
KV block, which is what the EMS context cache keys on.

Hit-ratio definition (checked on the Mooncake conversation trace, whose README quotes 0.366): a block
counts as a hit when its id appeared in an earlier request. Counting only the contiguous leading run
of such blocks (what a prefix cache can use, and what `EMS.lookup` returns) gives the same number,
0.3664, because Mooncake ids are prefix hashes: a seen id implies its whole prefix was seen. The
synthetic generator keeps that property. `ideal_hit_ratio(..., prefix=False)` computes the other one.

This package: `model` (the Workload arrays and the ideal hit ratio), `tracefile` (Mooncake, Azure
and BurstGPT loaders with their checks), `synthetic` (seeded generators). Import from `twin.workload`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

_INT64 = (-(1 << 63), (1 << 63) - 1)
_INT32_MAX = (1 << 31) - 1
MOONCAKE_BLOCK_SIZE = 512  # traces/README.md: each hash id names one 512-token block


class TraceError(ValueError):
    """A trace file cannot be used; the message names the file, line, field and what is allowed."""


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests sorted by arrival, one numpy array per field; block ids of request i are
    `block_ids[block_ptr[i]:block_ptr[i + 1]]`. `skipped`/`skip_reasons` report rows a lenient load
    dropped and `notes` anything else done to the input (e.g. sorting), so nothing changes silently."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    block_ptr: np.ndarray
    block_ids: np.ndarray
    block_size: int
    source: str
    skipped: int = 0
    skip_reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def __post_init__(self):
        for name, dtype in (("arrival_s", np.float64), ("input_tokens", np.int32),
                            ("output_tokens", np.int32), ("block_ptr", np.int64), ("block_ids", np.int64)):
            arr = np.ascontiguousarray(getattr(self, name), dtype=dtype)
            arr.flags.writeable = False  # frozen means frozen: the engine shares these arrays
            object.__setattr__(self, name, arr)
        n = len(self.arrival_s)
        if len(self.input_tokens) != n or len(self.output_tokens) != n or len(self.block_ptr) != n + 1:
            raise ValueError(f"Workload: array lengths disagree (arrival_s {n}, input_tokens "
                             f"{len(self.input_tokens)}, output_tokens {len(self.output_tokens)}, "
                             f"block_ptr {len(self.block_ptr)}; block_ptr must have n + 1 = {n + 1})")
        if self.block_ptr[0] != 0 or self.block_ptr[-1] != len(self.block_ids):
            raise ValueError(f"Workload: block_ptr must start at 0 and end at len(block_ids) = "
                             f"{len(self.block_ids)}")
        if n > 1 and np.any(np.diff(self.arrival_s) < 0):
            raise ValueError("Workload: arrival_s must be sorted (non-decreasing)")

    def __len__(self) -> int:
        return len(self.arrival_s)

    def blocks(self, i: int) -> np.ndarray:
        return self.block_ids[self.block_ptr[i]:self.block_ptr[i + 1]]

    @property
    def num_blocks(self) -> np.ndarray:
        return np.diff(self.block_ptr)

    def slice_time(self, t0: float, t1: float) -> Workload:
        """Requests with t0 <= arrival < t1; times are kept, not shifted to 0."""
        if not t0 <= t1:
            raise ValueError(f"slice_time: t0 = {t0} must be <= t1 = {t1}")
        lo, hi = np.searchsorted(self.arrival_s, [t0, t1], side="left")
        b0, b1 = self.block_ptr[lo], self.block_ptr[hi]
        return replace(self, arrival_s=self.arrival_s[lo:hi], input_tokens=self.input_tokens[lo:hi],
                       output_tokens=self.output_tokens[lo:hi],
                       block_ptr=self.block_ptr[lo:hi + 1] - b0, block_ids=self.block_ids[b0:b1],
                       source=f"{self.source} [{t0:g}, {t1:g}) s")

    def scaled(self, speedup: float) -> Workload:
        """Replay `speedup` times faster (arrivals divided by speedup): the same requests at a higher rate."""
        _check_number("scaled", "speedup", speedup, lo=0, lo_open=True)
        return replace(self, arrival_s=self.arrival_s / speedup, source=f"{self.source} x{speedup:g}")

    def summary(self) -> dict:
        n = len(self)
        span = float(self.arrival_s[-1] - self.arrival_s[0]) if n else 0.0
        out = {"source": self.source, "count": n, "span_s": span,
               "mean_rate_per_s": n / span if span > 0 else float("nan"),
               "block_size": self.block_size, "total_blocks": len(self.block_ids),
               "unique_blocks": int(np.unique(self.block_ids).size),
               "skipped": self.skipped}
        for name, arr in (("input", self.input_tokens), ("output", self.output_tokens)):
            # inverted_cdf: percentiles are observed values (matches traces/README.md figures)
            p50, p99 = np.percentile(arr, [50, 99], method="inverted_cdf") if n else (np.nan, np.nan)
            out.update({f"{name}_mean": float(arr.mean()) if n else float("nan"),
                        f"{name}_p50": float(p50), f"{name}_p99": float(p99)})
        out["ideal_block_hit_ratio"] = ideal_hit_ratio(self)
        out["ideal_token_hit_ratio"] = ideal_hit_ratio(self, tokens=True)
        return out


SHARED_MIN = 0.10   # assumption: a block id in >= 10% of a trace's requests is a shared system prompt


class LapIds:
    """Block ids of a looped trace: each replay (lap) is a new user population.

    Replaying the same conversations would hit every prompt from the second lap on (the hit ratio
    climbs to 100% and "no hit" disappears). So lap 0 keeps the trace's ids and every later lap
    gets fresh ones, except the blocks shared by many users (an id in at least SHARED_MIN of the
    requests: on the Mooncake conversation trace only id 0, its shared system prompt, 4.2% of the
    blocks), which every lap shares. Each lap then reuses prefixes as the trace itself does (ideal
    block hit ratio 0.366) plus the shared prompt. Fresh ids are dense and lie above the trace's
    largest id (below its smallest if there is no room above), one disjoint range per lap."""

    def __init__(self, w: Workload):
        ids = w.block_ids
        self.ids = ids
        uniq, dense = np.unique(ids, return_inverse=True)
        self.span = len(uniq)
        pairs = np.unique(np.repeat(np.arange(len(w), dtype=np.int64), w.num_blocks) * max(self.span, 1) + dense)
        users = np.bincount(pairs % max(self.span, 1), minlength=self.span)   # requests using each id
        self.shared = (users >= SHARED_MIN * max(len(w), 1))[dense]
        lo, hi = (int(uniq[0]), int(uniq[-1])) if len(uniq) else (0, 0)
        if hi + self.span * 1_000_000 < _INT64[1]:
            self.fresh, self.sign = dense.astype(np.int64) + hi + 1, 1
        else:
            self.fresh, self.sign = lo - 1 - dense.astype(np.int64), -1

    def __call__(self, lo: int, hi: int, lap: int) -> np.ndarray:
        """Ids of blocks lo:hi of the trace in replay `lap` (0 = the trace's own)."""
        if lap == 0:
            return self.ids[lo:hi]
        return np.where(self.shared[lo:hi], self.ids[lo:hi], self.fresh[lo:hi] + self.sign * (lap - 1) * self.span)


def ideal_hit_ratio(w: Workload, tokens: bool = False, prefix: bool = True) -> float:
    """Hit ratio of an infinite cache that sees the requests in order and stores each one's blocks.

    prefix=True counts only the leading run of previously seen blocks (what a KV cache can use);
    prefix=False counts every previously seen block. tokens=True weights blocks by their tokens
    (the last block of a prompt may be partial)."""
    total = len(w.block_ids)
    if total == 0:
        return 0.0
    lens = w.num_blocks
    req = np.repeat(np.arange(len(w)), lens)
    _, first, inverse = np.unique(w.block_ids, return_index=True, return_inverse=True)
    seen = req > req[first][inverse]  # id first appeared in an earlier request
    starts = w.block_ptr[:-1]
    if prefix:
        pos = np.arange(total) - np.repeat(starts, lens)
        miss_pos = np.where(seen, np.repeat(lens, lens), pos)
        nonempty = lens > 0
        hit_blocks = np.zeros(len(w), dtype=np.int64)
        hit_blocks[nonempty] = np.minimum.reduceat(miss_pos, starts[nonempty])
        if not tokens:
            return float(hit_blocks.sum() / total)
        hit_tok = np.minimum(hit_blocks * w.block_size, w.input_tokens)
        return float(hit_tok.sum() / w.input_tokens.sum(dtype=np.int64))
    if not tokens:
        return float(seen.sum() / total)
    sizes = np.full(total, w.block_size, dtype=np.int64)
    last = w.block_ptr[1:][lens > 0] - 1
    sizes[last] = (w.input_tokens - w.block_size * (lens - 1))[lens > 0]
    return float(sizes[seen].sum() / w.input_tokens.sum(dtype=np.int64))


def _check_number(where: str, name: str, value, lo=None, hi=None, lo_open=False, integer=False):
    kind = "an integer" if integer else "a number"
    rng = " and ".join(s for s in (
        f"{'>' if lo_open else '>='} {lo}" if lo is not None else "",
        f"<= {hi}" if hi is not None else "") if s)
    ok = isinstance(value, (int, np.integer)) if integer else isinstance(value, (int, float, np.number))
    ok = ok and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (lo is None or (value > lo if lo_open else value >= lo)) and (hi is None or value <= hi)
    if not ok:
        raise ValueError(f"{where}: {name} = {value!r}: must be {kind}{' ' + rng if rng else ''}")

