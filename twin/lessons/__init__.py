"""Guided lessons over the live twin, as data (`data/*.toml`), in English with Chinese in the catalogs.

A lesson is a sequence of steps; each step has a goal, a question for the class to predict, ONE
action on the twin (a control the run-control bar also sends: reset to a scenario or a fault demo,
load, speed, policy, fault) and the page to open, what to notice, and the measured answer. The
answer's numbers are either figures the step's page shows on a live twin after the action (`screen`:
the speed the step sets, the simulated seconds to wait, a tolerance, and which number of the page
each figure is, see screen.py) or figures read from the JSON a named command printed (`measures`,
for what the paper's setting gives). The text holds only `%(name)s` placeholders, so re-measuring
never touches a translation. `python -m twin.lessons check` drives every step on a live twin and
compares its page with the answer (twin/cli/lesson_check.py); `python -m twin.lessons measure` re-runs
the commands (twin/cli/lesson_measure.py).

A step may declare a `[step.question]` (a number with a unit, or choices) that one of its figures
answers: the class predicts it on their own screens before the reveal (twin.live.classroom). Class plans
(`data/plans/*.toml`) string lesson steps into a timed session with what the lecturer says.

Text fields are English msgids; `twin.i18n` translates them. Nothing here imports dash.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
CONTROLS = ("reset", "load", "speed", "policy", "fault")    # the control bar's commands a step may send
TEXT_FIELDS = ("goal", "predict", "notice", "answer")
COMMAND_PREFIXES = ("python -m twin ", "python -m twin.lessons ")
_ID = re.compile(r"^[a-z0-9-]{1,40}$")
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
WARMUP_MAX_S = 3600.0         # the longest warm-up: the hold the timeline sends allows 0 < s <= this (twin.live.controls)
# A step's reset names its whole run: the scenario's own deployment, workload and load, seed 0 (what
# the figures were measured on), so no choice of an earlier step or viewer is carried into it (issue 36).
RESET_OWN = {"deployment": "", "trace": "", "seed": 0, "load": ""}


class LessonError(ValueError):
    """A lesson file that breaks the format (message names the file and field), or an unknown lesson
    id / step number asked for by a viewer (message says what is allowed)."""


@dataclass(frozen=True)
class Figure:
    """One number of an answer: `path` into the command's JSON, the value it printed, how to show it."""
    name: str
    path: str
    value: float
    digits: int = 0
    percent: bool = False


@dataclass(frozen=True)
class Measure:
    command: str
    figures: tuple[Figure, ...]
    slow: bool = False            # a full engine run (seconds to minutes): skipped by the quick check


@dataclass(frozen=True)
class ScreenFigure:
    """One number the step's page shows after its action: `read` names it (screen.READERS)."""
    name: str
    read: str
    value: float
    digits: int = 0
    percent: bool = False


@dataclass(frozen=True)
class Screen:
    """What the page must show once the twin has run `warmup_s` simulated seconds after the action,
    each figure within `tolerance` (relative) of its written value; `speed` is set with the action."""
    speed: float
    warmup_s: float
    tolerance: float
    figures: tuple[ScreenFigure, ...]
    slow: bool = False            # more than a few seconds to drive: skipped by `check --quick`


@dataclass(frozen=True)
class Action:
    control: str
    value: object
    page: str
    fallback: str | None = None   # page to open when `page` is not registered (e.g. /explorer)


@dataclass(frozen=True)
class Question:
    """What the class predicts before the reveal (`[step.question]`): a number in `unit` between `lo`
    and `hi`, or one of `choices`; `figure` names the step's figure that answers it (or `a/b`, the
    ratio of two), times `scale` (100 shows a fraction as %). A choice is picked by the figure: the
    first choice below `edges[0]`, the next below `edges[1]`, ... `ask` says in a line what to enter."""
    kind: str                     # "number" | "choice"
    ask: str
    figure: str
    unit: str = ""
    lo: float = 0.0
    hi: float = 0.0
    digits: int = 1
    scale: float = 1.0
    choices: tuple[str, ...] = ()
    edges: tuple[float, ...] = ()

    def value(self, figures: dict[str, float]) -> float:
        """The answer from the step's figures by name (KeyError if one is missing)."""
        a, _, b = self.figure.partition("/")
        return (figures[a] / figures[b] if b else figures[a]) * self.scale

    def choice(self, value: float) -> int:
        """The index of the choice the figure's value picks."""
        return sum(value >= e for e in self.edges)


