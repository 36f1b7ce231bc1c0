"""The class that follows the lecturer (issue 26), core side: lesson questions and plans load and are
answered by their own figures, the classroom publishes, counts one answer per browser, refuses with
reasons, stays bounded, reveals the measured answer and exports CSV; a hold pauses the twin at the
moment to look."""
from __future__ import annotations

import csv
import io
import time

import pytest

from twin.live import classroom
from twin import lessons
from twin.live.actions import _Params
from twin.live.controls import ControlError
from twin.live.runner import Twin


class FakeTwin:
    """The shared twin as the classroom sees it: `require` (the instructor lock), and the run and
    speed the class restores at its end (twin.live.lecture.restore), which never change here."""

    def __init__(self, locked: bool = False):
        self.locked = locked
        self.params, self.speed, self.paused = _Params(), 1.0, False

    def require(self, credential, client=None):
        if self.locked and credential != "cred":
            raise ControlError("the shared twin is locked by the instructor: enter the instructor token, "
                               "or open a private sandbox to experiment")


def test_every_lesson_step_asks_a_question_its_own_figures_answer():
    steps = [(les.id, i, s) for les in lessons.lessons() for i, s in enumerate(les.steps, 1)]
    assert len(steps) == 19 and all(s.question for _l, _i, s in steps)
    by = {(lid, i): s for lid, i, s in steps}
    q = by[("prefill-decode", 1)].question
    assert q.kind == "number" and q.unit == "×"
    assert q.value({k: f.value for k, f in by[("prefill-decode", 1)].figures.items()}) == pytest.approx(4920.7 / 1338.4)
    q = by[("pipelining", 2)].question                          # MTP: TPOT 49.7 ms vs 52.8 ms without
    f = {k: v.value for k, v in by[("pipelining", 2)].figures.items()}
    assert q.choices[q.choice(q.value(f))] == "It goes down"
    q = by[("faults", 4)].question                             # one slow die in 320: TPOT 34.6 ms vs 16.7 ms before
    f = {k: v.value for k, v in by[("faults", 4)].figures.items()}
    assert (q.unit, q.value(f)) == ("%", pytest.approx(34.6 / 16.704 * 100))
    q = by[("supernode", 3)].question                          # KV over UB: TPOT within 5% of RDMA's
    f = {k: v.value for k, v in by[("supernode", 3)].figures.items()}
    assert q.choices[q.choice(q.value(f))] == "No, it stays within 5 percent"
    q = by[("cloud", 2)].question
    assert q.value({"peak_d": 0.992}) == pytest.approx(99.2)     # scale 100: a fraction shown as %


def test_bad_question_is_refused_naming_the_field(tmp_path):
    src = (lessons.DATA_DIR / "1-prefill-decode.toml").read_text()
    bad = src.replace('figure = "in_npu/out_npu"', 'figure = "nope"', 1)
    (tmp_path / "x.toml").write_text(bad)
    with pytest.raises(lessons.LessonError, match=r"step 1.question.figure = 'nope': allowed a figure of the step"):
        lessons.load_file(tmp_path / "x.toml")


def test_the_class_plan_is_45_minutes_of_real_steps():
    p = lessons.plan("why-supernode")
    assert p.minutes == 45 and len(p.items) == 8
    for it in p.items:
        assert lessons.get(it.lesson).steps[it.step - 1].question is not None and it.say
    with pytest.raises(lessons.LessonError, match="no such plan; allowed why-supernode"):
        lessons.plan("nope")


