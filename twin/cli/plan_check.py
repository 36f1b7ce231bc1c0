"""Run a class plan headless, as a lecturer would, and say whether the lecture works start to finish.

`python -m twin.lessons plan-check PLAN | --all [--json] [--short S]`: one twin (not started, driven
here as its thread would be) and one classroom with two students who follow. Per plan row: the
timeline's Go (`twin.live.lecture.ready`, the lesson page's own command path: action, speed, hold),
the speed set to max, the step published, each student answering its question, the twin run until
the hold pauses it, every on-screen figure read (screen.READERS) and the reveal. After the last row
the lecturer stops leading, which restores the run the twin had before the class, and the whole plan
runs again, its questions asked afresh to the same students (a class restarts without a server
restart), and stops leading once more. A row fails on any refusal, a deployment other than the one
the step names (else its scenario's own), a figure or revealed answer outside the step's tolerance (a
choice question: another choice), or an answer not counted; each end of the class fails if the twin
is not back on the scenario and deployment it started on. `--short S` caps each hold at S simulated seconds: the command path only, figures reported
but not judged (what the test suite runs). Exit status 1 on any failure.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace

from twin import lessons
from twin.engine.scenario import load_scenario
from twin.live import lecture
from twin.live.classroom import Classroom
from twin.live.controls import ControlError
from twin.live.runner import Twin
from twin.lessons.screen import reader

WHO = "python -m twin.lessons plan-check"
STUDENTS = (("s-plan-check-student-1", "10.0.0.1"), ("s-plan-check-student-2", "10.0.0.2"))


@dataclass
class RowResult:
    """What one plan row did: its problems (empty when it passed) and what it measured."""
    where: str
    deployment: str = ""
    wanted: str = ""
    sim_s: float = 0.0
    wall_s: float = 0.0
    figures: list = field(default_factory=list)       # {name, written, shown, off, ok}
    answer: dict | None = None                        # {written, measured, source, tolerance, ok}
    problems: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def wanted_deployment(step: lessons.Step) -> str:
    """The deployment a step's reset must run: the one it names, else its scenario's (or demo's) own."""
    scenario, deployment = lecture.run_of(step)
    return deployment or load_scenario(scenario).deployment


def _off(shown: float, written: float) -> float:
    return abs(shown - written) / max(abs(written), 1e-9)


def _judge_answer(step: lessons.Step, measured: float, source: str) -> dict:
    q = step.question
    written = q.value({n: f.value for n, f in step.figures.items()})
    tol = step.screen.tolerance
    ok = q.choice(measured) == q.choice(written) if q.kind == "choice" else _off(measured, written) <= tol
    return {"written": written, "measured": measured, "source": source, "tolerance": tol, "ok": ok}


def run_row(tw: Twin, room: Classroom, les: lessons.Lesson, n: int, short: float | None) -> RowResult:
    step = les.steps[n - 1]
    if short is not None:
        step = replace(step, screen=replace(step.screen, warmup_s=min(step.screen.warmup_s, short)))
    res = RowResult(f"{les.id} step {n}", wanted=wanted_deployment(step))
    t0 = time.perf_counter()
    try:
        ticket = lecture.ready(tw, step, hold=True, who=WHO)         # the timeline's Go
        tw.control("speed", "max", who=WHO)
        room.publish(tw, None, lesson=les.id, step=n, page=step.action.page, presenter=False)
        tw.run_until_held()
    except (ControlError, RuntimeError) as exc:
        res.problems.append(f"refused: {exc}")
        return res
    if not ticket.accepted:
        res.problems.append(f"action {step.action.control} not accepted: {ticket.reason or 'no answer'}")
    snap = tw.snapshot
    res.deployment, res.sim_s = snap.deployment, round(snap.sim_time, 3)
    if res.deployment != res.wanted:
        res.problems.append(f"runs deployment {res.deployment}, the step needs {res.wanted}")
    for f in step.screen.figures:
        rd, arg = reader(f.read)
        try:
            shown = float(rd.read(tw, arg))
        except (KeyError, IndexError, StopIteration, TypeError, ValueError) as exc:
            res.problems.append(f"{f.name} (read = {f.read}) not on the page: {type(exc).__name__} {exc}")
            continue
        ok = _off(shown, f.value) <= step.screen.tolerance
        res.figures.append({"name": f.name, "written": f.value, "shown": shown, "off": _off(shown, f.value), "ok": ok})
        if not ok and short is None:
            res.problems.append(f"{f.name} = {shown:.6g} on screen, written {f.value:g}: off by "
                                f"{_off(shown, f.value):.1%} (tolerance {step.screen.tolerance:.0%})")
    if step.question is not None:
        q = step.question
        for i, (client, addr) in enumerate(STUDENTS):
            guess = (i % len(q.choices)) if q.kind == "choice" else q.lo + (q.hi - q.lo) * i
            try:
                room.answer(client, addr, les.id, n, guess)
            except ControlError as exc:
                res.problems.append(f"student {i + 1}'s answer refused: {exc}")
        try:
            measured = room.reveal(tw, None)
        except ControlError as exc:
            res.problems.append(f"reveal refused: {exc}")
        else:
            res.answer = _judge_answer(step, measured, room.tally(les.id, n)["source"])
            counted = room.tally(les.id, n)["n"]
            if counted != len(STUDENTS):
                res.problems.append(f"{counted} answers counted, {len(STUDENTS)} sent")
            if not res.answer["ok"] and short is None:
                res.problems.append(f"revealed answer {measured:.6g}, written {res.answer['written']:.6g}: "
                                    f"outside the step's tolerance")
    res.wall_s = round(time.perf_counter() - t0, 2)
    return res


def _room(clock=time.monotonic) -> Classroom:
    room = Classroom(clock=clock)
    for client, addr in STUDENTS:
        room.join(client, addr)
    return room


def end_class(tw: Twin, room: Classroom, start: tuple[str, str], where: str) -> RowResult:
    """Stop leading, and check the twin is back on the (scenario, deployment) it started on."""
    res = RowResult(where, wanted=start[1])
    try:
        room.end(tw, None, who=WHO)
        tw.advance_to(0)                # the restoring reset taken (a new run starts at t = 0)
    except (ControlError, RuntimeError) as exc:
        res.problems.append(f"refused: {exc}")
        return res
    res.deployment = tw.snapshot.deployment
    now = (tw.params.scenario, res.deployment)
    if now != start:
        res.problems.append(f"left on scenario {now[0]}, deployment {now[1]}; the class started on "
                            f"{start[0]}, {start[1]}")
    return res


def run_plan(plan: lessons.Plan, short: float | None = None) -> list[RowResult]:
    """Every row of `plan`, in order, on one twin and one classroom, Stop leading (the twin restored),
    then the whole plan again and Stop leading again: the rows, each run followed by its end of class."""
    minute = [0.0]                    # the room's clock keeps the plan's time (its answer budgets per minute)
    tw, room = Twin("plan-check", speed="max"), _room(lambda: minute[0] * 60.0)
    tw.advance_to(0)
    start = (tw.params.scenario, tw.snapshot.deployment)
    out = []

    def row(it: lessons.PlanItem) -> RowResult:
        minute[0] += it.minutes
        return run_row(tw, room, lessons.get(it.lesson), it.step, short)
    for again in ("", "again: "):     # the same twin, room and students: a class run twice in a row
        rows = [row(it) for it in plan.items]
        for r in rows:
            r.where = again + r.where
        out += rows + [end_class(tw, room, start, f"{again}end of class")]
    return out


def main(plan_ids: list[str], as_json: bool = False, short: float | None = None) -> int:
    plans = [lessons.plan(p) for p in plan_ids] if plan_ids else list(lessons.plans())
    report, bad = {}, 0
    for pl in plans:
        rows = run_plan(pl, short)
        bad += sum(not r.ok for r in rows)
        report[pl.id] = [vars(r) for r in rows]
        if not as_json:
            for r in rows:
                ans = (f"; answer {r.answer['measured']:.4g} ({r.answer['source']}) against {r.answer['written']:.4g}"
                       if r.answer else "")
                print(f"{pl.id} · {r.where}: {r.deployment} at t={r.sim_s:g} s, {len(r.figures)} figures{ans} "
                      f"({r.wall_s:g} s) {'PASS' if r.ok else 'FAIL'}")
                for p in r.problems:
                    print(f"  {p}")
    if as_json:
        print(json.dumps({"plans": report, "failed": bad}, indent=2))
    else:
        print(f"{sum(len(v) for v in report.values()) - bad} rows PASS, {bad} FAIL")
    return 1 if bad else 0