@dataclass(frozen=True)
class Step:
    goal: str
    predict: str
    action: Action
    notice: str
    answer: str
    measures: tuple[Measure, ...]
    screen: Screen
    question: Question | None = None

    @property
    def figures(self) -> dict[str, Figure | ScreenFigure]:
        """Every figure of the answer by name: the page's, then the commands'."""
        return {f.name: f for f in (*self.screen.figures, *(f for m in self.measures for f in m.figures))}


@dataclass(frozen=True)
class Lesson:
    id: str
    order: int
    title: str
    summary: str
    steps: tuple[Step, ...]


def _need(d: dict, key: str, kind, where: str):
    v = d.get(key)
    if not isinstance(v, kind) or (isinstance(v, str) and not v.strip()):
        raise LessonError(f"{where}: field {key!r} missing or not {getattr(kind, '__name__', kind)}")
    return v


def _figure(name: str, spec, where: str) -> Figure:
    if not isinstance(spec, dict):
        raise LessonError(f"{where}.{name}: allowed a table {{path, value, digits?, percent?}}")
    value = _need(spec, "value", (int, float), f"{where}.{name}")
    return Figure(name, _need(spec, "path", str, f"{where}.{name}"), float(value),
                  int(spec.get("digits", 0)), bool(spec.get("percent", False)))


def _screen(d: dict, action: Action, where: str) -> Screen:
    """The step's `[step.screen]`: every figure read from the page the step opens (or its fallback)."""
    from twin.lessons.screen import reader
    sc = _need(d, "screen", dict, where)
    w = f"{where}.screen"
    speed, warm, tol = (_need(sc, k, (int, float), w) for k in ("speed", "warmup_s", "tolerance"))
    if not (0 < speed <= 1000 and 0 < warm <= WARMUP_MAX_S and 0 < tol < 1):
        raise LessonError(f"{w}: allowed 0 < speed <= 1000, 0 < warmup_s <= {WARMUP_MAX_S:g} (the timeline's hold), "
                          "0 < tolerance < 1")
    figs = []
    for name, spec in _need(sc, "figures", dict, w).items():
        read = _need(spec, "read", str, f"{w}.figures.{name}") if isinstance(spec, dict) else None
        try:
            page = reader(read)[0].page if read else None
        except KeyError as exc:
            raise LessonError(f"{w}.figures.{name}: {exc.args[0]}") from None
        if page not in (action.page, action.fallback):
            raise LessonError(f"{w}.figures.{name}: read = {read!r} is on page {page}, not on the page the step "
                              f"opens ({action.page}); allowed a reader of that page")
        f = _figure(name, {**spec, "path": read}, f"{w}.figures")
        figs.append(ScreenFigure(name, read, f.value, f.digits, f.percent))
    return Screen(float(speed), float(warm), float(tol), tuple(figs), bool(sc.get("slow", False)))


QUESTION_KINDS = ("number", "choice")


def _question(d: dict, step: Step, where: str) -> Question | None:
    """The step's `[step.question]`, checked against the step's own figures."""
    q = d.get("question")
    if q is None:
        return None
    w = f"{where}.question"
    if not isinstance(q, dict):
        raise LessonError(f"{w}: allowed a table {{kind, ask, figure, unit?, lo?, hi?, choices?, edges?}}")
    kind = _need(q, "kind", str, w)
    if kind not in QUESTION_KINDS:
        raise LessonError(f"{w}.kind = {kind!r}: allowed {', '.join(QUESTION_KINDS)}")
    figure = _need(q, "figure", str, w)
    unknown = [n for n in figure.split("/") if n not in step.figures]
    if unknown or figure.count("/") > 1:
        raise LessonError(f"{w}.figure = {figure!r}: allowed a figure of the step or a/b of two "
                          f"({', '.join(step.figures)})")
    num = lambda k, default: float(_need(q, k, (int, float), w)) if k in q else default
    out = Question(kind, _need(q, "ask", str, w), figure, str(q.get("unit", "")), num("lo", 0.0), num("hi", 0.0),
                   int(q.get("digits", 1)), num("scale", 1.0), tuple(q.get("choices", ())),
                   tuple(float(e) for e in q.get("edges", ())))
    if kind == "number" and not out.lo < out.hi:
        raise LessonError(f"{w}: a number question needs lo < hi (the answers accepted)")
    if kind == "choice" and (len(out.choices) < 2 or len(out.edges) != len(out.choices) - 1
                             or not all(isinstance(c, str) and c for c in out.choices)):
        raise LessonError(f"{w}: a choice question needs 2 or more choices (text) and one edge fewer")
    return out


