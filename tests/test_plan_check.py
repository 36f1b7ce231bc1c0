"""A class plan runs start to finish (issue 36): a step is checked whole before anything is applied,
a step's reset sets the deployment it needs, and `python -m twin.lessons plan-check` runs every plan
through the lesson page's command path (Go, hold, questions, reveal, Go again), failing on a refusal
or a deployment left behind. The full run with every figure judged is `plan-check --all` (docs/class.md);
here each hold is capped (`--short`), so the suite stays fast."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from twin import lessons
from twin.lessons import __main__ as lessons_cli
from twin.cli import plan_check as plancheck
from twin.live import lecture
from twin.live.controls import ControlError
from twin.live.runner import Twin

SHORT_S = 5.0                   # simulated seconds per hold: the command path, not the figures


def step(lesson: str, n: int) -> lessons.Step:
    return lessons.get(lesson).steps[n - 1]


def test_a_step_is_checked_whole_before_anything_is_applied():
    tw = Twin("whole", speed=3)
    before = (tw.speed, vars(tw.params).copy(), tw.run)
    broken = replace(step("supernode", 2), screen=replace(step("supernode", 2).screen, warmup_s=0.0))
    with pytest.raises(ControlError, match=r"hold = '0.0': allowed 0 < seconds <= 3600"):
        lecture.ready(tw, broken, hold=True, who="test")
    tw.advance_to(0)                                  # a reset, had one been sent, would be taken here
    assert (tw.speed, vars(tw.params), tw.run) == before
    assert tw.snapshot.deployment == "cloudmatrix-infer-paper"


def test_every_step_warms_up_for_a_hold_the_controls_take():
    from twin.live.controls import HOLD_MAX_S, parse_hold
    assert lessons.WARMUP_MAX_S == HOLD_MAX_S             # the loader's range is the hold's (floors apart)
    for les in lessons.lessons():
        for s in les.steps:
            assert parse_hold(s.screen.warmup_s) == s.screen.warmup_s


def test_a_steps_reset_sets_the_deployment_it_needs():
    """Step 7 of the plan used to run on the H800 deployment of step 8's earlier run."""
    tw = Twin("deployments")
    tw.control(*(lambda a: (a.control, a.value))(step("supernode", 2).action), who="test")
    tw.advance_to(0)
    assert tw.snapshot.deployment == "deepseek-h800"
    tw.control(*(lambda a: (a.control, a.value))(step("supernode", 1).action), who="test")
    tw.advance_to(0)
    assert tw.snapshot.deployment == "cloudmatrix-infer-paper"
    assert (tw.params.trace, tw.params.seed) == (None, 0)


@pytest.mark.parametrize("plan", [p.id for p in lessons.plans()])
@pytest.mark.slow
def test_every_plan_runs_start_to_finish_and_again(plan):
    """The whole plan, each warm-up in full at max speed (why-supernode: about 20 s of CPU): every
    figure and every revealed answer within its step's tolerance, each step on its deployment."""
    pl = lessons.plan(plan)
    rows = plancheck.run_plan(pl)
    assert [r.problems for r in rows] == [[]] * (2 * len(pl.items) + 2)
    where = [f"{it.lesson} step {it.step}" for it in pl.items] + ["end of class"]
    assert [r.where for r in rows] == where + [f"again: {w}" for w in where]
    assert rows[len(pl.items)].deployment == rows[-1].deployment == "cloudmatrix-infer-paper"   # default's own
    for r, it in zip(rows[:len(pl.items)] + rows[len(pl.items) + 1:-1], pl.items * 2):
        s = step(it.lesson, it.step)
        assert r.deployment == plancheck.wanted_deployment(s) == (s.action.value.get("deployment")
                                                                  or "cloudmatrix-infer-paper")
        assert r.sim_s == pytest.approx(s.screen.warmup_s, abs=1e-6)        # paused by the hold, exactly
        assert [f["name"] for f in r.figures if f["ok"]] == [f.name for f in s.screen.figures]
        assert (r.answer is not None) == (s.question is not None)
        assert r.answer is None or r.answer["ok"]


