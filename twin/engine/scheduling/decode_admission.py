"""Decode admission: the queue's head, in order, while the KV the admitted sequences reserve
(prompt + all output tokens) stays within the instance's capacity; an empty instance always takes
its first sequence. Needs are whole tokens, so the running sums are exact (and the last is the
largest, so when it fits, all do). SLO-aware, it also admits no more than keep the predicted time
per output token (the decode step) within a TPOT SLO."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from twin.engine.scheduling.base import DECODE_ADMISSION, DecodeAdmission, register


@register(DECODE_ADMISSION, "fifo-kv-reserve")
class FifoKvReserve(DecodeAdmission):
    def admit(self, need, reserved, kv_capacity, empty, inst=None):
        total = reserved + int(np.add.reduce(need))     # Python numbers (numpy scalars are slow)
        if total <= kv_capacity:          # all fit (needs >= 0: the last running sum is the largest)
            return len(need)
        fits = reserved + np.cumsum(need) <= kv_capacity
        if empty and len(fits):
            fits[0] = True
        return len(fits) if fits.all() else int(np.argmin(fits))


@dataclass(frozen=True)
class TpotConfig:
    tpot_slo_ms: float = 0.0    # 0: the deployment's TPOT SLO (twin/catalog/deployments.toml, ref 4: 50 ms)

    def check(self, where: str) -> None:
        if self.tpot_slo_ms and not 1.0 <= self.tpot_slo_ms <= 10_000.0:
            raise ValueError(f"{where}: tpot_slo_ms = {self.tpot_slo_ms:g}: allowed 1 to 10000 (ms), "
                             "or 0 for the deployment's")


@register(DECODE_ADMISSION, "slo-tpot")
class SloTpot(FifoKvReserve):
    """Of what fits the KV (fifo-kv-reserve), the longest head whose predicted decode step, with
    them running, stays within the TPOT SLO; an empty instance still takes its first sequence. The
    prediction errs on the slow side: an admitted sequence's context is taken at its whole
    reservation (prompt + all output), and a step is taken as one token (no multi-token prediction)."""
    Config = TpotConfig

    def admit(self, need, reserved, kv_capacity, empty, inst=None):
        k = super().admit(need, reserved, kv_capacity, empty)
        eng = inst.eng
        slo = (self.config.tpot_slo_ms or eng.dep.tpot_slo_ms) / 1e3
        n, step = len(inst.ids), eng.timing.decode_seconds
        ctx = np.cumsum(need[:k]) + inst.ctx_sum
        lo, hi = (1 if empty else 0), k          # the step grows with the batch: bisect the longest head
        while lo < hi:
            m = (lo + hi + 1) // 2
            if step(inst, (n + m) / inst.npus, float(ctx[m - 1]) / (n + m)) <= slo:
                lo = m
            else:
                hi = m - 1
        return min(lo, k)