def _step(d: dict, where: str) -> Step:
    a = _need(d, "action", dict, where)
    control = _need(a, "control", str, f"{where}.action")
    if control not in CONTROLS:
        raise LessonError(f"{where}.action.control = {control!r}: allowed {', '.join(CONTROLS)}")
    page = _need(a, "page", str, f"{where}.action")
    if not page.startswith("/"):
        raise LessonError(f"{where}.action.page = {page!r}: allowed a path starting with /")
    measures = []
    for i, m in enumerate(d.get("measure", []), 1):
        w = f"{where}.measure[{i}]"
        cmd = _need(m, "command", str, w)
        if not cmd.startswith(COMMAND_PREFIXES):
            raise LessonError(f"{w}.command = {cmd!r}: allowed a twin command ({' | '.join(COMMAND_PREFIXES)})")
        figs = tuple(_figure(n, s, f"{w}.figures") for n, s in _need(m, "figures", dict, w).items())
        measures.append(Measure(cmd, figs, bool(m.get("slow", False))))
    value = a.get("value")
    if control == "reset":
        if not isinstance(value, dict) or not (value.get("scenario") or value.get("faults")):
            raise LessonError(f"{where}.action.value: a reset needs a table with a scenario or a fault demo (faults)")
        if not value.get("faults"):           # a demo brings its own scenario, deployment and seed
            value = {**RESET_OWN, **value}
    action = Action(control, value, page, a.get("fallback"))
    screen = _screen(d, action, where)
    twice = {f.name for f in screen.figures} & {f.name for m in measures for f in m.figures}
    if twice:
        raise LessonError(f"{where}: figure(s) {', '.join(sorted(twice))} both on screen and measured; allowed one")
    step = Step(*(_need(d, f, str, where) for f in ("goal", "predict")), action,
                *(_need(d, f, str, where) for f in ("notice", "answer")), tuple(measures), screen)
    missing = set(_PLACEHOLDER.findall(step.answer)) - set(step.figures)
    if missing:
        raise LessonError(f"{where}.answer: placeholder(s) {', '.join(sorted(missing))} have no measured figure")
    if not step.screen.figures:
        raise LessonError(f"{where}.screen: no figures; allowed at least one number the page shows")
    question = _question(d, step, where)
    return replace(step, question=question) if question else step


def load_file(path: Path) -> Lesson:
    with path.open("rb") as fh:
        d = tomllib.load(fh)
    where = path.name
    lid = _need(d, "id", str, where)
    if not _ID.match(lid):
        raise LessonError(f"{where}: id = {lid!r}: allowed lower-case letters, digits and -")
    steps = tuple(_step(s, f"{where} step {i}") for i, s in enumerate(_need(d, "step", list, where), 1))
    return Lesson(lid, int(d.get("order", 99)), _need(d, "title", str, where), _need(d, "summary", str, where),
                  steps)


@lru_cache(maxsize=1)
def lessons() -> tuple[Lesson, ...]:
    """Every lesson, in teaching order."""
    out = sorted((load_file(p) for p in DATA_DIR.glob("*.toml") if p.name != "glossary.toml"),
                 key=lambda les: (les.order, les.id))
    ids = [les.id for les in out]
    if len(set(ids)) != len(ids):
        raise LessonError(f"lesson ids repeat: {ids}")
    return tuple(out)


def get(lesson_id) -> Lesson:
    """The lesson with this id, else LessonError listing the ids."""
    for les in lessons():
        if les.id == lesson_id:
            return les
    shown = str(lesson_id)[:40]
    raise LessonError(f"lesson = {shown!r}: no such lesson; allowed {', '.join(x.id for x in lessons())}")


