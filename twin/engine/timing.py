"""Step times from the instance's time predictor, memoised per shape bucket, and MTP acceptance.

Prefill step times are memoised per shape bucket: prompt length and tokens per NPU on a geometric
grid of PREFILL_GRID steps per doubling (a value is at most 2^(1/2048) - 1 = 0.034% from its grid
point), EMS reuse to the nearest 1/REUSE_GRID. Powers of two and reuse in 1/8ths are grid points
(exact). tests/test_speed.py measures and prints the step-time error of this rounding. Fixed-length
workloads hit the memo on almost every batch; varied lengths rarely do, so it is kept bounded.
Decode steps are memoised per (batch per NPU to 1/DECODE_BATCH_GRID, context to DECODE_CTX_BUCKET
tokens). All grids are assumptions (accuracy against memo hits), measured by tests/test_speed.py.
Engines that predict with their deployment's own PerfModel share these memos for the life of the
process (`SHARED`): the same deployment gives the same times, so a reset, a sandbox, a what-if or a
region's next supernode starts with the step times the last run of that deployment worked out.
"""
from __future__ import annotations

import math

import numpy as np

from twin.engine.compiled import FLOAT64, INT64, kernel

from twin.model import rules

PREFILL_GRID = 1024
REUSE_GRID = 4096
MEMO_LIMIT = 4096
MAX_REUSE = 0.99            # the predictor needs reuse < 1: at least 1% of a batch is computed
DECODE_BATCH_GRID = 4
DECODE_CTX_BUCKET = 128
# deployment -> (kind, NPUs) -> memo: the step times of the deployment's own (healthy) PerfModel, a
# pure function of the deployment (the catalog and perf.toml are loaded once per process); the
# SHARED_DEPLOYMENTS most recently started deployments are kept, so a server whose visitors try
# deployment after deployment holds a bounded number (assumption: more than a room uses at once)
SHARED: dict = {}
SHARED_DEPLOYMENTS = 16


def _shared(dep) -> dict:
    """The process's memos of `dep`, now the most recently started; the least recent beyond
    SHARED_DEPLOYMENTS go (an engine still running keeps its own reference)."""
    memos = SHARED.pop(dep, None)
    SHARED[dep] = memos = {} if memos is None else memos
    while len(SHARED) > SHARED_DEPLOYMENTS:
        del SHARED[next(iter(SHARED))]
    return memos


