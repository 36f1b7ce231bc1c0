"""Issue 25 item 2, one command path with a truthful answer: a command is validated once at the edge
(`Twin.send`), travels the engine's one queue and comes back as a ticket, accepted at a sim time or
refused with the reason (at once for a refusal at the edge, from the engine's thread otherwise)."""
from __future__ import annotations

import pytest

from twin.live import session
from twin.live.actions import FAULTS_PER_MIN, RESET_LATE
from twin.engine import Engine, commands
from twin.engine.commands import InjectFault, SetPolicy
from twin.engine.faults import manager, spec

from test_callbacks import wait_until


@pytest.fixture
def spy(monkeypatch):
    """Counts calls of the fault validator (`check_shape`) and of the policy rule (`Policy.load`),
    wherever they are called from."""
    calls = {"shape": 0, "policy": 0}
    shape, load = spec.check_shape, spec.Policy.load.__func__

    def counted_shape(*a, **k):
        calls["shape"] += 1
        return shape(*a, **k)

    def counted_load(cls, **k):
        calls["policy"] += 1
        return load(cls, **k)

    for mod in (spec, manager, commands):
        monkeypatch.setattr(mod, "check_shape", counted_shape)
    monkeypatch.setattr(spec.Policy, "load", classmethod(counted_load))
    return calls


def twin() -> session.Twin:
    return session.Twin("t-cmd", params={"scenario": "paper-decode"})        # not started: advance_to drives it


def test_a_live_fault_is_validated_once_and_accepted_at_the_sim_time_it_lands(spy):
    tw = twin()
    tw.advance_to(2.0)
    t = tw.send("fault", {"kind": "optical_link", "target": "sp3/l2-7--n20/l1-3", "duration_s": 30})
    assert not t.done and t.said == "fault optical_link n20/l1-3--sp3/l2-7 for 30 s"    # canonical id
    assert spy["shape"] == 1                                   # at the edge, on the system's topology
    tw.advance_to(3.0)
    assert t.accepted and t.t == 2.0 and t.reason == ""
    assert spy["shape"] == 1                                   # the engine did not check the shape again
    assert [(f["kind"], f["target"]) for f in tw.snapshot.faults] == [("optical_link", "n20/l1-3--sp3/l2-7")]


def test_a_headless_command_is_validated_once_by_the_engine(spy):
    eng = Engine("paper-decode")
    t = eng.submit(InjectFault({"kind": "l2", "target": "sp2/l2-5"}))
    assert spy["shape"] == 0 and not t.done
    eng.advance(1.0)
    assert spy["shape"] == 1 and t.accepted and t.t == 0.0 and t.command.spec["target"] == "sp2/l2-5"


def test_a_policy_and_a_load_are_checked_once(spy, monkeypatch):
    tw = twin()
    spy["policy"] = 0                                         # building the engine loaded its policy
    t = tw.send("policy", {"detect_s": 5})
    tw.advance_to(1.0)
    assert t.accepted and spy["policy"] == 1 and tw._engine.faults.policy.detect_s == 5
    from twin.model import settings
    checks = []
    real = settings.get

    def get(name):
        s = real(name)
        if name == "load":
            checks.append(name)
        return s
    monkeypatch.setattr(settings, "get", get)
    t = tw.send("load", 0.5)
    tw.advance_to(2.0)
    assert t.accepted and checks == ["load"]


def test_the_engine_refuses_a_fault_on_a_part_already_down_and_says_why():
    tw = twin()
    node = tw.send("fault", {"kind": "node", "target": "n20"})
    tw.advance_to(5.0)
    die = tw.send("fault", {"kind": "npu_die", "target": "n20/npu3/d1"})      # on the node that is down
    link = tw.send("fault", {"kind": "optical_link", "target": "n20/l1-3--sp3/l2-7"})   # one end on it
    late = tw.send("fault", {"kind": "l2", "target": "sp2/l2-5", "at_s": 4.5})    # past: the engine's call
    ok = tw.send("fault", {"kind": "npu_die", "target": "n21/npu3/d1"})
    assert not die.done                                       # valid at the edge: only the engine knows
    tw.advance_to(6.0)
    assert node.accepted and ok.accepted
    assert die.refused and die.t == 5.0 and die.reason == (
        "fault target = 'n20/npu3/d1' is already down: fault #1 (node) struck it at t = 0.0 s and it is not "
        "repaired yet")
    assert link.refused and "fault #1 (node)" in link.reason
    assert late.refused and late.reason == "fault at_s = 4.5: in the past (now 5.000 s)"
    assert [f["target"] for f in tw.snapshot.faults] == ["n20", "n21/npu3/d1"]     # nothing else was injected
    assert any(e["kind"] == "error" and "already down" in e["message"] for e in tw.snapshot.events)


