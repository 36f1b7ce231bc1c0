"""Step times from the instance's time predictor, memoised per shape bucket, and MTP acceptance.

Prefill step times are memoised per shape bucket: prompt length and tokens per NPU on a geometric
grid of PREFILL_GRID steps per doubling (a value is at most 2^(1/2048) - 1 = 0.034% from its grid
point), EMS reuse to the nearest 1/REUSE_GRID. Powers of two and reuse in 1/8ths are grid points
(exact). tests/test_speed.py measures and prints the step-time error of this rounding. Fixed-length
workloads hit the memo on almost every batch; varied lengths rarely do, so it is kept bounded.
Decode steps are memoised per (batch per NPU to 1/DECODE_BATCH_GRID, context to DECODE_CTX_BUCKET
tokens). All grids are assumptions (accuracy against memo hits), measured by tests/test_speed.py.
"""
from __future__ import annotations

import math

import numpy as np

from .. import rules

PREFILL_GRID = 1024
REUSE_GRID = 4096
MEMO_LIMIT = 4096
MAX_REUSE = 0.99            # the predictor needs reuse < 1: at least 1% of a batch is computed
DECODE_BATCH_GRID = 4
DECODE_CTX_BUCKET = 128


class StepTimes:
    """Timing look-ups of one engine: step seconds per instance, decode caps, MTP draws."""

    def __init__(self, pm, dep, scenario, req, rng):
        self.pm, self.dep, self.scenario, self.req, self.rng = pm, dep, scenario, req, rng
        self.drafts = rules.draft_tokens(pm.model.mtp_modules, dep.mtp)
        self._uniform = np.empty(0)        # reused buffers for the MTP acceptance draws
        self._accepted = np.empty(0, dtype=bool)

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
            slo = inst.pm.max_batch_for_slo(kv_len=kv)["batch_per_npu"]
            per_npu = min(self.dep.decode.batch_per_die * self.pm.dies_per_npu, max(slo, 1))
            inst.cap = max(1, int(per_npu * inst.npus))
        return inst.cap

    def prefill_tokens(self, prompts: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Tokens to prefill for the requests at `rows` (prompts: their prompt tokens); a requeued
        request also recomputes the tokens it generated."""
        return prompts + np.maximum(self.req.generated.a[rows] - 1, 0)

    def prefill_seconds(self, inst, inputs: np.ndarray, cached: np.ndarray) -> float:
        """Batch time from the predictor, memoised per shape bucket (see PREFILL_GRID)."""
        total = float(np.add.reduce(inputs))
        return self._prefill_time(inst, total, float(inputs @ inputs.astype(float)) / total,
                                  float(np.add.reduce(cached)))

    def prefill_seconds_few(self, inst, tokens: list[int], cached: list[int]) -> float:
        """prefill_seconds() of a small batch in plain Python numbers, the same values: its sums
        of squares are exact integers below 2^53 (where the array path's float dot product is exact
        in any order; a batch would need prompts of ~95M tokens to pass it). Memoised per exact
        shape too, in the same memo (so both go when it is cleared): a 4-tuple is no bucket's key."""
        total, square = sum(tokens), sum([t * t for t in tokens])
        if square >= 1 << 53:
            return self.prefill_seconds(inst, np.array(tokens), np.array(cached))
        c = sum(cached)
        key = (total, square, c, -1)
        t = inst.memo.get(key)
        if t is None:
            t = self._prefill_time(inst, float(total), float(square) / float(total), float(c))
            inst.memo[key] = t
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

    def advance(self, left: np.ndarray) -> int:
        """One decode step: take each sequence's accepted tokens (twin.rules.accepted_tokens)
        off `left` in place; returns the tokens made. With one draft token the draws stay a
        boolean mask (1 + accepted, never built as an integer array)."""
        n = len(left)
        if not self.drafts:
            left -= 1
            return n
        if self.drafts > 1:
            got = rules.accepted_tokens(self.rng.random((n, self.drafts)), self.dep.mtp_acceptance)
            left -= got
            return int(got.sum())
        if len(self._uniform) < n:          # reused buffers: the same draws as rng.random(n)
            self._uniform = np.empty(max(n, 2 * len(self._uniform)))
            self._accepted = np.empty(len(self._uniform), dtype=bool)
        u, acc = self._uniform[:n], self._accepted[:n]
        self.rng.random(out=u)
        np.less(u, self.dep.mtp_acceptance, out=acc)     # rules.accepted_tokens, minus the 1
        left -= acc
        left -= 1
        return n + int(np.count_nonzero(acc))
