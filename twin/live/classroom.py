"""A class that follows the lecturer: the shared twin's lesson state and the room's predictions.

The lecturer (whoever may control the shared twin: the instructor when it is locked) *publishes*
the lesson state (lesson, step, page, presenter mode, revealed); `public()` is the small dict the
shell's status carries to every viewer on the polling it already does, so a following browser moves
with it (twin.ui.classbar) and no viewer runs a loop of its own. The reveal fixes the measured
answer, read from the shared twin by the same readers `python -m twin.lessons check` uses.

Who may answer (issue 34): a browser *joins* the class when it follows (`join`), and a step's
question takes one anonymous answer from each browser that had joined before the question opened,
while it is the published step and not yet revealed. So a question's answers are bounded by the
class it was asked to, and nobody is ever refused because others answered: there is no cap on a
question that anyone can fill. What one address can add is bounded where identities are made:
JOINS_PER_MIN_ADDRESS new browsers a minute and MEMBERS_PER_ADDRESS in the class (its oldest gives
way), enough for a lecture hall behind one NAT; past MAX_MEMBERS in all, the address holding the
most gives way, so a flood from a few addresses never pushes out a student elsewhere. Until the
reveal the distribution goes only to the lecturer (`tally(lecturer=True)`). Everything is in memory
and bounded (members, MAX_STEPS tallies of at most MAX_MEMBERS answers each, rate-limit keys).
The class also keeps the run the shared twin had when the lecturer began leading (the first
publish): Stop leading (`end`) restores it, so the plan can run again and the room is left as it
was found (issue 36). Refusals are ControlError with English messages (translated at the UI by twin.ui.errors). The
module never imports dash.
"""
from __future__ import annotations

import csv
import io
import math
import re
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable

from twin import lessons
from twin.live import lecture
from twin.live.budget import RateLimit
from twin.live.controls import ControlError, _throttled

MEMBERS_PER_ADDRESS = 400       # browsers in the class from one address: a large lecture hall behind one NAT (assumption)
MAX_MEMBERS = 4000              # browsers in the class in all: ten such halls (assumption); bounds every tally
JOINS_PER_MIN_ADDRESS = 200     # new browsers joining from one address a minute: that hall joins in 2 min (assumption)
JOINS_PER_MIN = 12              # joins per browser a minute (a follow, or a page load while following)
MAX_STEPS = 32                  # steps whose tallies are kept; a 45-minute class uses 8 (assumption)
ANSWERS_PER_MIN = 12            # answer attempts per browser a minute: a step every 10 s, with a retry each
ANSWERS_PER_MIN_ADDRESS = 1200  # ... per address: a whole room may sit behind one NAT (assumption)
BINS = 10                       # bars of a number question's histogram
_PAGE = re.compile(r"^/[a-z-]{0,20}$")
IDLE = {"lesson": None, "step": None, "page": None, "presenter": False, "revealed": False, "plan": None,
        "leading": False}         # the published state while nobody leads


@dataclass
class Tally:
    """The answers to one step's question, in arrival order, one per client joined by `opened`."""
    question: lessons.Question
    opened: int                 # the last join counted when the question opened: later joiners wait for the next
    answers: OrderedDict = field(default_factory=OrderedDict)     # client -> (value, network no.)
    networks: dict = field(default_factory=dict)                  # address -> its number here (1, 2, ... anonymous)
    measured: float | None = None
    source: str = ""            # "live": read from the shared twin at the reveal; "lesson": the checked figure
    lecture: int = 0            # the class (Classroom.lecture) that asked it


@dataclass
class Member:
    """A browser in the class: the address it joined from and when (the join counter)."""
    addr: str | None
    joined: int


