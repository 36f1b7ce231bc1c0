"""Empty and warming states say why (issue 36, item 15): on paper-decode (decode-only) the Overview's
input, prefill and cache cards and the Cache page say there is no prefill or cache; in the first
simulated minutes the useful-work card says the twin is warming up."""
from __future__ import annotations

import importlib
import time

import pytest

from test_callbacks import wait_until


@pytest.fixture
def pages(dash_app):
    return importlib.import_module("pages.overview"), importlib.import_module("pages.cache")


def test_decode_only_scenario_says_why_prefill_and_cache_are_empty(pages, twin_registry):
    overview, cache = pages
    tw = twin_registry.shared()
    tw.control("reset", {"scenario": "paper-decode"})
    assert wait_until(lambda: tw.snapshot.scenario == "paper-decode" and len(tw.snapshot.history.get("t", [])) >= 2)
    tw.control("pause")
    time.sleep(0.15)
    out = overview.tick(1, "shared", None)
    hints = dict(zip([sfx for sfx, *_r in overview.KPIS if sfx != "useful"], out["hints"]))
    why = ("none: scenario paper-decode is decode-only (prompts prefilled outside the run), so no prefill and no "
           "cache lookups")
    assert [hints[k] for k in ("in-tps", "in-npu", "hit", "util-p")] == [why] * 4
    assert hints["out-tps"] == "generated tokens per second"
    assert out["useful"].startswith("warming up: the decode batch is still filling")     # t < 2 simulated minutes
    assert cache.tick(1, "shared", None)["note"] == f"Cache hits: {why}."


def test_full_pipeline_keeps_its_hints_and_warm_up_ends(pages, twin_registry):
    overview, _cache = pages
    tw = twin_registry.shared()
    assert wait_until(lambda: len(tw.snapshot.history.get("t", [])) >= 2)
    out = overview.tick(1, "shared", None)
    hints = dict(zip([sfx for sfx, *_r in overview.KPIS if sfx != "useful"], out["hints"]))
    assert hints["hit"] == "EMS context cache: prompt tokens found in cache"
    w = {"chip": "NPU"}
    k = {"output_tps_per_npu": 1800.0, "decode_op_tps_per_npu": 1943.0, "decode_batch_per_npu": 90.0,
         "decode_model_tps_per_npu": 1900.0}
    assert not overview.useful_hint(k, w, overview.WARM_S + 1).startswith("warming up")
    assert overview.useful_hint(k, w, 30.0).startswith("warming up")
