"""A predictor with fixed step times, for tests (as splitwise-sim keeps a ConstantPerformanceModel):
engine tests on it can expect exact times and counts. Memory geometry is the deployment's real one;
a partitioned UB plane (a fault) still makes steps never finish, as in the roofline model, and a
slow die paces the step: its time is the fixed one times its batch share over its speed, when
that is longer (a whole step bound by its slowest rate)."""
from __future__ import annotations

import math

from twin.model import rules
from twin.predict.base import HEALTHY, StepResult, TimePredictor, register


@register("constant")
class ConstantPredictor(TimePredictor):
    def __init__(self, deployment, cat=None, net=HEALTHY, k=None, *, prefill_ms: float = 100.0,
                 decode_ms: float = 50.0):
        super().__init__(deployment, cat, net, k)
        if not (prefill_ms > 0 and decode_ms > 0):
            raise ValueError(f"prefill_ms = {prefill_ms}, decode_ms = {decode_ms}: allowed > 0")
        self.prefill_ms, self.decode_ms = float(prefill_ms), float(decode_ms)

    def _ms(self, ms: float) -> float:
        h = self.health
        if h.die_slow:
            ms *= max(1.0, h.load / min(h.compute, h.hbm))
        return math.inf if self.net.partitioned else ms

    def decode_step(self, batch_per_npu=None, kv_len=4096, mtp=None, **kw) -> StepResult:
        dep = self.dep
        b_npu = dep.decode.batch_per_die * self.dies_per_npu if batch_per_npu is None else batch_per_npu
        drafts = rules.draft_tokens(self.model.mtp_modules, dep.mtp if mtp is None else mtp,
                                     dep.mtp_draft_steps)
        per_seq = rules.expected_tokens_per_step(drafts, dep.mtp_acceptance)
        step = self._ms(self.decode_ms)
        tpot = step / per_seq
        return StepResult("decode", step, b_npu / self.dies_per_npu * per_seq,
                          b_npu / tpot * 1e3 if b_npu else 0.0, {"constant": step}, tpot_ms=tpot)

    def prefill_batch(self, prompt_len=4096, tokens_per_npu=None, reuse=0.0, **kw) -> StepResult:
        t_npu = (self.dep.prefill.tokens_per_die * self.dies_per_npu if tokens_per_npu is None
                 else tokens_per_npu)
        step = self._ms(self.prefill_ms)
        return StepResult("prefill", step, t_npu, t_npu / step * 1e3, {"constant": step}, ttft_ms=step)
