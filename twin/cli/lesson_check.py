"""Drive every lesson step on a live twin and compare what its page shows with the step's answer.

`python -m twin.lessons check [--quick] [--lesson ID]`: for each step, a fresh `twin.live.runner.Twin`
(not started: driven here, in order) takes the step's action through `Twin.control`, the control
path the lesson page uses, then the speed the step sets; it runs the step's warm-up simulated
seconds (`Twin.advance_to`) and each screen figure is read from the page's own numbers
(screen.READERS). One line per figure: written, on screen, relative difference, PASS or FAIL;
exit status 1 on any FAIL. `--quick` skips the steps marked `slow` (long fault and cloud runs).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from twin.live.runner import Twin

from twin.lessons import Lesson, LessonError, ScreenFigure, Step, lessons
from twin.lessons.screen import reader

WHO = "python -m twin.lessons check"


@dataclass(frozen=True)
class Row:
    where: str
    figure: ScreenFigure
    shown: float
    tolerance: float

    @property
    def off(self) -> float:
        return abs(self.shown - self.figure.value) / max(abs(self.figure.value), 1e-9)

    @property
    def ok(self) -> bool:
        return self.off <= self.tolerance


def drive(step: Step) -> Twin:
    """A twin after the step's action, its speed and its warm-up (the page's view of it)."""
    tw = Twin("lesson-check")
    tw.control(step.action.control, step.action.value, who=WHO)
    tw.control("speed", step.screen.speed, who=WHO)
    tw.advance_to(step.screen.warmup_s)
    return tw


def check_step(les: Lesson, n: int) -> list[Row]:
    step = les.steps[n - 1]
    tw = drive(step)
    rows = []
    for f in step.screen.figures:
        rd, arg = reader(f.read)
        try:
            shown = float(rd.read(tw, arg))
        except (KeyError, IndexError, StopIteration, TypeError, ValueError) as exc:
            raise LessonError(f"{les.id} step {n}: {f.name} (read = {f.read}) not on the page after "
                              f"{step.screen.warmup_s:g} s: {type(exc).__name__} {exc}") from None
        rows.append(Row(f"{les.id} step {n}", f, shown, step.screen.tolerance))
    return rows


def check(quick: bool = False, lesson: str | None = None, out=print) -> list[Row]:
    """Every (or one lesson's) step driven and read; one report line per figure through `out`."""
    chosen = [les for les in lessons() if lesson in (None, les.id)]
    if not chosen:
        raise LessonError(f"lesson = {lesson!r}: no such lesson; allowed {', '.join(x.id for x in lessons())}")
    rows = []
    for les in chosen:
        for n, step in enumerate(les.steps, 1):
            if quick and step.screen.slow:
                out(f"{les.id} step {n}: skipped (slow; run without --quick)")
                continue
            t0 = time.perf_counter()
            got = check_step(les, n)
            out(f"{les.id} step {n}: {step.action.page} after {step.screen.warmup_s:g} sim s "
                f"(speed {step.screen.speed:g}x, tolerance {step.screen.tolerance:.0%}, "
                f"{time.perf_counter() - t0:.1f} s)")
            for r in got:
                out(f"  {r.figure.name:<15} {r.figure.read:<62} {r.figure.value:>10g} {r.shown:>10.4g}"
                    f"{r.off * 100:>8.1f}%  {'PASS' if r.ok else 'FAIL'}")
            rows += got
    return rows


def main(quick: bool = False, lesson: str | None = None) -> int:
    rows = check(quick, lesson)
    bad = [r for r in rows if not r.ok]
    print(f"{len(rows) - len(bad)} PASS, {len(bad)} FAIL")
    return 1 if bad else 0