def test_plan_check_fails_on_a_figure_or_an_answer_outside_its_tolerance():
    """A written figure 20 % off what the page shows: the figure fails, and so does the number the
    class is asked for (a choice question fails only on another choice: supernode step 1 at +10 %)."""
    pd = lessons.get("prefill-decode")
    s2 = pd.steps[1]                                    # tpot96 / tpot8 from the Trade-offs curve (no warm-up needed)
    figs = tuple(replace(f, value=f.value * 1.2) if f.name == "tpot96" else f for f in s2.screen.figures)
    broken = replace(pd, steps=(pd.steps[0], replace(s2, screen=replace(s2.screen, figures=figs, warmup_s=10.0))))
    row = plancheck.run_row(Twin("off"), plancheck._room(), broken, 2, None)
    assert "tpot96 = 49.6823 on screen, written 59.6188: off by 16.7% (tolerance 10%)" in row.problems
    assert "revealed answer 3.20662, written 3.84794: outside the step's tolerance" in row.problems
    assert row.answer["measured"] == pytest.approx(3.20662, abs=1e-5) and not row.answer["ok"]
    sn = lessons.get("supernode")
    fig = sn.steps[0].screen.figures[0]                 # cm_tf, read live from the Validation table
    off = replace(sn.steps[0].screen, figures=(replace(fig, value=fig.value * 1.1), *sn.steps[0].screen.figures[1:]))
    row = plancheck.run_row(Twin("off"), plancheck._room(), replace(sn, steps=(replace(sn.steps[0], screen=off),)), 1, None)
    assert row.problems == ["cm_tf = 1.285 on screen, written 1.4135: off by 9.1% (tolerance 1%)"]
    assert row.answer["ok"]                              # still CloudMatrix384 per TFLOPS


def test_plan_check_fails_on_a_step_broken_the_way_step_7_was(monkeypatch):
    """A hold of 0 s and a reset that names no deployment after the H800 step: both fail the check."""
    sn = lessons.get("supernode")
    old_reset = replace(sn.steps[0].action, value={"scenario": "paper-decode"})
    broken = replace(sn, steps=(replace(sn.steps[0], screen=replace(sn.steps[0].screen, warmup_s=0.0)),
                                sn.steps[1], replace(sn.steps[0], action=old_reset)))
    real_get = lessons.get
    monkeypatch.setattr(lessons, "get", lambda lid: broken if lid == "supernode" else real_get(lid))
    plan = lessons.Plan("broken", "B", "S", tuple(lessons.PlanItem("supernode", n, 5, "say") for n in (1, 2, 3)))
    rows = plancheck.run_plan(plan, short=SHORT_S)
    assert rows[0].problems == ["refused: hold = '0.0': allowed 0 < seconds <= 3600 (simulated)"]
    assert rows[1].problems == []
    assert rows[2].problems == ["runs deployment deepseek-h800, the step needs cloudmatrix-infer-paper"]


