"""The calibrated time predictor under its long-standing name: `twin.predict.perf.PerfModel` is
`twin.predict.roofline.PerfModel` (the CLI, the pages and the calibration use this module)."""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from twin.model.config import constants
from twin.predict.base import HEALTHY, NetState, StepResult, TimePredictor
from twin.predict.economics import figures
from twin.predict.roofline import PerfModel

__all__ = ["HEALTHY", "NetState", "PerfModel", "StepResult", "TimePredictor", "constants", "decode_curve", "economics",
           "with_net"]


def with_net(pm: TimePredictor, **fractions) -> TimePredictor:
    """`pm` with some plane health fractions changed (e.g. ub=0.5)."""
    return pm.with_net(replace(pm.net, **fractions))


def economics(pm: PerfModel, tokens_per_s_per_chip: float) -> dict:
    """Per-chip, per-TFLOPS, per-kW and $/million-token figures of a throughput on pm's system."""
    peak = pm.chip.peak_tflops(pm.dep.precision) * pm.dies_per_npu
    return figures(tokens_per_s_per_chip, peak, pm.system.chip_power_kw, pm.system.usd_per_chip_hour)


# batch per NPU of the Trade-offs curve (finer than DECODE_CURVE_BATCHES around the operating points)
TRADEOFF_BATCHES = (1, 2, 4, 6, 8, 12, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 128, 144, 160,
                    192, 224, 256)


@lru_cache(maxsize=32)
def decode_curve(deployment: str, kv_len: int) -> tuple:
    """Decode throughput against TPOT at each batch of TRADEOFF_BATCHES: the curve the Trade-offs page
    draws and the lessons read."""
    return tuple(PerfModel(deployment).decode_curve(kv_len, list(TRADEOFF_BATCHES)))