def test_publish_answer_once_reveal_and_export():
    room, tw = classroom.Classroom(), FakeTwin(locked=True)
    for c in ("s-a", "s-b", "s-c"):
        assert room.join(c, "1.2.3.4")
    with pytest.raises(ControlError, match="locked by the instructor"):
        room.publish(tw, None, lesson="prefill-decode", step=1, page="/lessons", presenter=False)
    assert room.publish(tw, "cred", lesson="prefill-decode", step=1, page="/lessons", presenter=True)
    assert not room.publish(tw, "cred", lesson="prefill-decode", step=1, page="/lessons", presenter=True)
    pub = room.public()
    assert (pub["lesson"], pub["step"], pub["page"], pub["presenter"], pub["revealed"], pub["n"], pub["q"]) == (
        "prefill-decode", 1, "/lessons", True, False, 0, True)
    assert room.answer("s-a", "1.2.3.4", "prefill-decode", 1, "3.5") == 3.5
    assert room.answer("s-b", "5.6.7.8", "prefill-decode", 1, 5) == 5.0
    with pytest.raises(ControlError, match="already answered this step: one answer per browser"):
        room.answer("s-a", "1.2.3.4", "prefill-decode", 1, 4)
    with pytest.raises(ControlError, match=r"answer = '1e9': allowed a number from 0.1 to 100"):
        room.answer("s-c", "1.2.3.4", "prefill-decode", 1, "1e9")
    with pytest.raises(ControlError, match="not the one the lecturer is on"):
        room.answer("s-c", "1.2.3.4", "prefill-decode", 2, 4)
    assert room.public()["n"] == 2
    with pytest.raises(ControlError, match="locked"):
        room.reveal(tw, None)
    assert room.tally("prefill-decode", 1) is None                      # before the reveal: the lecturer's only
    assert room.tally("prefill-decode", 1, lecturer=True)["n"] == 2
    v = room.reveal(tw, "cred")                          # FakeTwin has no snapshot: the lesson's figures
    assert v == pytest.approx(4920.7 / 1338.4)
    t = room.tally("prefill-decode", 1)
    assert t["n"] == 2 and t["source"] == "lesson" and sum(c for _x, c in t["bars"]) == 2
    assert len(t["bars"]) == 10 and t["bars"][0] == (pytest.approx(3.575), 1) and t["bars"][-1][1] == 1
    with pytest.raises(ControlError, match="already revealed"):
        room.answer("s-c", "1.2.3.4", "prefill-decode", 1, 4)
    rows = list(csv.DictReader(io.StringIO(room.csv())))
    assert [(r["answer_no"], r["answer"], r["network"]) for r in rows] == [("1", "3.5", "1"), ("2", "5", "2")]
    assert {r["measured"] for r in rows} == {f"{v:.6g}"}
    assert "s-a" not in room.csv() and "1.2.3.4" not in room.csv()                    # anonymous


def test_choice_answers_and_bounds(monkeypatch):
    room, tw = classroom.Classroom(), FakeTwin()
    for c in ("s-a", "s-b"):
        room.join(c, None)
    room.publish(tw, None, lesson="supernode", step=1, page="/validation", presenter=False)
    with pytest.raises(ControlError, match="allowed one of the 2 choices"):
        room.answer("s-a", None, "supernode", 1, 2)
    room.answer("s-a", None, "supernode", 1, 1)
    room.answer("s-b", None, "supernode", 1, 0)
    assert room.tally("supernode", 1, lecturer=True)["bars"] == [("The H800 cluster", 1), ("CloudMatrix384", 1)]
    with pytest.raises(ControlError, match=r"answers: at most 12 per minute"):
        for _ in range(13):
            try:
                room.answer("s-a", None, "supernode", 1, 0)
            except ControlError as exc:
                if "per minute" in str(exc):
                    raise
    monkeypatch.setattr(classroom, "MAX_STEPS", 2)
    for les, n in (("supernode", 2), ("cloud", 1)):
        room.publish(tw, None, lesson=les, step=n, page="/", presenter=False)
    assert room.tally("supernode", 1, lecturer=True) is None and room.tally("cloud", 1, lecturer=True) is not None


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_one_address_never_fills_a_question_and_a_campus_nat_still_answers():
    """Issue 34: one address minting browser secrets (1,000 in a minute, then for 10 minutes) gets at
    most JOINS_PER_MIN_ADDRESS a minute and MEMBERS_PER_ADDRESS in the class; its answers never refuse
    anyone else, a class of 300 behind one campus NAT answers in full, and identities minted after the
    question opened cannot answer it."""
    clock = Clock()
    room, tw = classroom.Classroom(clock=clock), FakeTwin()
    joined = 0
    for minute in range(10):
        for i in range(1000):
            try:
                joined += room.join(f"s-x{minute}-{i}", "6.6.6.6")
            except ControlError as exc:
                assert str(exc).startswith("browsers joining the class from this address: at most 200 per minute")
                break
        clock.t += 60
    assert joined == 10 * classroom.JOINS_PER_MIN_ADDRESS
    campus = [f"s-c{i}" for i in range(300)]
    for i, c in enumerate(campus):        # a hall sitting down over two minutes
        clock.t += 120 / len(campus)
        assert room.join(c, "10.0.0.1")
    assert room.join("s-elsewhere", "172.16.0.9")
    room.publish(tw, None, lesson="faults", step=3, page="/lessons", presenter=False)
    counted = 0
    for minute in range(10):          # every attacker identity it ever made tries, minute after minute
        clock.t += 60
        for i in range(200):
            try:
                room.answer(f"s-x{minute}-{i}", "6.6.6.6", "faults", 3, 1)
                counted += 1
            except ControlError as exc:
                assert "does not follow the class" in str(exc)
    assert counted == classroom.MEMBERS_PER_ADDRESS                  # its newest 400: never the whole question
    clock.t += 60
    assert room.join("s-late", "6.6.6.6")
    with pytest.raises(ControlError, match="joined the class after this question was asked: answer the next one"):
        room.answer("s-late", "6.6.6.6", "faults", 3, 1)
    for c in campus:
        room.answer(c, "10.0.0.1", "faults", 3, 20000)
    assert room.answer("s-elsewhere", "172.16.0.9", "faults", 3, 30000) == 30000
    assert room.public()["n"] == 400 + 300 + 1
    nets = [r["network"] for r in csv.DictReader(io.StringIO(room.csv()))]
    assert (nets.count("1"), nets.count("2"), nets.count("3")) == (400, 300, 1)     # the flood stands out


