"""A class that follows the lecturer: the shared twin's lesson state and the room's predictions.

The lecturer (whoever may control the shared twin: the instructor when it is locked) *publishes*
the lesson state (lesson, step, page, presenter mode, revealed); `public()` is the small dict the
shell's status carries to every viewer on the polling it already does, so a following browser moves
with it (twin.ui.classbar) and no viewer runs a loop of its own. A step with a question
(`twin.lessons.Question`) collects one anonymous answer per browser while it is the published step
and not yet revealed; the reveal fixes the measured answer, read from the shared twin by the same
readers `python -m twin.lessons check` uses. Everything is in memory and bounded: MAX_ANSWERS per
step, MAX_STEPS tallies kept (the oldest dropped), ANSWERS_PER_MIN attempts per browser and
ANSWERS_PER_MIN_ADDRESS per address. Refusals are ControlError with English messages (translated at
the UI by twin.ui.errors). The module never imports dash.
"""
from __future__ import annotations

import csv
import io
import math
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from twin import lessons
from twin.live.budget import RateLimit
from twin.live.controls import ControlError, _throttled

MAX_ANSWERS = 1000              # answers kept per step: a large lecture hall (assumption)
MAX_STEPS = 64                  # steps whose tallies are kept; a 45-minute class uses 8 (assumption)
ANSWERS_PER_MIN = 12            # answer attempts per browser a minute: a step every 10 s, with a retry each
ANSWERS_PER_MIN_ADDRESS = 1200  # ... per address: a whole room may sit behind one NAT (assumption)
BINS = 10                       # bars of a number question's histogram
_PAGE = re.compile(r"^/[a-z-]{0,20}$")


@dataclass
class Tally:
    """The answers to one step's question, in arrival order, one per client."""
    question: lessons.Question
    answers: OrderedDict = field(default_factory=OrderedDict)     # client -> value (float, or choice index)
    measured: float | None = None
    source: str = ""            # "live": read from the shared twin at the reveal; "lesson": the checked figure


class Classroom:
    """The shared twin's class: published lesson state and per-step tallies (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.rev = 0
        self.state: dict = {"lesson": None, "step": None, "page": None, "presenter": False, "revealed": False}
        self._tallies: OrderedDict[tuple[str, int], Tally] = OrderedDict()
        self._rate = RateLimit(ANSWERS_PER_MIN)
        self._rate_addr = RateLimit(ANSWERS_PER_MIN_ADDRESS)

    # ---- the lecturer ---------------------------------------------------------------------------

    def publish(self, twin, credential, *, lesson, step, page, presenter: bool) -> bool:
        """Publish where the lecturer is (their authority on the shared `twin` is checked); a new step
        starts unrevealed. True if anything changed (viewers then see a new revision)."""
        twin.require(credential)
        les = lessons.get(lesson)
        n = lessons.step_index(les, step)
        if not isinstance(page, str) or not _PAGE.match(page):
            raise ControlError(f"page = {str(page)[:24]!r}: allowed a page path such as /traffic")
        with self._lock:
            same = (self.state["lesson"], self.state["step"]) == (les.id, n)
            new = {"lesson": les.id, "step": n, "page": page, "presenter": bool(presenter),
                   "revealed": self.state["revealed"] if same else False}
            if new == self.state:
                return False
            self.state = new
            if new["revealed"] is False and les.steps[n - 1].question is not None:
                self._tally(les.id, n)
            self.rev += 1
            return True

    def reveal(self, twin, credential) -> float:
        """Close the answers of the published step and fix its measured answer; returns it."""
        twin.require(credential)
        with self._lock:
            lesson, n = self.state["lesson"], self.state["step"]
        if lesson is None:
            raise ControlError("no lesson step is published: lead the class on a lesson step first")
        step = lessons.get(lesson).steps[n - 1]
        if step.question is None:
            raise ControlError("this step asks no question: nothing to reveal")
        value, source = measured_answer(step, twin)
        with self._lock:
            t = self._tally(lesson, n)
            t.measured, t.source = value, source
            self.state = {**self.state, "revealed": True}
            self.rev += 1
        return value

    def end(self, twin, credential) -> None:
        """Stop leading: followers stay where they are; tallies are kept (bounded) for export."""
        twin.require(credential)
        with self._lock:
            self.state = {"lesson": None, "step": None, "page": None, "presenter": False, "revealed": False}
            self.rev += 1

    # ---- the room -------------------------------------------------------------------------------

    def answer(self, client: str, addr: str | None, lesson, step, value) -> float:
        """Count one browser's answer to the published step's question; returns the value kept."""
        _throttled(self._rate, "answers", client)
        _throttled(self._rate_addr, "answers from this address", f"addr:{addr}")
        with self._lock:
            if (lesson, step) != (self.state["lesson"], self.state["step"]):
                raise ControlError("this step is not the one the lecturer is on: answer the current step")
            if self.state["revealed"]:
                raise ControlError("the answer is already revealed: answers to this step are closed")
            t = self._tally(lesson, step)
            if t is None:
                raise ControlError("this step asks no question")
            if client in t.answers:
                raise ControlError("you already answered this step: one answer per browser")
            if len(t.answers) >= MAX_ANSWERS:
                raise ControlError(f"this step already has {MAX_ANSWERS} answers, the most kept")
            v = check_value(t.question, value)
            t.answers[client] = v       # the count is in public(); rev is for the lecturer's moves
            return v

    def public(self) -> dict:
        """What every viewer's status carries: the published state, its revision and the count."""
        with self._lock:
            t = self._tallies.get((self.state["lesson"], self.state["step"]))
            return {**self.state, "rev": self.rev, "n": len(t.answers) if t else 0,
                    "q": t is not None}

    def tally(self, lesson, step) -> dict | None:
        """The distribution of one step's answers (bars), and the measured answer once revealed."""
        with self._lock:
            t = self._tallies.get((lesson, step))
            if t is None:
                return None
            values, q, measured, source = list(t.answers.values()), t.question, t.measured, t.source
        if q.kind == "choice":
            bars = [(c, sum(v == i for v in values)) for i, c in enumerate(q.choices)]
        else:
            bars = histogram(values + ([measured] if measured is not None else []), values)
        return {"kind": q.kind, "n": len(values), "bars": bars, "measured": measured, "source": source,
                "unit": q.unit, "digits": q.digits}

    def csv(self) -> str:
        """Every kept answer, anonymous (the order they came in), with the measured answer per step."""
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow(["lesson", "step", "kind", "unit", "answer_no", "answer", "measured", "measured_from"])
        with self._lock:
            rows = [(k, t.question, list(t.answers.values()), t.measured, t.source) for k, t in self._tallies.items()]
        for (lesson, n), q, values, measured, source in rows:
            show = (lambda v: q.choices[int(v)]) if q.kind == "choice" else (lambda v: f"{v:.12g}")
            m = "" if measured is None else show(q.choice(measured)) if q.kind == "choice" else f"{measured:.6g}"
            for i, v in enumerate(values, 1):
                w.writerow([lesson, n, q.kind, q.unit, i, show(v), m, source])
        return out.getvalue()

    def _tally(self, lesson: str, n: int) -> Tally | None:
        """The step's tally, created (and the oldest dropped past MAX_STEPS) if it asks a question.
        Called with the lock held."""
        t = self._tallies.get((lesson, n))
        if t is None:
            q = lessons.get(lesson).steps[n - 1].question
            if q is None:
                return None
            t = self._tallies[(lesson, n)] = Tally(q)
            while len(self._tallies) > MAX_STEPS:
                self._tallies.popitem(last=False)
        return t


