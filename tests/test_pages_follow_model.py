"""Pages follow the model the viewed twin's deployment serves (issue 36, item 14): after a switch to the
Qwen3 deployment, the Overview's first line and intro name Qwen3-235B-A22B, in English and in Chinese."""
from __future__ import annotations

import importlib
import time

import pytest

from test_callbacks import wait_until


@pytest.fixture
def overview(dash_app):
    return importlib.import_module("pages.overview")


@pytest.mark.parametrize("lang, says", [("en", "serving Qwen3-235B-A22B"), ("zh", "Qwen3-235B-A22B")])
def test_overview_names_the_model_the_deployment_serves(overview, twin_registry, dash_app, lang, says):
    tw = twin_registry.shared()
    tw.control("reset", {"deployment": "qwen3-235b-cloudmatrix"})
    assert wait_until(lambda: tw.snapshot.deployment == "qwen3-235b-cloudmatrix"
                      and len(tw.snapshot.history.get("t", [])) >= 2)
    tw.control("pause")
    time.sleep(0.15)
    with dash_app.server.test_request_context("/", headers={"Cookie": f"twin_lang={lang}"}):
        out = overview.tick(1, "shared", None)
    text = " ".join([out["lede"], *out["intro"]])
    assert says in out["lede"] and "DeepSeek" not in text
    assert "Qwen3-235B-A22B" in out["intro"][1] and "235" in out["intro"][1] and "671" not in text
    assert "qwen3-235b-cloudmatrix" in out["intro"][1]
    if lang == "zh":
        assert "孪生" in out["lede"] and "混合专家" in out["intro"][1]


def test_the_paper_deployment_still_names_deepseek(overview, twin_registry):
    tw = twin_registry.shared()
    assert wait_until(lambda: len(tw.snapshot.history.get("t", [])) >= 2)
    out = overview.tick(1, "shared", None)
    assert "serving DeepSeek-R1 live" in out["lede"]
    assert out["intro"][1].startswith("It is serving DeepSeek-R1, a 671-billion-parameter mixture-of-experts")


def test_tradeoffs_draw_the_papers_points_only_for_its_model():
    """DeepSeek-R1's published decode points are not drawn on the Qwen3 curve; the chart says none are."""
    from twin.ui import tradeoffs
    qwen = tradeoffs.figure("qwen3-235b-cloudmatrix", 4096, 50.0)
    assert qwen["data"][tradeoffs.T_PAPER]["x"] == [] and not qwen["data"][tradeoffs.T_PAPER]["showlegend"]
    notes = " ".join(a["text"] for a in qwen["layout"]["annotations"])
    assert "No published reference points for Qwen3-235B-A22B on cloudmatrix384" in notes
    paper = tradeoffs.figure("cloudmatrix-infer-paper", 4096, 50.0)
    assert paper["data"][tradeoffs.T_PAPER]["x"] == [49.4, 14.9]
    assert "paper" not in tradeoffs.csv_text("qwen3-235b-cloudmatrix", 4096, 50.0, ([], [])).split("\n", 1)[1]


def test_deployment_list_carries_each_ones_description_translated(dash_app):
    """Every deployment in the control bar's list shows its one-line catalog description, in the viewer's language."""
    from twin.model.config import catalog
    from twin.ui import components
    deps = sorted(catalog().deployments)
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=en"}):
        en = components.deployment_options(deps)[1:]
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        zh = components.deployment_options(deps)[1:]
    assert [o["value"] for o in en] == deps
    for o, z in zip(en, zh):
        desc = catalog().deployments[o["value"]].description
        assert o["label"].children[1].children == desc == o["title"] and desc
        assert z["title"] != desc and z["label"].children[1].children == z["title"]
        assert o["label"].children[0].children == o["value"] and o["value"] in o["search"]
    qwen = next(z for z in zh if z["value"] == "qwen3-235b-cloudmatrix")
    assert qwen["title"].startswith("假设：在 CloudMatrix384 上运行 Qwen3-235B-A22B")


def test_slo_card_says_why_attainment_fell_without_a_fault(overview, dash_app):
    """Qwen3 on the default scenario, no fault, t = 2,875 s (seed 0): SLO attainment 0 because TPOT p50
    (50.4 ms) crept over the deployment's 50 ms SLO as the decode batch drifted from 60 to 63 per NPU."""
    k = {"slo_attainment": 0.0, "tpot_p50_ms": 50.44, "ttft_p50_ms": 39.1, "decode_batch_per_npu": 63.03}
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=en"}):
        why = overview.slo_why(k, "qwen3-235b-cloudmatrix")
        assert why == ("low: TPOT p50 50.4 ms is over the 50 ms SLO; the decode batch (63 per chip) runs at the "
                       "SLO's edge, so a small rise tips most requests over")
        assert overview.slo_why({**k, "slo_attainment": 0.97}, "qwen3-235b-cloudmatrix") == ""
        assert overview.slo_why({**k, "tpot_p50_ms": 30.0, "ttft_p50_ms": 7200.0}, "cloudmatrix-infer-paper") == \
            "low: TTFT p50 7.20 s is over the 5 s SLO: requests wait for prefill"
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        assert "50.4" in overview.slo_why(k, "qwen3-235b-cloudmatrix") and "SLO" in overview.slo_why(k, "qwen3-235b-cloudmatrix")
