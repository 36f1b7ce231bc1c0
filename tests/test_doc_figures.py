"""The lesson and class docs read their figures from the lesson files (docs/hooks/lesson_figures.py, run
at `make docs`): issue 36 found them quoting 2.39x against the lessons' 2.37x, "103 -> 247 µs" against
101.7 -> 241.4, 1.185 against 1.159 and 1,840 against 1,804.2."""
import importlib.util
import re
from pathlib import Path

import pytest

from twin import lessons

ROOT = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
UNQUOTED = re.compile(r"\{\{.*?\}\}|`[^`]*`")      # tokens (the data) and code spans (commands)
LESSON_FILES = {les.id: p for p in (ROOT / "twin/lessons/data").glob("*.toml")
                for les in lessons.lessons() if f'id = "{les.id}"' in p.read_text()}


@pytest.fixture(scope="module")
def hook():
    spec = importlib.util.spec_from_file_location("lesson_figures", ROOT / "docs/hooks/lesson_figures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def hand_typed(text: str, allowed: str) -> list[str]:
    """Numbers typed in `text` (outside tokens and code) that `allowed` (a lesson file: the inputs its
    steps state and the figures it writes) does not hold."""
    have = {n.replace(",", "") for n in NUMBER.findall(allowed)}
    return [n for n in NUMBER.findall(UNQUOTED.sub(" ", text)) if n.replace(",", "").rstrip(".") not in have]


def lesson_rows(page: str) -> dict[str, str]:
    """The lessons table of teach.md: lesson id -> its measured-answer cell."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `([\w-]+)` \| [^|]*\| (.*) \|$", page, re.M)}


def test_the_docs_quote_the_lessons_figures(hook):
    """The class plan and the lessons table, rendered: the H800 all-to-all answer is the lesson's 2.37x,
    each step's Chinese is the catalog's, and no token is left."""
    cls = hook.render((ROOT / "docs/class.md").read_text())
    teach = hook.render((ROOT / "docs/how-to/teach.md").read_text())
    assert "{{" not in cls + teach
    step = lessons.get("expert-parallel").steps[1]
    assert f"{step.question.value({k: f.value for k, f in step.figures.items()}):.2f}" == "2.37"
    assert "### 6. Expert parallelism and the all-to-all, step 2 (5 min, at 28–33)" in cls
    assert "- **Answer (the lesson's checked figure):** 2.37 ×" in cls
    assert "8 steps, 45 minutes" in cls
    assert "H800 NVLink + RDMA (DeepEP low-latency) 102 → 241 µs (2.37×)" in teach
    assert "per kW 1,327 vs 1,807 (behind)" in teach


def test_no_figure_in_the_lessons_table_or_the_plan_is_hand_typed():
    """Every number of the lessons table is a token or an input its lesson file states (240 sim s, EP320,
    48 tokens per rank); the class plan's steps are one token."""
    rows = lesson_rows((ROOT / "docs/how-to/teach.md").read_text())
    assert set(LESSON_FILES) - {"cloud"} <= set(rows)
    for les_id, cell in rows.items():
        assert hand_typed(cell, LESSON_FILES[les_id].read_text()) == [], les_id
    cls = (ROOT / "docs/class.md").read_text()
    plan = cls[cls.index("{{ plan why-supernode }}") - 200:cls.index("## The plan check")]
    assert hand_typed(plan.partition("\n\n")[2], "") == []


def test_the_check_finds_the_stale_figures_issue_36_found():
    """The row as it was: 101.7 -> 241.4 µs (2.37x) typed as 103 -> 247 µs (2.39x)."""
    ep = LESSON_FILES["expert-parallel"].read_text()
    old = "UB 143 → 183 µs (1.28×), H800 NVLink + RDMA (DeepEP low-latency) 103 → 247 µs (2.39×)"
    assert hand_typed(old, ep) == ["143", "183", "103", "247", "2.39"]
    assert hand_typed("UB 143.1 → 182.8 µs, H800 101.7 → 241.4 µs (2.37×) at 48 tokens per rank, EP320", ep) == []
    sn = LESSON_FILES["supernode"].read_text()
    assert hand_typed("1.285 vs 1.185 (H800); per kW 1,327 vs 1,840", sn) == ["1.185", "1,327", "1,840"]


def test_a_token_naming_nothing_stops_the_build_saying_what_is_allowed(hook):
    with pytest.raises(hook.FigureError, match=r"expert-parallel\.2\.a2a_now.*allowed figures nvlink_now"):
        hook.render("{{ fig expert-parallel.2.a2a_now }}")
    with pytest.raises(hook.FigureError, match="lesson expert-parallel has steps 1..2"):
        hook.render("{{ answer expert-parallel.3 }}")
    with pytest.raises(hook.FigureError, match="no plan 'nope'.*why-supernode"):
        hook.render("{{ plan nope }}")


def test_the_tutorial_names_demos_as_the_failures_page_labels_them(hook):
    """Issue 36 (16): the tutorial said `decode-die-redundant` where the page's demo list says "Decode die
    lost, redundant experts"; in its prose a demo is named by its label (a command keeps the file name)."""
    from twin.ui.faultview import DEMO_TITLES
    text = hook.render((ROOT / "docs/tutorial/first-run.md").read_text())
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    assert not set(re.findall(r"`([a-z0-9-]+)`", prose)) & set(DEMO_TITLES)
    step = text[text.index("## 3. Break something"):]
    for demo in ("decode-die-redundant", "decode-die-no-redundancy"):
        assert f"**{' '.join(DEMO_TITLES[demo].split())}**" in " ".join(step.split())
    assert "27,197 requests go back through prefill" in text


def test_the_serving_page_starts_with_an_openai_client(hook):
    """Issue 36 (16): the serving page opened on a 4,341-word dated log; it starts with the server, an
    openai snippet and curl, and the dated measurements are a page of the performance log."""
    serve = (ROOT / "docs/serve.md").read_text()
    first = serve.index("## ")
    assert serve[first:].startswith("## Point an OpenAI client here")
    quick = serve[first:serve.index("## ", first + 3)]
    assert "python -m twin serve --port 8060" in quick and 'OpenAI(base_url="http://localhost:8060/v1"' in quick
    assert "curl -s localhost:8060/v1/chat/completions" in quick
    assert "Measured from outside" not in serve.replace("[serving performance log]", "")
    assert "performance/serving.md" in (ROOT / "mkdocs.yml").read_text()
    assert (ROOT / "docs/performance/serving.md").read_text().count("## Measured from outside") == 2
