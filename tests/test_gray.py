"""Gray failures end to end: a slow part keeps serving, its group waits for it, the detector notices
it from telemetry, a mitigation wins the time back, nothing is lost; the what-if beside it."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_faults import busy, check_requests, fault
from twin.engine import Engine
from twin.engine.faults import Policy

ROOT = Path(__file__).resolve().parents[1]
MUST_SHOW = """scenario = "peak-384"
duration_s = 100
[[fault]]
kind = "straggler"
target = "n36/npu3/d1"
at_s = 40
factor = 0.5
"""
SLOW = "n20/npu3/d1"        # a die of paper-decode's EP320 instance


def _cli(tmp_path, text: str, *flags) -> dict:
    path = tmp_path / "f.toml"
    path.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "twin", "run", "--faults", str(path), "--drain", "--json", *flags],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def must_show(tmp_path_factory):
    return _cli(tmp_path_factory.mktemp("gray"), MUST_SHOW)


def test_one_slow_die_paces_the_step_until_the_detector_reroutes_its_experts(must_show):
    """The must-show file, shorter: the step waits for the slow die (a die at half speed, compute and
    HBM reads: about 2x at peak-384, docs/explanation/faults.md), the detector's window (10 s) is the time to detect, the
    redundant experts take over after expert_reload_s, TPOT comes back, nothing is lost."""
    (f,) = must_show["faults"]
    assert f["detected_by"] == "telemetry" and f["detect_s"] == 10.0
    assert f["mitigated_s"] == 11.0 and f["mitigation"] == "experts rerouted to redundant copies"
    assert f["tpot_during_ms"] / f["tpot_before_ms"] == pytest.approx(2.04, abs=0.05)
    assert abs(f["tpot_after_ms"] / f["tpot_before_ms"] - 1) < 0.1
    assert f["lost"] == 0 and must_show["requests"]["lost"] == 0 and must_show["requests"]["conserved"]
    assert must_show["detector"] == {"flags": 1, "false_alarms": 0, "threshold": 1.15, "window_s": 10.0}
    w = f["whatif"]
    assert w["window_s"] == [40.0, 100.0]         # onset to a minute after the mitigation, cut at the run's end
    assert w["tpot_ms_without"] == pytest.approx(f["tpot_before_ms"], rel=0.05)      # no fault: no slowdown
    assert w["tpot_ms_unmitigated"] > 1.4 * f["tpot_after_ms"]     # without the reroute the slowdown stays
    assert w["won_back_tokens"] > 0


def test_without_mitigation_the_slowdown_lasts_to_the_end(tmp_path, must_show):
    out = _cli(tmp_path, MUST_SHOW + "[policy]\nmitigate_gray = false\n", "--no-whatif")
    (f,) = out["faults"]
    assert f["detect_s"] == 10.0 and f["mitigated_s"] is None and f["recover_s"] is None and f["active"]
    assert f["tpot_after_ms"] is None and "whatif" not in f
    (mitigated,) = must_show["faults"]
    assert f["tpot_during_ms"] > 1.4 * mitigated["tpot_before_ms"]     # onset to the end of the run
    assert out["tpot_ms"]["p50"] > 1.3 * must_show["tpot_ms"]["p50"]
    assert f["lost"] == 0 and out["requests"]["lost"] == 0


@pytest.mark.parametrize("action", ["reroute", "shrink", "replace", "none"])
def test_each_gray_action(action):
    eng = busy(policy={"gray_action": action, "gray_window_s": 3.0})
    inst = eng.decode[0]
    slow = eng.topo.die_ids.index(SLOW)
    fault(eng, "straggler", SLOW, factor=0.5)
    eng.advance(2.0)
    assert inst.pm.health.compute == inst.pm.health.hbm == 0.5
    assert eng.snapshot().health == {SLOW: {"compute": 0.5, "hbm": 0.5}}
    slowed = eng.timing.decode_seconds(inst, 96, 4096)
    eng.advance(12.0)
    check_requests(eng)
    (r,) = eng.fault_report()
    # flagged after the window, counted from the first interval that showed it (1 s intervals)
    assert r["detected_by"] == "telemetry" and 3.0 <= r["detect_s"] <= 4.0 and r["lost"] == 0
    now = eng.timing.decode_seconds(inst, 96, 4096)
    if action == "reroute":       # the die left the instance: a healthy group again
        assert slow not in inst.dies and inst.pm.health.compute == 1.0 and now < slowed / 1.5
    elif action == "shrink":      # it stays, with half a die's batch: its experts still run at half speed
        assert slow in inst.dies and inst.slow_load == 0.5 and now < slowed
    elif action == "replace":     # drained (requeued), restarted without it: no idle die to take its place
        assert slow not in inst.dies and r["requeued"] > 0 and inst.alive
    else:
        assert r["mitigated_s"] is None and now == slowed
    assert (r["mitigated_s"] is None) == (action == "none")


def test_slow_ems_cpu_is_noticed_from_its_latency_and_taken_out_of_the_ring():
    eng = busy("default", t=10.0, policy={"gray_window_s": 3.0})
    server = eng.ems.servers[5]
    fault(eng, "cpu_slow", server, factor=0.5)
    eng.advance(1.0)
    assert all(p.pm.health.cpu == 0.5 for p in eng.prefill) and eng.decode[0].pm.health.cpu == 1.0
    eng.advance(8.0)
    (r,) = eng.fault_report()
    assert r["detected_by"] == "telemetry" and r["detect_s"] <= 4.0
    assert not eng.ems.up(server) and all(p.pm.health.cpu == 1.0 for p in eng.prefill)
    assert r["lost"] == 0


def test_healthy_runs_raise_no_alarm_and_a_low_threshold_raises_false_ones():
    eng = Engine("default", seed=0, duration_s=60)
    eng.run(60)
    assert eng.faults.detector.summary()["false_alarms"] == 0 and eng.faults.detector.flags == []
    eng = Engine("default", seed=0, duration_s=60)
    eng.faults.policy = Policy.load(gray_threshold=1.02, gray_window_s=1.0)
    eng.run(60)
    d = eng.faults.detector
    assert d.false_alarms > 0 and all(not f["known"] for f in d.flags)
    assert "(false alarm)" in eng.events[-1]["message"]


def test_gray_policy_fields_refuse_bad_values():
    for field, bad, words in (("gray_action", "restart", "allowed 'reroute', 'shrink', 'replace', 'none'"),
                              ("gray_threshold", 1.0, "1 < x <= 10"), ("gray_window_s", 0, "0 < x <= 3600"),
                              ("mitigate_gray", "yes", "true or false")):
        with pytest.raises(Exception, match=words):
            Policy.load(**{field: bad})