def test_the_class_is_bounded_and_the_largest_address_gives_way(monkeypatch):
    monkeypatch.setattr(classroom, "MEMBERS_PER_ADDRESS", 3)
    monkeypatch.setattr(classroom, "MAX_MEMBERS", 5)
    room, tw = classroom.Classroom(), FakeTwin()
    room.join("s-lone", "1.1.1.1")
    for i in range(4):                         # the address's oldest gives way past 3
        room.join(f"s-a{i}", "2.2.2.2")
    assert not room.join("s-a3", "2.2.2.2")    # already in: keeps its place
    everyone = ("s-lone", "s-a0", "s-a1", "s-a2", "s-a3", "s-b0", "s-b1")
    room.publish(tw, None, lesson="faults", step=2, page="/lessons", presenter=False)
    assert [c for c in everyone if room.may_answer(c, "faults", 2)] == ["s-lone", "s-a1", "s-a2", "s-a3"]
    room.join("s-b0", "3.3.3.3")               # 5 in all
    room.join("s-b1", "3.3.3.3")               # 6 > 5: 2.2.2.2 holds the most and gives way
    room.publish(tw, None, lesson="faults", step=3, page="/lessons", presenter=False)
    assert [c for c in everyone if room.may_answer(c, "faults", 3)] == ["s-lone", "s-a2", "s-a3", "s-b0", "s-b1"]
    room.join("s-lone", "4.4.4.4")             # moved (a phone off the wifi): keeps its place
    assert room.may_answer("s-lone", "faults", 3) and room.answer("s-lone", "4.4.4.4", "faults", 3, 1) == 1


def test_hold_pauses_the_twin_at_the_moment_to_look():
    tw = Twin("hold", wall_dt=0.05, speed=100).start()
    try:
        tw.control("reset", {"scenario": "default"})
        tw.control("hold", 30)
        end = time.monotonic() + 30
        while not tw.paused and time.monotonic() < end:
            time.sleep(0.05)
        assert tw.paused and tw.snapshot.sim_time == pytest.approx(30, abs=0.01)
        with pytest.raises(ControlError, match=r"hold = '0': allowed 0 < seconds <= 3600"):
            tw.control("hold", 0)
    finally:
        tw.stop()


# ---- the class bar's callbacks, called as functions ----------------------------------------------