def test_a_degraded_link_is_not_down_and_a_repaired_part_can_fail_again():
    eng = Engine("paper-decode")
    link = "n20/l1-3--sp3/l2-7"
    eng.submit(InjectFault({"kind": "optical_degrade", "target": link, "duration_s": 5}))
    eng.advance(1.0)
    again = eng.submit(InjectFault({"kind": "optical_link", "target": link, "duration_s": 5}))
    eng.advance(10.0)
    later = eng.submit(InjectFault({"kind": "optical_link", "target": link}))
    eng.advance(1.0)
    assert again.accepted and later.accepted


def test_refusals_at_the_edge_are_tickets_too_and_queue_nothing():
    tw = twin()
    bad = tw.send("fault", {"kind": "l2", "target": "n20"})
    assert bad.refused and bad.reason.startswith("fault target = 'n20' is a node; fault kind l2 breaks")
    assert tw.send("teleport").reason.startswith("unknown action 'teleport': allowed play")
    assert tw._engine.commands.empty()
    with pytest.raises(session.ControlError, match="is a node"):     # control(): the same answer, raised
        tw.control("fault", {"kind": "l2", "target": "n20"})
    for i in range(FAULTS_PER_MIN):
        assert not tw.send("fault", {"kind": "l2", "target": "sp2/l2-5"}, client="c1").refused
    limited = tw.send("fault", {"kind": "l2", "target": "sp2/l2-5"}, client="c1")
    assert limited.refused and limited.reason.startswith(f"faults: at most {FAULTS_PER_MIN} per minute; try again in")


def test_a_locked_twin_answers_refused_with_the_reason():
    reg = session.configure(wall_dt=0.05, token="s3cret")
    try:
        t = reg.shared().send("load", 0.5)
        assert t.refused and t.reason.startswith("the shared twin is locked by the instructor")
    finally:
        reg.shutdown()


def test_a_reset_answers_its_ticket_and_refuses_what_was_queued_before_it():
    tw = twin()
    before = tw.send("policy", {"detect_s": 5})
    reset = tw.send("reset", {"scenario": "paper-decode", "seed": 3})
    after = tw.send("fault", {"kind": "l2", "target": "sp2/l2-5"})            # for the new run
    assert not reset.done
    second = tw.send("reset", {"scenario": "paper-decode", "seed": 4})        # replaces the first
    last = tw.send("fault", {"kind": "l1", "target": "n20/l1-3"})             # for the second's run
    tw.advance_to(1.0)
    assert before.refused and before.reason == RESET_LATE
    assert reset.refused and reset.reason == "a later reset replaced this one before it took effect"
    assert after.refused and after.reason == RESET_LATE                      # its run never started
    assert second.accepted and second.t == 0.0 and tw.params.seed == 4
    assert last.accepted and [f["target"] for f in tw.snapshot.faults] == ["n20/l1-3"]


def test_a_paused_twin_still_answers(twin_registry):
    tw = twin_registry.shared()
    tw.control("pause")
    t = tw.send("fault", {"kind": "l2", "target": "sp2/l2-5"})
    assert t.wait(10) and t.accepted
    assert wait_until(lambda: tw.snapshot.faults)              # published by the thread right after
    assert t.t == tw.snapshot.sim_time and [f["target"] for f in tw.snapshot.faults] == ["sp2/l2-5"]
    assert tw.ticket(t.id) is t and tw.ticket(str(t.id)) is None
    assert tw.actions(1)[0]["what"] == "fault l2 sp2/l2-5"          # the shared log records the answer


def test_the_answer_reads_in_chinese(dash_app):
    from twin.ui.errors import explain
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        zh = explain("fault target = 'n20/npu3/d1' is already down: fault #1 (node) struck it at t = 0.0 s and it "
                     "is not repaired yet")
        assert zh == "故障目标 = 'n20/npu3/d1' 已经宕机：故障 #1（node）自 t = 0.0 秒起使其宕机，尚未修复"
        assert explain(RESET_LATE) == "此命令生效之前孪生已被重置；请重新发送"


def test_ticket_answers_once_and_runs_hooks_before_waiters_wake():
    t = commands.Ticket("x", "x")
    seen = []
    t.on_done(lambda k: seen.append(k.state))
    t.refuse("no", 1.0)
    t.accept(2.0)                                             # a second answer is ignored
    assert t.refused and t.t == 1.0 and seen == ["refused"] and t.wait(0)
    t.on_done(lambda k: seen.append("late"))                  # registered after: called at once
    assert seen == ["refused", "late"]
    assert t.as_dict() == {"id": t.id, "name": "x", "state": "refused", "reason": "no", "t": 1.0}
    assert SetPolicy({"detect_s": 1}).name == "policy"