class Classroom:
    """The shared twin's class: published lesson state and per-step tallies (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._lock = threading.Lock()
        self.rev = 0
        self.state: dict = dict(IDLE)
        self._tallies: OrderedDict[tuple[str, int], Tally] = OrderedDict()
        self._earlier: deque = deque(maxlen=MAX_STEPS)     # (key, Tally) of earlier classes, for the export
        self.lecture = 0                                    # classes ended so far (`end`): the next asks afresh
        self._rate = RateLimit(ANSWERS_PER_MIN, clock=clock)
        self._rate_addr = RateLimit(ANSWERS_PER_MIN_ADDRESS, clock=clock)
        self._joins = RateLimit(JOINS_PER_MIN, clock=clock)
        self._joins_addr = RateLimit(JOINS_PER_MIN_ADDRESS, clock=clock)
        self._members: dict[str, Member] = {}                            # client -> membership
        self._by_addr: dict[str | None, OrderedDict[str, None]] = {}     # address -> its members, oldest first
        self._joined = 0                                                 # joins counted so far
        self._start: dict | None = None         # the shared twin's run when leading began (lecture.starting)

    # ---- the lecturer ---------------------------------------------------------------------------

    def publish(self, twin, credential, *, lesson, step, page, presenter: bool, plan=None) -> bool:
        """Publish where the lecturer is (their authority on the shared `twin` is checked); a new step
        starts unrevealed. No `lesson` (with `plan`, its page): leading, with no step yet, so the class
        can follow (and join) before the first question is asked. True if anything changed (viewers
        then see a new revision)."""
        twin.require(credential)
        les = lessons.get(lesson) if lesson is not None or plan is None else None
        n = lessons.step_index(les, step) if les is not None else None
        pl = lessons.plan(plan).id if plan is not None else None
        if not isinstance(page, str) or not _PAGE.match(page):
            raise ControlError(f"page = {str(page)[:24]!r}: allowed a page path such as /traffic")
        lid = les.id if les is not None else None
        with self._lock:
            same = (self.state["lesson"], self.state["step"]) == (lid, n)
            new = {"lesson": lid, "step": n, "page": page, "presenter": bool(presenter),
                   "revealed": self.state["revealed"] if same else False, "plan": pl, "leading": True}
            if new == self.state:
                return False
            if not self.state["leading"] and self._start is None:
                self._start = lecture.starting(twin)     # the run to restore when the class ends
            self.state = new
            if les is not None and new["revealed"] is False and les.steps[n - 1].question is not None:
                old = self._tallies.get((les.id, n))
                if old is not None and old.lecture != self.lecture:   # asked in an earlier class: ask again
                    self._earlier.append(((les.id, n), self._tallies.pop((les.id, n))))
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

    def end(self, twin, credential, **who) -> bool:
        """Stop leading: followers stay where they are (and in the class); tallies are kept (bounded) for
        export, and a step led again after this is asked afresh (the plan run twice, issue 36). The
        shared `twin` gets back the run it had when leading began (`who`: the log's `send` keywords);
        True if that took a reset."""
        twin.require(credential)
        with self._lock:
            self.state = dict(IDLE)
            self.rev += 1
            self.lecture += 1
            start, self._start = self._start, None
        return start is not None and lecture.restore(twin, start, credential=credential,
                                                     **{"who": "end of class", **who})

    # ---- the room -------------------------------------------------------------------------------

    def join(self, client: str, addr: str | None) -> bool:
        """Count `client` (from `addr`) in the class, so it may answer the questions asked from now on;
        True if it is new here. A browser already in the class keeps its place (a reload, following
        again); one new to the class, or joining from another address, counts against that address's
        JOINS_PER_MIN_ADDRESS. ControlError when over a budget."""
        _throttled(self._joins, "joining the class", client)
        with self._lock:
            m = self._members.get(client)
            if m is not None and m.addr == addr:
                return False
        _throttled(self._joins_addr, "browsers joining the class from this address", f"addr:{addr}")
        with self._lock:
            m = self._members.get(client)
            if m is not None:
                self._drop(client)
            else:
                self._joined += 1
            self._members[client] = Member(addr, m.joined if m is not None else self._joined)
            own = self._by_addr.setdefault(addr, OrderedDict())
            own[client] = None
            if len(own) > MEMBERS_PER_ADDRESS:
                self._drop(next(iter(own)))
            if len(self._members) > MAX_MEMBERS:
                self._drop(next(iter(max(self._by_addr.values(), key=len))))
            return m is None

    def may_answer(self, client: str, lesson, step) -> bool:
        """Whether `client` joined the class before the question of (lesson, step) opened."""
        with self._lock:
            t, m = self._tallies.get((lesson, step)), self._members.get(client)
            return t is not None and m is not None and m.joined <= t.opened

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
            m = self._members.get(client)
            if m is None:
                raise ControlError("this browser does not follow the class: press Follow the lecturer, "
                                   "then answer the next question")
            if m.joined > t.opened:
                raise ControlError("this browser joined the class after this question was asked: "
                                   "answer the next one")
            v = check_value(t.question, value)
            net = t.networks.setdefault(addr, len(t.networks) + 1)
            t.answers[client] = (v, net)    # the count is in public(); rev is for the lecturer's moves
            return v

    def public(self) -> dict:
        """What every viewer's status carries: the published state, its revision, the class's number
        (a step led again after Stop leading is a new question) and the count."""
        with self._lock:
            t = self._tallies.get((self.state["lesson"], self.state["step"]))
            return {**self.state, "rev": self.rev, "lecture": self.lecture, "n": len(t.answers) if t else 0,
                    "q": t is not None}

    def tally(self, lesson, step, *, lecturer: bool = False) -> dict | None:
        """The distribution of one step's answers (bars), and the measured answer once revealed: for
        the `lecturer` (whose authority the caller checked) at any time, for anyone else only once the
        step was revealed (None before, as for a step with no question)."""
        with self._lock:
            t = self._tallies.get((lesson, step))
            if t is None or not (lecturer or t.measured is not None):
                return None
            values, q, measured, source = [v for v, _n in t.answers.values()], t.question, t.measured, t.source
        if q.kind == "choice":
            bars = [(c, sum(v == i for v in values)) for i, c in enumerate(q.choices)]
        else:
            bars = histogram(values + ([measured] if measured is not None else []), values)
        return {"kind": q.kind, "n": len(values), "bars": bars, "measured": measured, "source": source,
                "unit": q.unit, "digits": q.digits}

    def csv(self) -> str:
        """Every kept answer, anonymous (the order they came in), with the network it came from (a
        number per step: 1 for the first address seen, 2 for the next; never the address, so a flood
        from one network stands out) and the measured answer per step."""
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow(["lesson", "step", "kind", "unit", "answer_no", "answer", "network", "measured", "measured_from"])
        with self._lock:
            rows = [(k, t.question, list(t.answers.values()), t.measured, t.source)
                    for k, t in (*self._earlier, *self._tallies.items())]
        for (lesson, n), q, answers, measured, source in rows:
            show = (lambda v: q.choices[int(v)]) if q.kind == "choice" else (lambda v: f"{v:.12g}")
            m = "" if measured is None else show(q.choice(measured)) if q.kind == "choice" else f"{measured:.6g}"
            for i, (v, net) in enumerate(answers, 1):
                w.writerow([lesson, n, q.kind, q.unit, i, show(v), net, m, source])
        return out.getvalue()

    def _tally(self, lesson: str, n: int) -> Tally | None:
        """The step's tally, created (and the oldest dropped past MAX_STEPS) if it asks a question.
        Called with the lock held."""
        t = self._tallies.get((lesson, n))
        if t is None:
            q = lessons.get(lesson).steps[n - 1].question
            if q is None:
                return None
            t = self._tallies[(lesson, n)] = Tally(q, self._joined, lecture=self.lecture)
            while len(self._tallies) > MAX_STEPS:
                self._tallies.popitem(last=False)
        return t


    def _drop(self, client: str) -> None:
        """Take `client` out of the class (its answers stay counted). Called with the lock held."""
        m = self._members.pop(client)
        own = self._by_addr[m.addr]
        del own[client]
        if not own:
            del self._by_addr[m.addr]


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