def check_value(q: lessons.Question, value) -> float:
    """A submitted answer as the tally keeps it (a number in range, or a choice index)."""
    if q.kind == "choice":
        if type(value) is not int or not 0 <= value < len(q.choices):
            raise ControlError(f"answer: allowed one of the {len(q.choices)} choices")
        return value
    try:
        v = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and q.lo <= v <= q.hi):
        raise ControlError(f"answer = {str(value)[:16]!r}: allowed a number from {q.lo:g} to {q.hi:g}")
    return v


def histogram(span: list[float], values: list[float]) -> list[tuple[float, int]]:
    """(bin centre, count) of `values` over BINS equal bins spanning `span` (answers and the
    measured answer, so it falls on the chart)."""
    if not span:
        return []
    lo, hi = min(span), max(span)
    if hi - lo < 1e-9:
        return [(lo, len(values))]
    w = (hi - lo) / BINS
    counts = [0] * BINS
    for v in values:
        counts[min(int((v - lo) / w), BINS - 1)] += 1
    return [(lo + (i + 0.5) * w, c) for i, c in enumerate(counts)]


def measured_answer(step: lessons.Step, twin) -> tuple[float, str]:
    """The question's answer: the step's figures read live from `twin` by the lesson check's page
    readers ("live"), else (a figure from a command, or not on screen now) the checked figures the
    lesson records ("lesson", re-measured by `python -m twin.lessons check` / `measure`)."""
    from twin.lessons.screen import reader
    q = step.question
    names = q.figure.split("/")
    figs = step.figures
    live = {}
    for name in names:
        f = figs[name]
        if not isinstance(f, lessons.ScreenFigure):
            break
        rd, arg = reader(f.read)
        try:
            live[name] = float(rd.read(twin, arg))
        except (KeyError, IndexError, StopIteration, TypeError, ValueError, AttributeError, ZeroDivisionError):
            break
    if len(live) == len(names):
        try:
            v = q.value(live)
            if math.isfinite(v):
                return v, "live"
        except ZeroDivisionError:
            pass
    return q.value({n: f.value for n, f in figs.items()}), "lesson"
