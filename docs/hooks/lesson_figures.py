"""Lesson figures in the docs, written at build time from the lesson files (`twin/lessons/data`), so a
page cannot quote a figure the lessons no longer produce (issue 36: the docs said 2.39x where the
lesson said 2.37x). MkDocs hook (`mkdocs.yml` `hooks:`); `render()` is also what the test reads.

Tokens a page writes, replaced before Markdown is rendered:

- `{{ fig LESSON.STEP.NAME }}`: a step's figure as the lesson page shows it (its digits, or %);
- `{{ answer LESSON.STEP }}`: the answer to the step's question (a number with its unit, or the choice);
- `{{ plan PLAN }}`: a class plan, step by step (what to say in both languages, the question, what the
  twin does, the answer); `{{ plan-size PLAN }}`: "8 steps, 45 minutes".

A token naming nothing the lessons have stops the build with the token and what is allowed."""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOKEN = re.compile(r"\{\{\s*(fig|answer|plan|plan-size)\s+([\w.-]+)\s*\}\}")


class FigureError(ValueError):
    """A docs token that names no lesson, step, figure or plan."""


def _lessons():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from twin import lessons
    return lessons


def _step(ref: str, token: str):
    lessons = _lessons()
    les_id, _, n = ref.partition(".")
    try:
        les = lessons.get(les_id)
    except Exception:
        raise FigureError(f"{token}: no lesson {les_id!r} (allowed: {', '.join(l.id for l in lessons.lessons())})") from None
    if not n.isdigit() or not 1 <= int(n) <= len(les.steps):
        raise FigureError(f"{token}: lesson {les.id} has steps 1..{len(les.steps)}")
    return les, les.steps[int(n) - 1]


def figure(ref: str, token: str = "") -> str:
    """`LESSON.STEP.NAME` formatted as the lesson page formats it in English (pages/lessons.answer_text)."""
    from twin import i18n
    step_ref, _, name = ref.rpartition(".")
    _les, step = _step(step_ref, token or ref)
    f = step.figures.get(name)
    if f is None:
        raise FigureError(f"{token or ref}: allowed figures {', '.join(step.figures)}")
    return i18n.percent(f.value, "en", 1) if f.percent else i18n.number(f.value, "en", f.digits)


def answer(ref: str, token: str = "") -> str:
    """The measured answer to `LESSON.STEP`'s question, as the class bar reveals it (twin/ui/classbar._fmt)."""
    from twin import i18n
    _les, step = _step(ref, token or ref)
    q = step.question
    if q is None:
        raise FigureError(f"{token or ref}: this step has no question")
    v = q.value({k: f.value for k, f in step.figures.items()})
    return q.choices[q.choice(v)] if q.kind == "choice" else f"{i18n.number(v, 'en', q.digits)} {q.unit}".strip()


def _wall(sim: float, speed: float) -> str:
    wall = sim / speed
    if wall < 1:
        return "under a second of wall time"
    return f"{wall:g} s of wall time if the twin keeps {speed:g}×"


def _plan(plan_id: str, token: str):
    lessons = _lessons()
    try:
        return lessons.plan(plan_id)
    except Exception:
        raise FigureError(f"{token}: no plan {plan_id!r} (allowed: {', '.join(p.id for p in lessons.plans())})") from None


def plan_size(plan_id: str, token: str = "") -> str:
    p = _plan(plan_id, token or plan_id)
    return f"{len(p.items)} steps, {p.minutes:g} minutes"


def plan(plan_id: str, token: str = "") -> str:
    """Each step of a class plan as Markdown: say (English, then the Chinese the app shows), ask, twin, answer."""
    from twin import i18n
    zh = i18n.gettext("zh")
    p, lessons = _plan(plan_id, token or plan_id), _lessons()
    out, start = [], 0.0
    for i, it in enumerate(p.items, 1):
        les = lessons.get(it.lesson)
        step = les.steps[it.step - 1]
        q, sc = step.question, step.screen
        ask = (f"number, {q.unit}" if q.kind == "number" else "choice: " + " / ".join(q.choices)) if q else ""
        out += [f"### {i}. {les.title}, step {it.step} ({it.minutes:g} min, at {start:g}–{start + it.minutes:g})", "",
                f"- **Say:** {it.say}", f"- **说：** {zh(it.say)}"]
        if q:
            out.append(f"- **Ask** ({ask}): {q.ask}")
        out.append(f"- **Twin:** {sc.warmup_s:g} simulated s at {sc.speed:g}× ({_wall(sc.warmup_s, sc.speed)}), "
                   f"then it pauses; opens `{step.action.page}`")
        if q:
            out.append("- **Answer (the lesson's checked figure):** " + answer(f"{les.id}.{it.step}"))
        out.append("")
        start += it.minutes
    return "\n".join(out).rstrip() + "\n"


RENDER = {"fig": figure, "answer": answer, "plan": plan, "plan-size": plan_size}


def render(markdown: str) -> str:
    """The page with every token replaced by the lesson data."""
    return TOKEN.sub(lambda m: RENDER[m.group(1)](m.group(2), m.group(0)), markdown)


def on_page_markdown(markdown, page, config, files):
    """MkDocs hook: the figures of every page from the lesson files."""
    return render(markdown) if "{{" in markdown else markdown