SECRET = "x" * 24


def test_status_carries_the_class_and_the_beat_moves_with_the_lecturer(twin_registry):
    from twin.ui import polling as live
    tw = twin_registry.shared()
    b0 = live.beat(tw)
    twin_registry.classroom.join("s-a", None)
    assert live.beat(tw)["cls"] == b0["cls"]                       # joining moves nothing
    twin_registry.classroom.publish(tw, None, lesson="faults", step=3, page="/lessons", presenter=True)
    b1 = live.beat(tw)
    assert b1["cls"] != b0["cls"] and live.status_payload(tw)["class"]["step"] == 3
    twin_registry.classroom.answer("s-a", None, "faults", 3, 5)
    assert live.beat(tw)["cls"] == [b1["cls"][0], 1]               # an answer moves the count, not the rev


def test_send_counts_once_and_explains_the_refusal_in_chinese(twin_registry, dash_app):
    from dash import no_update
    from twin.ui import classbar, guard
    HIDE = classbar.HIDE
    room = twin_registry.classroom
    with dash_app.server.test_request_context("/?lang=zh"):
        assert classbar.join({"on": True}, SECRET) == (no_update, no_update)       # following joins the class
        assert classbar.join(None, "z" * 24) == (no_update, no_update) and not room.may_answer(
            guard.client("z" * 24)[0], "faults", 3)                                  # not following: not in it
    room.publish(twin_registry.shared(), None, lesson="faults", step=3, page="/lessons", presenter=False)
    state = room.public()
    with dash_app.server.test_request_context("/?lang=zh"):
        late = classbar.render(state, {"on": True}, None, {}, None, "y" * 24)      # follows, never joined
        assert late[8] == "本浏览器在这道题提出之后才加入课堂：你可以回答下一道题。" and late[7] == HIDE
        assert classbar.render(state, {"on": True}, None, {}, None, SECRET)[7] == {}    # joined before: asked
        msg, cls, mine = classbar.send(1, 20000, None, state, {}, SECRET)
        assert (msg, cls, mine) == ("已计入，谢谢！", "ctl-msg msg-ok", {"faults/3": 20000.0})
        msg, cls, mine = classbar.send(2, 30000, None, state, mine, SECRET)
        assert msg == "未计入：你已经回答过这一步：每个浏览器只能回答一次" and cls == "ctl-msg msg-error"
        out = classbar.render(state, {"on": True}, None, {"faults/3": 20000.0}, None, SECRET)
        assert out[8] == "你的答案：20,000 请求。等待讲师揭晓。" and out[6] == {}       # waiting, no input
    assert room.tally("faults", 3, lecturer=True)["n"] == 1
    room.reveal(twin_registry.shared(), None)
    with dash_app.server.test_request_context("/?lang=en"):
        out = classbar.render(room.public(), {"on": True}, None, {"faults/3": 20000.0}, None, SECRET)
        assert out[8].startswith("Measured: 27,197 requests · your answer: 20,000 requests")
        fig = out[9].children[0].figure                                  # the chart and its (i)
        assert [s["x0"] for s in fig["layout"]["shapes"]] == [pytest.approx(27197), 20000]
        msg, _cls, _mine = classbar.send(3, 1, None, room.public(), {}, "y" * 24)
        assert msg == "Not counted: the answer is already revealed: answers to this step are closed"


