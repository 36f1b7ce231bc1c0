"""Issue 23, "every screen true to the system it shows": the run controls offer what can run, and
the words, units and reference points of a page come from the system the viewed twin runs."""
from __future__ import annotations

from contextvars import copy_context

from dash._callback_context import context_value
from dash._utils import AttributeDict

from test_callbacks import wait_until


def _reset(dash_app, scenario, deployment):
    """on_control after Apply & reset: (message, class, props set on other components)."""
    def run():
        context_value.set(AttributeDict(triggered_inputs=[{"prop_id": "ctl-reset.n_clicks", "value": 1}],
                                        updated_props={}))
        out = dash_app.on_control(0, [0] * 6, None, [0] * 7, None, 1, "shared", None, "vtest", scenario,
                                  deployment, None, 0, None)
        return (*out, context_value.get().updated_props)
    return copy_context().run(run)


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