def step_index(lesson: Lesson, step) -> int:
    """A 1-based step number from a URL or store (int or digits), else LessonError with the range."""
    n = step if isinstance(step, int) and not isinstance(step, bool) else (
        int(step) if isinstance(step, str) and step.strip().isdigit() and len(step) < 6 else None)
    if n is None or not 1 <= n <= len(lesson.steps):
        raise LessonError(f"step = {str(step)[:12]!r}: allowed 1 to {len(lesson.steps)} for lesson {lesson.id}")
    return n


@dataclass(frozen=True)
class Term:
    key: str
    term: str               # the term as written in both languages (acronyms) or an English msgid
    text: str               # 1-3 plain sentences (English msgid)
    ref: str                # where a number in the text comes from (a reference row), or ""


@lru_cache(maxsize=1)
def glossary() -> tuple[Term, ...]:
    with (DATA_DIR / "glossary.toml").open("rb") as fh:
        d = tomllib.load(fh)
    out = []
    for key, t in d.items():
        where = f"glossary.toml [{key}]"
        out.append(Term(key, _need(t, "term", str, where), _need(t, "text", str, where), t.get("ref", "")))
    return tuple(out)


def messages() -> list[tuple[str, str]]:
    """Every translatable text of the lessons and the glossary, with where it comes from
    (handed to the catalogs by twin.cli.texts)."""
    out = []
    for les in lessons():
        out += [(les.title, f"lesson {les.id}: title"), (les.summary, f"lesson {les.id}: summary")]
        for i, s in enumerate(les.steps, 1):
            out += [(getattr(s, f), f"lesson {les.id}: step {i} {f}") for f in TEXT_FIELDS]
            if s.question:
                q = s.question
                out += [(t, f"lesson {les.id}: step {i} question") for t in (q.ask, q.unit, *q.choices) if t]
    for p in plans():
        out += [(p.title, f"plan {p.id}: title"), (p.summary, f"plan {p.id}: summary")]
        out += [(it.say, f"plan {p.id}: item {i} say") for i, it in enumerate(p.items, 1)]
    for t in glossary():
        out += [(t.term, f"glossary {t.key}: term"), (t.text, f"glossary {t.key}: text")]
    return out


# ---- class plans ------------------------------------------------------------------------------

PLAN_DIR = DATA_DIR / "plans"


@dataclass(frozen=True)
class PlanItem:
    lesson: str
    step: int
    minutes: float
    say: str                # what the lecturer says at this step (English msgid)


@dataclass(frozen=True)
class Plan:
    """A class session built from lesson steps, each with its planned minutes and what to say."""
    id: str
    title: str
    summary: str
    items: tuple[PlanItem, ...]

    @property
    def minutes(self) -> float:
        return sum(it.minutes for it in self.items)


def _plan(path: Path) -> Plan:
    with path.open("rb") as fh:
        d = tomllib.load(fh)
    where = f"plans/{path.name}"
    pid = _need(d, "id", str, where)
    items = []
    for i, it in enumerate(_need(d, "item", list, where), 1):
        w = f"{where} item {i}"
        les = get(_need(it, "lesson", str, w))
        minutes = _need(it, "minutes", (int, float), w)
        if not 0 < minutes <= 60:
            raise LessonError(f"{w}.minutes = {minutes!r}: allowed 0 < minutes <= 60")
        items.append(PlanItem(les.id, step_index(les, it.get("step")), float(minutes), _need(it, "say", str, w)))
    return Plan(pid, _need(d, "title", str, where), _need(d, "summary", str, where), tuple(items))


@lru_cache(maxsize=1)
def plans() -> tuple[Plan, ...]:
    """Every class plan (data/plans/*.toml), by id."""
    return tuple(sorted((_plan(p) for p in PLAN_DIR.glob("*.toml")), key=lambda p: p.id))


def plan(plan_id) -> Plan:
    for p in plans():
        if p.id == plan_id:
            return p
    raise LessonError(f"plan = {str(plan_id)[:40]!r}: no such plan; allowed {', '.join(p.id for p in plans())}")
