"""MoE-attention disaggregation: calibrated to xDeepServe's published peak decode, compared at the same TPOT."""
import pytest

from twin.model.config import CatalogError
from twin.predict import disagg
from twin.predict.disagg import Disaggregated

NAME = "xdeepserve-r1-disagg"


def test_calibration_point_within_its_band_and_compared_with_cloudmatrix_infer():
    r = Disaggregated(NAME).report()
    assert r["label"] == "calibration" and r["band_pct"] == 15
    assert r["tpot_ms"] <= 50
    assert r["tokens_per_s_per_chip"] == pytest.approx(2400, rel=0.15)
    assert r["calibration"]["within_band"]
    # the co-located deployment at the same TPOT, from the same predictor
    v = r["versus"]
    assert v["deployment"] == "cloudmatrix-infer-paper" and v["tpot_ms"] == r["tpot_ms"]
    assert 0 < v["tokens_per_s_per_chip"] < r["tokens_per_s_per_chip"]


def test_handoff_is_the_catalog_all_to_all_at_the_busier_side():
    d = Disaggregated(NAME)
    r = d.decode_step()
    f, pm = d.form, d.pm
    q = f.batch_per_attention_die / f.microbatches * 2             # MTP: 1 + 1 draft token a sequence
    per_rank = q * d.attn_dies / d.expert_dies                      # 576 attention dies send to 192 expert dies
    want = pm.a2a(d.attn_dies + d.expert_dies, per_rank, pm.model.dispatch_bytes_per_token, kernel="ub")[0]
    assert r["handoff_kernel"] == "ub"
    assert r["per_layer_ms"]["dispatch"] == pytest.approx(want * 1e3, abs=1e-4)
    assert r["per_layer_ms"]["layer"] == pytest.approx(max(
        3 * r["per_layer_ms"]["attention"], 3 * r["per_layer_ms"]["experts"],
        3 * max(r["per_layer_ms"]["dispatch"], r["per_layer_ms"]["combine"]),
        sum(r["per_layer_ms"][k] for k in ("attention", "dispatch", "experts", "combine"))), abs=2e-4)


def test_without_the_fitted_attention_speed_the_form_misses_the_point():
    d = Disaggregated(NAME)
    d.form = d.form.model_copy(update={"attention_speedup": 1.0})
    assert d.decode_step()["tpot_ms"] > 50                        # the fitted constant is what meets it


def test_expert_slots_must_spread_evenly(monkeypatch):
    bad = disagg.forms()[NAME].model_copy(update={"redundant_experts": 100})
    monkeypatch.setattr(disagg, "forms", lambda: {NAME: bad})
    with pytest.raises(CatalogError, match="356 expert slots cannot be spread evenly over 192 dies"):
        Disaggregated(NAME)
    with pytest.raises(CatalogError, match="unknown"):
        Disaggregated("no-such-form")
