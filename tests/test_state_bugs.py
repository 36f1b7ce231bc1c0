"""Issue 12's state bugs, each pinned by a test: a made-up trace is refused on a trace-less
scenario, a sandbox starts with the shared twin's settings (speed and load included), a reset to
another scenario drops the old load override."""
from __future__ import annotations

import pytest

from twin.live import session

from test_callbacks import wait_until


def test_a_made_up_trace_on_paper_decode_is_refused_naming_the_allowed_ones(twin_registry):
    tw = twin_registry.shared()
    with pytest.raises(session.ControlError, match="not a trace this dashboard offers") as exc:
        tw.control("reset", {"scenario": "paper-decode", "trace": "made-up-trace"})
    assert "mooncake_conversation" in str(exc.value) and "azure_conv" in str(exc.value)
    assert tw.run == 0 and tw.params.trace is None


def test_a_sandbox_starts_with_the_shared_twins_speed_load_scenario_deployment_and_seed(twin_registry):
    tw = twin_registry.shared()
    tw.control("reset", {"scenario": "bursty-chat", "seed": 7})
    assert wait_until(lambda: tw.run == 1)
    tw.control("load", 1.2)
    tw.control("speed", 50)
    sb = twin_registry.open_sandbox()
    assert sb.speed == 50.0
    assert (sb.params.scenario, sb.params.seed, sb.params.load) == ("bursty-chat", 7, 1.2)
    assert sb.params.deployment == tw.params.deployment
    assert wait_until(lambda: sb._engine.source.rate == pytest.approx(1.2 * sb._engine.capacity_rps()))


def test_a_reset_to_another_scenario_drops_the_load_override_and_the_same_scenario_keeps_it(twin_registry):
    tw = twin_registry.shared()
    tw.control("reset", {"scenario": "bursty-chat"})
    assert wait_until(lambda: tw.run == 1)
    tw.control("load", 1.2)
    tw.control("reset", {"scenario": "bursty-chat", "seed": 3})
    assert wait_until(lambda: tw.run == 2)
    assert tw.params.load == 1.2
    assert wait_until(lambda: tw._engine.source.rate == pytest.approx(1.2 * tw._engine.capacity_rps()))
    tw.control("reset", {"scenario": "diurnal"})
    assert wait_until(lambda: tw.run == 3)
    assert tw.params.load is None
    assert tw._engine.source.rate == pytest.approx(tw._engine.scenario.load * tw._engine.capacity_rps())


def test_fault_wording_plurals_and_a_clear_refusal():
    from twin.engine.faults import check_spec
    from twin.topology import topology
    from twin.ui.faultview import target_hint
    topo = topology("cloudmatrix384")
    hint = target_hint(topo, "l2", None)
    assert hint.startswith("112 L2 UB switches (e.g. sp2/l2-5)") and "switchs" not in hint
    assert "is an optical L1-L2 link, not one of these" in target_hint(topo, "l2", "n20/l1-3--sp3/l2-7")
    with pytest.raises(ValueError) as exc:
        check_spec({"kind": "l2", "target": "n20/l1-3--sp3/l2-7"}, topo, 0.0)
    assert str(exc.value) == ("fault target = 'n20/l1-3--sp3/l2-7' is an optical L1-L2 link; fault kind l2 "
                              "breaks an L2 UB switch (e.g. 'sp2/l2-5')")