def test_plan_check_cli_json_and_exit_status(capsys):
    assert lessons_cli.main(["plan-check", "why-supernode", "--json", "--short", str(SHORT_S)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] == 0
    rows = out["plans"]["why-supernode"]
    assert len(rows) == 2 * len(lessons.plan("why-supernode").items) + 2
    assert {r["answer"]["source"] for r in rows if r["answer"]} <= {"live", "lesson"}
    assert lessons_cli.main(["plan-check", "nope"]) == 2
    assert "plan = 'nope': no such plan; allowed why-supernode" in capsys.readouterr().err
    assert lessons_cli.main(["plan-check", "--short", "0"]) == 2
    assert "--short = 0: allowed 0 < S <= 3600" in capsys.readouterr().err


def _parts(c, out):
    """Every component of a layout, depth first."""
    if isinstance(c, (list, tuple)):
        for x in c:
            _parts(x, out)
    elif hasattr(c, "to_plotly_json"):
        out.append(c)
        _parts(getattr(c, "children", None), out)
    return out


def test_next_step_goes_on_into_the_next_lesson_of_the_plan(dash_app):
    """Issue 36, item 8: at the last plan row of a lesson (plan rows 2, 4, 6) Next step used to stop."""
    import importlib
    page = importlib.import_module("pages.lessons")
    pl = lessons.plan("why-supernode")
    with dash_app.server.test_request_context("/?lang=en"):
        plan_view = _parts(page.layout(plan="why-supernode"), [])
        step_links = [c.href for c in plan_view if getattr(c, "href", "").startswith("/lessons?lesson=")]
        assert step_links[0] == "/lessons?lesson=prefill-decode&step=1&plan=why-supernode"     # Start: step 1
        for at, (it, nxt) in enumerate(zip(pl.items, pl.items[1:]), 1):
            view = _parts(page.layout(lesson=it.lesson, step=str(it.step), plan="why-supernode"), [])
            ready = [c for c in view if c.children == "Next step: ready the twin →"]
            assert [c.id["index"] for c in ready] == [f"{nxt.lesson}/{nxt.step}/why-supernode/next"], at
            links = [c.href for c in view if c.children == "Next step →"]
            assert links == [f"/lessons?lesson={nxt.lesson}&step={nxt.step}&plan=why-supernode"] * 2, at
        last = _parts(page.layout(lesson=pl.items[-1].lesson, step=str(pl.items[-1].step), plan="why-supernode"), [])
        assert [c.href for c in last if c.children == "Back to the plan"] == ["/lessons?plan=why-supernode"] * 2
        assert not [c for c in last if c.children == "Next step: ready the twin →"]


def test_go_on_a_plan_row_keeps_the_plan(dash_app, twin_registry):
    import importlib
    from contextvars import copy_context
    from dash._callback_context import context_value
    from dash._utils import AttributeDict
    page = importlib.import_module("pages.lessons")

    def go(index):
        btn = json.dumps({"index": index, "type": "lesson-go"}, separators=(",", ":")) + ".n_clicks"

        def run():
            context_value.set(AttributeDict(triggered_inputs=[{"prop_id": btn, "value": 1}],
                                            outputs_list=[[{}], [{}]]))
            return page.go([1], "shared", None, "v1", "s" * 30)
        with dash_app.server.test_request_context("/?lang=en"):
            return copy_context().run(run)
    msgs, classes, step, href = go("kv-cache/1/why-supernode")
    assert (classes, step, href) == (["ctl-msg msg-ok"], {"lesson": "kv-cache", "step": 1},
                                     "/lessons?lesson=kv-cache&step=1&plan=why-supernode")
    for forged in ("kv-cache/1/nope", "kv-cache/1/why-supernode/x", "kv-cache/9/why-supernode"):
        assert go(forged)[0] == ["This lesson step is not known; reload the lesson."]


def test_a_shared_twins_warm_up_is_measured_and_the_timeline_says_so(dash_app, monkeypatch):
    """Issue 36, item 3: the timeline promised "about 12 s" (240 s at 20x) where the warm-up took 32-43 s.
    A hold that pauses the shared twin records what it took; the timeline shows that, and before any is
    measured says its figure is only what the speed would give."""
    import importlib
    from twin.live import pace
    page = importlib.import_module("pages.lessons")
    monkeypatch.setattr(pace, "_paces", {})
    s = step("supernode", 1)            # paper-decode, its own deployment: 10 s at 20x
    with dash_app.server.test_request_context("/?lang=en"):
        assert page.needs(s, lambda t: t) == "10 simulated s at 20×: 0 s if the twin keeps that pace (not measured here yet)"
    tw = Twin("measured", shared=True)
    lecture.ready(tw, s, hold=True, who="test")
    tw.run_until_held()
    got = pace.measured("paper-decode", None)
    assert got is not None and got.sim_s == 10 and got.wall_s > 0 and got.speed == 20
    assert pace.measured("paper-decode", "deepseek-h800") is None          # another run: not measured
    sandbox = Twin("sandbox")                                               # a sandbox's pace is not the room's
    lecture.ready(sandbox, step("supernode", 2), hold=True, who="test")
    sandbox.run_until_held()
    assert pace.measured("paper-decode", "deepseek-h800") is None
    pace.record("default", "", pace.Pace(240.0, 32.0, 20.0))               # 7.5x reached
    with dash_app.server.test_request_context("/?lang=zh"):
        from twin import i18n
        first = step("prefill-decode", 1)
        assert page.needs(first, i18n.gettext("en")) == ("240 simulated s at 20×: about 32 s at the pace measured "
                                                         "here (the twin reached 7.5×)")
        assert page.needs(first, i18n.gettext("zh")) == "20× 速度下模拟 240 秒：按本服务器实测的速度约需 32 秒（孪生达到 7.5×）"
    assert pace.Pace(240.0, 6.0, "max").wall_for(240.0, 20.0) == 12.0      # faster than asked: the speed's time


def test_a_lesson_reset_drops_a_viewers_load_override():
    """A viewer's load set on the step's scenario used to be kept by the step's reset (same scenario)."""
    tw = Twin("load")
    tw.advance_to(0)
    tw.control("load", 0.4, who="viewer")
    assert (tw.params.scenario, tw.params.load) == ("default", 0.4)
    lecture.ready(tw, step("prefill-decode", 1), who="test")         # reset to default, its own load
    tw.advance_to(0)
    assert (tw.params.scenario, tw.params.load) == ("default", None)
    tw.control("load", 0.4, who="viewer")
    tw.control("reset", {"scenario": "default"}, who="viewer")       # the control bar's reset keeps it
    tw.advance_to(0)
    assert tw.params.load == 0.4


def test_stop_leading_restores_the_run_the_class_started_on():
    """After the H800 step the shared twin stays on the H800 deployment, paused by the hold, at max
    speed, unless the end of the class brings back the run (and speed) it had when leading began."""
    from twin.live.classroom import Classroom
    tw, room = Twin("restore", speed=5), Classroom()
    tw.control("reset", {"scenario": "bursty-chat", "seed": 3}, who="test")
    tw.advance_to(0)
    tw.control("load", 0.5, who="viewer")
    h800 = step("supernode", 2)
    room.publish(tw, None, lesson="supernode", step=2, page="/", presenter=False)
    lecture.ready(tw, h800, hold=True, who="test")
    tw.control("speed", "max", who="test")
    tw.run_until_held()
    assert (tw.snapshot.deployment, tw.paused) == ("deepseek-h800", True)
    assert room.end(tw, None) is True
    tw.advance_to(0)
    assert (tw.params.scenario, tw.params.seed, tw.params.load, tw.params.deployment) == ("bursty-chat", 3, 0.5, None)
    assert (tw.speed, tw.paused) == (5, False)
    assert tw.snapshot.deployment == "cloudmatrix-infer-paper"
    room.publish(tw, None, lesson="supernode", step=1, page="/validation", presenter=False)
    assert room.end(tw, None) is False                 # nothing changed: no reset


def test_plan_check_fails_when_the_class_leaves_the_twin_elsewhere(monkeypatch):
    monkeypatch.setattr(lecture, "restore", lambda tw, start, **who: False)
    plan = lessons.Plan("h800", "H", "S", (lessons.PlanItem("supernode", 2, 5, "say"),))
    rows = plancheck.run_plan(plan, short=SHORT_S)
    assert [r.where for r in rows] == ["supernode step 2", "end of class", "again: supernode step 2",
                                       "again: end of class"]
    assert rows[1].problems == ["left on scenario paper-decode, deployment deepseek-h800; the class started on "
                                "default, cloudmatrix-infer-paper"]
