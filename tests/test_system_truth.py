"""Issue 23, "every screen true to the system it shows": the run controls offer what can run, and
the words, units and reference points of a page come from the system the viewed twin runs."""
from __future__ import annotations

import json
import re
from contextvars import copy_context

from dash._callback_context import context_value
from dash._utils import AttributeDict

from test_callbacks import pages, wait_until  # noqa: F401 (fixture)


def _reset(dash_app, scenario, deployment):
    """on_control after Apply & reset: (message, class, props set on other components)."""
    def run():
        context_value.set(AttributeDict(triggered_inputs=[{"prop_id": "ctl-reset.n_clicks", "value": 1}],
                                        updated_props={}))
        out = dash_app.on_control(0, [0] * 6, None, [0] * 7, None, 1, "shared", None, "vtest", scenario,
                                  deployment, None, 0, None)
        return (*out, context_value.get().updated_props)
    msg, cls, props = copy_context().run(run)
    pending = props.pop("ctl-ticket", None)       # the reset not yet taken by the twin's thread: its answer
    if pending:
        from twin.live import session
        from twin.ui import answer
        assert session.sessions().shared().ticket(pending["data"]["id"]).wait(15)
        msg, cls = answer.answered(pending["data"], "shared")[:2]
    return msg, cls, props


def test_a_deployment_without_prefill_moves_to_a_scenario_it_runs(dash_app, twin_registry):
    tw = twin_registry.shared()
    msg, cls, props = _reset(dash_app, "default", "deepseek-h800")
    assert "msg-ok" in cls and props == {"ctl-scenario": {"value": "paper-decode"}}, msg
    assert msg.startswith("deepseek-h800 has no prefill pool: switched to scenario paper-decode; reset: "
                          "scenario paper-decode"), msg
    assert wait_until(lambda: tw.run == 1)
    assert (tw.params.scenario, tw.params.deployment) == ("paper-decode", "deepseek-h800")


def test_a_runnable_pair_is_left_as_chosen(dash_app, twin_registry):
    from twin.ui import runnable
    assert runnable.fit("default", "cloudmatrix-infer-paper") == ("default", None)
    assert runnable.fit("paper-decode", "deepseek-h800") == ("paper-decode", None)
    assert runnable.fit("default", "") == ("default", None)            # the scenario's own deployment


def _h800(twin_registry):
    """A sandbox running DeepSeek's H800 deployment (on the decode-only scenario it runs), paused."""
    sb = twin_registry.open_sandbox({"scenario": "paper-decode", "deployment": "deepseek-h800"})
    assert wait_until(lambda: sb.snapshot is not None and sb.snapshot.sim_time > 1)
    return sb


def _text(x) -> str:
    """What a viewer reads in components or figures, less the glossary's hover definitions (about
    the terms, quoting the paper wherever they are shown)."""
    s = json.dumps(x, default=lambda o: o.to_plotly_json() if hasattr(o, "to_plotly_json") else str(o))
    return re.sub(r'"className": "teach-term", "title": "[^"]*"', "", s)


def test_words_follow_the_system():
    from twin.ui.words import words
    assert words("deepseek-h800") == {"chip": "GPU", "system": "cluster", "whole": "whole cluster"}
    assert words("cloudmatrix-infer-paper") == {"chip": "NPU", "system": "supernode", "whole": "whole supernode"}
    assert words(None)["chip"] == "chip"


def test_overview_on_a_gpu_cluster_speaks_of_gpus_and_the_cluster(pages, twin_registry):
    sb = _h800(twin_registry)
    out = pages.overview.tick(1, sb.key, None)
    shown = _text([out["labels"], out["hints"], out["intro"], out["lede"]])
    # the H800 deployment runs decode-only (paper-decode): the input card says why it is empty (issue 36,
    # item 15) instead of naming the whole cluster
    assert "per GPU" in shown and "GPU busy" in shown and "decode-only" in shown
    assert "NPU" not in shown and "supernode" not in shown and "Huawei" not in shown, shown
    cm = pages.overview.tick(1, "shared", None)          # the shared twin runs CloudMatrix384
    shown = _text([cm["labels"], cm["hints"], cm["intro"]])
    assert "per NPU" in shown and "whole supernode" in shown and "Huawei" in shown


def test_tradeoffs_draws_no_paper_stars_on_another_system(pages, twin_registry):
    from twin.ui import tradeoffs
    h800 = tradeoffs.figure("deepseek-h800", 4096, 50.0)
    paper = h800["data"][tradeoffs.T_PAPER]
    assert paper["x"] == [] and paper["y"] == []
    assert "No published reference points for DeepSeek-R1 on gpu-cluster-h800" in _text(h800["layout"]["annotations"])
    assert "GPU" in h800["layout"]["yaxis"]["title"]["text"] and "NPU" not in _text(h800)
    assert "paper" not in tradeoffs.csv_text("deepseek-h800", 4096, 50.0)
    cm = tradeoffs.figure("cloudmatrix-infer-paper", 4096, 50.0)
    stars = cm["data"][tradeoffs.T_PAPER]
    assert stars["x"] == [49.4, 14.9] and "text" not in stars["mode"]     # labels in the hover: none covers the live point
    sb = _h800(twin_registry)
    out = pages.tradeoffs.tick(1, sb.key, None, dep=None, slo=50, kv=4096)
    assert "per GPU" in _text(out["answer"]) and "NPU" not in _text([out["answer"], out["live"]])