class StepTimes:
    """Timing look-ups of one engine: step seconds per instance, decode caps, MTP draws."""

    def __init__(self, pm, dep, scenario, rng, shared: bool = False):
        """`shared`: `pm` is the deployment's own PerfModel, so its memos are the process's (SHARED)."""
        self.pm, self.dep, self.scenario, self.rng = pm, dep, scenario, rng
        self.drafts = rules.draft_tokens(pm.model.mtp_modules, dep.mtp, dep.mtp_draft_steps)
        self._uniform = np.empty(0)        # reused buffers: MTP acceptance draws, finished ids
        self._fin = np.empty(0, dtype=np.int64)
        self._memos: dict[tuple, dict] = _shared(dep) if shared else {}
        self.record = None                 # a step recorder (twin serve's metrics: serve/metrics.StepStats), or None

    def memo(self, kind: str, npus: float) -> dict:
        """The step-time memo that instances of one kind and size share while they predict with
        the engine's own predictor: the same keys give the same times, so 294 prefill instances
        need not each fill their own (nor, with `shared`, the next engine of the deployment). An
        instance whose network or health changes gets a memo of its own (network.py)."""
        return self._memos.setdefault((kind, npus), {})

    def decode_seconds(self, inst, batch_per_npu: float, ctx: float) -> float:
        """Step time memoised per (batch per NPU, context) bucket."""
        key = (round(batch_per_npu * DECODE_BATCH_GRID), int(ctx // DECODE_CTX_BUCKET))
        t = inst.memo.get(key)
        if t is None:
            t = inst.pm.decode_step(max(key[0] / DECODE_BATCH_GRID, 1 / DECODE_BATCH_GRID),
                                    (key[1] + 0.5) * DECODE_CTX_BUCKET).step_ms / 1e3
            inst.memo[key] = t
        return t

    def decode_cap(self, inst) -> int:
        """Sequences an instance may hold: the deployment's batch cap within the TPOT SLO."""
        if inst.cap is None:
            kv = self.scenario.input.mean_value() + self.scenario.output.mean_value() / 2
            slo = inst.memo.get(("slo", kv))    # (a predictor's search: once per memo, not per instance)
            if slo is None:
                slo = inst.memo["slo", kv] = inst.pm.max_batch_for_slo(kv_len=kv)["batch_per_npu"]
            per_npu = min(self.dep.decode.batch_per_die * self.pm.dies_per_npu, max(slo, 1))
            inst.cap = max(1, int(per_npu * inst.npus))
        return inst.cap

    def prefill_seconds(self, inst, sizes: np.ndarray, total: int, square: int, cached: int) -> float:
        """A prefill batch's time from the predictor: `sizes` the tokens each prompt prefills,
        `total` and `square` their sum and sum of squares (exact integers), `cached` the tokens
        EMS served. Memoised per exact shape, then per shape bucket (see PREFILL_GRID); a 4-tuple
        is no bucket's key, and both go when the memo is cleared. Below 2^53 the sum of squares is
        exact as a float too (a batch would need prompts of ~95M tokens to pass it); past it,
        the float dot product of the sizes."""
        if square >= 1 << 53:
            if self.record is not None:
                self.record.prefill(total - cached)
            return self._prefill_time(inst, float(total), float(sizes @ sizes.astype(float)) / total,
                                      float(cached))
        key = (total, square, cached, -1)
        t = inst.memo.get(key)
        if t is None:
            t = self._prefill_time(inst, float(total), float(square) / float(total), float(cached))
            inst.memo[key] = t
        if self.record is not None:
            self.record.prefill(total - cached)
        return t

    def _prefill_time(self, inst, total: float, prompt: float, cached: float) -> float:
        reuse = min(cached / total, MAX_REUSE)
        key = (round(math.log2(prompt) * PREFILL_GRID), round(math.log2(total / inst.npus) * PREFILL_GRID),
               round(reuse * REUSE_GRID))
        t = inst.memo.get(key)
        if t is None:
            if len(inst.memo) >= MEMO_LIMIT:
                inst.memo.clear()
            t = inst.pm.prefill_batch(2.0 ** (key[0] / PREFILL_GRID), 2.0 ** (key[1] / PREFILL_GRID),
                                      reuse=key[2] / REUSE_GRID).step_ms / 1e3
            inst.memo[key] = t
        return t

    def step(self, ids: np.ndarray, left: np.ndarray) -> tuple[int, np.ndarray, int]:
        """One decode step over the sequences `ids` with `left` tokens still to produce: each takes
        its accepted tokens (twin.model.rules.accepted_tokens); the finished ones (left <= 0) leave.
        In place: the k still decoding move to the front of `ids` and `left`, in order. Returns
        (k, the finished ids in order, tokens made), a finished sequence making no more than it
        had left."""
        n = len(left)
        if len(self._fin) < n:              # reused buffers: the same draws as rng.random(n)
            self._uniform = np.empty(max(n, 2 * len(self._fin)))
            self._fin = np.empty(len(self._uniform), dtype=np.int64)
        fin = self._fin
        if self.drafts == 1:                # the draws decide one extra token each
            u = self._uniform[:n]
            self.rng.random(out=u)
            k, m, made = _step(ids, left, u, self.dep.mtp_acceptance, fin)
            if self.record is not None:
                self.record.decode(n, made, (np.count_nonzero(u < self.dep.mtp_acceptance),))
            return k, fin[:m].copy(), made
        extra = 0
        if self.drafts > 1:                 # tokens beyond the first, taken off before the step
            got = rules.accepted_tokens(self.rng.random((n, self.drafts)), self.dep.mtp_acceptance) - 1
            left -= got
            extra = int(got.sum())
        k, m, made = _step(ids, left, _NO_DRAWS, 0.0, fin)
        if self.record is not None:
            self.record.decode(n, made + extra, np.bincount(got, minlength=self.drafts + 1)[::-1].cumsum()[::-1][1:]
                               if self.drafts > 1 else ())
        return k, fin[:m].copy(), made + extra


_NO_DRAWS = np.zeros(0)


@kernel(signature=f"({INT64}, {INT64}, {FLOAT64}, float64, {INT64})")
def _step(ids, left, u, p, fin):
    """StepTimes.step's pass over the batch: one token each, one more where u[i] < p (no draws:
    none more), then the finished ids to `fin` and the rest compacted in order. Returns (kept,
    finished, tokens made, less the overshoot of the finished); the numpy operations it fuses
    (less, subtract, count, compare, nonzero, two masks) give the same integers."""
    n = len(left)
    draws = len(u) > 0
    k = m = 0
    made = 0
    for i in range(n):
        x = left[i] - 1
        made += 1
        if draws and u[i] < p:
            x -= 1
            made += 1
        if x > 0:
            ids[k] = ids[i]
            left[k] = x
            k += 1
        else:
            fin[m] = ids[i]
            m += 1
            made += x
    return k, m, made