def test_only_a_checked_lecturer_sees_the_tally_and_the_tools_before_the_reveal(twin_registry, dash_app):
    """Issue 34: a student who forges the lecturer flag (class-lead) and the reveal (class-state) in
    the browser's stores sees neither the live tally nor the lecturer's tools; the lecturer's
    credential does, and stops doing so once it is signed out."""
    from twin.ui import classbar, guard
    HIDE = classbar.HIDE
    room, gate = twin_registry.classroom, twin_registry.gate
    gate.token = "tok"
    with dash_app.server.test_request_context("/?lang=en"):
        classbar.join({"on": True}, SECRET)
    cred = gate.unlock("tok", "lecturer", "10.0.0.2")
    room.publish(twin_registry.shared(), cred, lesson="faults", step=3, page="/lessons", presenter=False)
    room.answer(guard.client(SECRET)[0], "127.0.0.1", "faults", 3, 20000)
    forged = {**room.public(), "revealed": True}
    with dash_app.server.test_request_context("/?lang=en"):
        for state in (room.public(), forged):
            out = classbar.render(state, {"on": True}, {"on": True}, {}, {"credential": "forged", "ok": True}, "y" * 24)
            assert out[9] is None and out[10] == HIDE and "Measured" not in out[8]
        out = classbar.render(room.public(), None, {"on": True}, {}, {"credential": cred, "ok": True}, None)
        assert out[10] == {} and out[9].children[0].figure["data"][0]["y"] == [1]
        gate.revoke(cred)
        out = classbar.render(room.public(), None, {"on": True}, {}, {"credential": cred, "ok": True}, None)
        assert out[9] is None and out[10] == HIDE


def test_a_student_cannot_lead_a_locked_twin(twin_registry, dash_app):
    from twin.ui import classbar
    twin_registry.gate.token = "tok"
    with dash_app.server.test_request_context("/?lang=zh"):
        store, msg, cls = classbar.lead(None)
    assert store is None and msg.startswith("未开始带领：共享孪生已被讲师锁定") and cls == "ctl-msg msg-error"


def test_timeline_go_readies_the_twin_and_opens_the_step(twin_registry, dash_app):
    import importlib
    from contextvars import copy_context
    from dash._callback_context import context_value
    from dash._utils import AttributeDict
    lessons_page = importlib.import_module("pages.lessons")
    btn = '{"index":"prefill-decode/2","type":"lesson-go"}.n_clicks'

    def run():
        context_value.set(AttributeDict(triggered_inputs=[{"prop_id": btn, "value": 1}], outputs_list=[[{}], [{}]]))
        return lessons_page.go([0, 1], "shared", None, "v1", SECRET)
    with dash_app.server.test_request_context("/?lang=en"):
        msgs, classes, step, href = copy_context().run(run)
    tw = twin_registry.shared()
    assert msgs == ["Applied: reset: scenario paper-decode, seed 0; the twin pauses at 120 simulated s"]
    assert (classes, step, href) == (["ctl-msg msg-ok"], {"lesson": "prefill-decode", "step": 2},
                                     "/lessons?lesson=prefill-decode&step=2")
    # the hold is noted at once, the reset when the runner's thread swaps the engine in (either first)
    assert tw.speed == 20 and "pause after 120 simulated s" in [a["what"] for a in tw.actions(2)]


def test_a_class_led_again_after_stop_leading_is_asked_afresh():
    """Issue 36: the plan run twice on one server. After Stop leading, a step led again opens a new
    question (the same browsers answer it again; nobody sees the first class's reveal meanwhile), and
    the export keeps both classes' answers. Going back to a step within one class does not re-ask."""
    room, tw = classroom.Classroom(), FakeTwin()
    room.join("s-a", "1.2.3.4")
    at = dict(lesson="prefill-decode", page="/lessons", presenter=False)
    room.publish(tw, None, step=1, **at)
    room.answer("s-a", "1.2.3.4", "prefill-decode", 1, 3)
    first = room.reveal(tw, None)
    room.publish(tw, None, step=2, **at)
    room.publish(tw, None, step=1, **at)                   # back to step 1 in the same class: still answered
    with pytest.raises(ControlError, match="already answered"):
        room.answer("s-a", "1.2.3.4", "prefill-decode", 1, 4)
    room.end(tw, None)
    room.publish(tw, None, step=1, **at)                   # the next class
    assert room.tally("prefill-decode", 1) is None         # unrevealed: the first class's answer is not shown
    assert room.answer("s-a", "1.2.3.4", "prefill-decode", 1, 4) == 4
    assert room.tally("prefill-decode", 1, lecturer=True)["n"] == 1
    assert room.reveal(tw, None) == first
    rows = list(csv.DictReader(io.StringIO(room.csv())))
    assert [(r["step"], r["answer"]) for r in rows] == [("1", "3"), ("1", "4")]
