"""A lecture's screens, callbacks called as functions (issue 36): a page reached while the twin is
paused (a hold) draws on arrival, the Trade-offs live point survives a redraw, a student sees no
lecturer controls, and the class can be followed from the plan's page before its first question."""
from __future__ import annotations

from contextvars import copy_context

import pytest
from dash import no_update
from dash._callback_context import context_value
from dash._utils import AttributeDict

from twin import lessons
from twin.live import classroom, session
from twin.live.runner import Twin
from twin.ui import classbar, guard
from twin.ui.polling import beat

PAGE_BEAT = [{"id": {"type": "beat", "page": "tr"}, "property": "data"}]
HIDE = {"display": "none"}


def mounted(fn, *args):
    """Call a callback as Dash does when a page's components mount (no trigger), with one page beat store."""
    def run():
        context_value.set(AttributeDict(triggered_inputs=[], updated_props={},
                                        outputs_list=[{}, {}, PAGE_BEAT]))
        return fn(*args)
    return copy_context().run(run)


def test_a_page_mounted_while_the_twin_is_paused_gets_the_beat(dash_app, twin_registry):
    """The page's first call waits for the shell's; with no news the shell sent nothing and the page
    (a follower's Traffic after the hold paused the twin) stayed on "waiting for the twin"."""
    tw = twin_registry.shared()
    now = beat(tw)
    status, shell, pages = mounted(dash_app.on_tick, 1, "shared", None, None, now)
    assert (status, shell) == (no_update, no_update)          # nothing new for the shell itself
    assert pages == [now]                                      # but the new page gets the beat to draw on


def test_the_tradeoffs_redraw_keeps_the_live_point(dash_app, monkeypatch):
    """The SLO redraw (the slider, the page's first draw) used to drop the running twin's points; a
    paused twin sends no tick that would put them back."""
    from pages import tradeoffs as page
    from twin.ui import tradeoffs
    tw = Twin("to-live")
    tw.control("reset", {"scenario": "paper-decode"}, who="test")
    tw.advance_to(60)
    monkeypatch.setattr(page, "twin_for", lambda _choice: (tw, ""))
    fig, _answer = page.on_slo(50, 4096, "cloudmatrix-infer-paper", "shared")
    live = fig["data"][tradeoffs.T_LIVE]
    xs, ys = tradeoffs.trail_from(tw.snapshot.history)
    assert (live["x"], live["y"]) == (xs[-1:], ys[-1:]) and len(xs) > 0
    fig, _answer = page.on_slo(50, 4096, "deepseek-h800", "shared")      # another deployment's curve: no live point
    assert fig["data"][tradeoffs.T_LIVE]["x"] == []


@pytest.fixture
def locked(twin_registry):
    twin_registry.gate.token = "tok-screens"
    twin_registry.classroom = classroom.Classroom()
    cred = twin_registry.unlock("tok-screens", "s-lecturer-screens", "10.0.0.9")
    yield twin_registry, {"credential": cred, "ok": True}
    twin_registry.gate.token = None


def test_students_see_no_lecturer_controls(dash_app, locked):
    """Lead the class, the step's action and the timeline: only for a tab that may use them, never
    for a follower (students used to see them and got refusals)."""
    from pages import lessons as page
    reg, token = locked
    ids = [{"type": "lesson-lecturer", "index": i} for i in ("lead", "act", "timeline")]
    assert page.lecturer_parts(ids, None, "shared", None, "s" * 24) == [HIDE] * 3          # a student, locked twin
    assert page.lecturer_parts(ids, token, "shared", None, "s" * 24) == [{}] * 3           # the instructor's tab
    assert page.lecturer_parts(ids, token, "shared", {"on": True}, "s" * 24) == [HIDE] * 3  # ... following: a student
    assert page.lecturer_parts(ids, {"credential": "forged", "ok": True}, "shared", None, "s" * 24) == [HIDE] * 3
    secret = "b" * 24
    sb = reg.open_sandbox(client=guard.client(secret)[0])
    assert page.lecturer_parts(ids, None, sb.key, None, secret) == [HIDE, {}, {}]   # own sandbox: act, not lead
    assert page.lecturer_parts(ids, None, sb.key, None, "c" * 24) == [HIDE] * 3      # someone else's sandbox
    reg.gate.token = None
    assert page.lecturer_parts(ids, None, "shared", None, "s" * 24) == [{}] * 3          # unlocked: anyone leads


def test_the_class_follows_from_the_plans_page_and_answers_the_first_question(dash_app, locked):
    """Students could follow only once a step was published, which opened its question: joining then
    was too late to answer the plan's first question."""
    reg, token = locked
    room, tw = reg.classroom, reg.shared()
    pub = {"lesson": None, "step": None, "plan": "why-supernode", "page": "/lessons", "presenter": False}
    assert classbar.publish(pub, None)[2] == {"on": False}          # a student cannot lead
    classbar.publish(pub, token)
    st = room.public()
    assert (st["leading"], st["plan"], st["lesson"], st["q"]) == (True, "why-supernode", None, False)
    assert classbar.render(st, {"on": True}, None, None, None, "s" * 24)[0] == \
        "Lecturer: Why a supernode, before the first step"
    for c in ("s-student-a", "s-student-b"):
        room.join(c, "10.0.0.7")
    first = lessons.plan("why-supernode").items[0]
    classbar.publish({"lesson": first.lesson, "step": first.step, "page": "/", "presenter": False}, token)
    assert room.answer("s-student-a", "10.0.0.7", first.lesson, first.step, 3.5) == 3.5
    assert room.public()["n"] == 1
    with pytest.raises(lessons.LessonError, match="no such plan"):
        room.publish(tw, token["credential"], lesson=None, step=None, page="/lessons", presenter=False, plan="nope")


def test_a_follower_is_shown_where_the_steps_live_number_is(dash_app, locked):
    """The Validation table the supernode question is about sits below the first screen: the bar tells
    a follower's browser which element to bring into view (not the lecturer's)."""
    reg, token = locked
    classbar.publish({"lesson": "supernode", "step": 1, "page": "/validation", "presenter": False}, token)
    st = reg.classroom.public()
    assert classbar.render(st, {"on": True}, None, None, None, "s" * 24)[-1] == "#va-predictions"
    assert classbar.render(st, None, {"on": True}, None, token, None)[-1] is None
    assert {classbar.figure_at(s) for les in lessons.lessons() for s in les.steps
            if any(f.read.split(".")[0] in ("overview", "tradeoffs", "traffic", "cache") for f in s.screen.figures)} \
        <= set(classbar.FIGURE_AT.values())


def test_a_browser_answers_a_step_again_when_the_class_runs_again(dash_app, locked):
    """Its answer from the first class used to hide the question (the browser's store is keyed by step)."""
    reg, token = locked
    at = {"lesson": "prefill-decode", "step": 1, "page": "/", "presenter": False}
    reg.classroom.join(*guard.client("s" * 24))
    classbar.publish(at, token)
    first = classbar.render(reg.classroom.public(), {"on": True}, None, {"prefill-decode/1": 3.0}, None, "s" * 24)
    assert first[3] == HIDE and first[8].startswith("Your answer: 3")           # answered in this class
    reg.classroom.end(reg.shared(), token["credential"])
    classbar.publish(at, token)
    again = classbar.render(reg.classroom.public(), {"on": True}, None, {"prefill-decode/1": 3.0}, None, "s" * 24)
    assert again[3] == {} and again[8] == ""                                     # asked afresh
