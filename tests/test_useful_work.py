"""Decode useful work on the constant predictor: simulated tokens/s per decode NPU against the
model's tokens/s per NPU at the operating point (exact: no MTP, 40 ms steps)."""
import numpy as np
import pytest

from twin.engine import Engine
from twin.predict.constant import ConstantPredictor

DEP = "qwen3-235b-cloudmatrix"      # no MTP: one token per sequence per step
DECODE_S = 0.04


def engine(load: float) -> Engine:
    pred = ConstantPredictor(DEP, decode_ms=DECODE_S * 1e3)
    eng = Engine("paper-decode", seed=1, load=load, deployment=DEP, predictor=pred, duration_s=30)
    eng.advance(30)
    return eng


def test_saturated_decode_does_the_operating_points_work():
    """Every step holds the batch cap, so the model's tok/s at the current batch is the operating
    point's, batch / step time; an interval holds 24-26 steps of 40 ms, so useful work is 0.96-1.04."""
    eng = engine(1.6)
    npu_batch = eng.dep.decode.batch_per_die * eng.pm.dies_per_npu
    snap = eng.snapshot()
    assert snap.kpis["decode_op_tps_per_npu"] == pytest.approx(npu_batch / DECODE_S, rel=1e-12)
    h = eng.metrics.frame()
    steady = h[h.t > 10]
    np.testing.assert_allclose(steady.decode_model_tps_per_npu, npu_batch / DECODE_S, rtol=1e-12)
    assert set((steady.decode_useful / DECODE_S).round(9)) <= {24.0, 25.0, 26.0}
    np.testing.assert_allclose(steady.decode_useful, steady.output_tps_per_npu / (npu_batch / DECODE_S), rtol=1e-12)


def test_half_load_is_busy_all_the_time_but_does_half_the_work():
    """At half the arrival rate the decode pool still steps back to back (busy 100%), with half
    the batch: useful work reads about 50%, which "busy" hides."""
    eng = engine(0.5)
    h = eng.metrics.frame()
    steady = h[h.t > 15]
    assert steady.util_decode.min() == 1.0
    assert steady.decode_useful.mean() == pytest.approx(0.5, abs=0.03)
    per_npu = steady.decode_batch_per_npu
    np.testing.assert_allclose(steady.decode_model_tps_per_npu, per_npu / DECODE_S, rtol=1e-12)   # linear: exact
