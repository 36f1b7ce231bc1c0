"""Lessons: the data is well formed and covers issue 12's topics, every action passes the twin's own
validation, the written answers match what the pages show on a live twin after each step's action
(issue 23: `python -m twin.lessons check`) and what the commands print now, and the page callbacks
act through the control path and refuse bad payloads with a message."""
from __future__ import annotations

import time
from contextvars import copy_context
from pathlib import Path

import pytest
from dash import no_update
from dash._callback_context import context_value
from dash._utils import AttributeDict

from twin import lessons
from twin.live import session
from twin.cli import lesson_check as check
from twin.cli import lesson_measure as measure
from twin.lessons import __main__ as lessons_cli
from twin.lessons.screen import READERS

TOPICS = ("prefill-decode", "kv-cache", "expert-parallel", "pipelining", "faults", "supernode", "cloud")


def click(fn, prop_id: str, *args):
    def run():
        context_value.set(AttributeDict(triggered_inputs=[{"prop_id": prop_id, "value": 1}]))
        return fn(*args)
    return copy_context().run(run)


@pytest.fixture
def lessons_page(dash_app):
    import importlib
    return importlib.import_module("pages.lessons")


def test_seven_lessons_cover_the_topics_with_steps_and_measured_answers():
    ids = [les.id for les in lessons.lessons()]
    assert ids == list(TOPICS)
    for les in lessons.lessons():
        assert len(les.steps) >= 2, les.id
        for s in les.steps:
            assert all(m.command.startswith(lessons.COMMAND_PREFIXES) for m in s.measures)
            assert set(lessons._PLACEHOLDER.findall(s.answer)) == set(s.figures), les.id   # every figure shown
            assert s.screen.figures and {READERS[f.read.split("@")[0]].page for f in s.screen.figures} == {
                s.action.page}, les.id                           # what the answer cites is on the opened page
    faults = lessons.get("faults")
    demos = [s.action.value.get("faults") for s in faults.steps]
    assert demos == ["optical-flap", "decode-die-redundant", "decode-die-no-redundancy", "one-slow-die"]
    assert lessons.get("supernode").steps[0].action.page == "/validation"


@pytest.mark.slow
def test_check_quick_every_fast_step_shows_its_answer_on_its_page():
    """Issue 23: every step not marked slow, driven on a live twin through Twin.control, shows on its
    page the figures its answer states (about 15 s on one core)."""
    lines = []
    rows = check.check(quick=True, out=lines.append)
    fast = sum(not s.screen.slow for les in lessons.lessons() for s in les.steps)
    assert fast >= 11 and len({r.where for r in rows}) == fast
    assert [(r.where, r.figure.name, r.figure.value, r.shown) for r in rows if not r.ok] == []
    assert any("PASS" in x for x in lines) and not any("FAIL" in x for x in lines)


def test_check_fails_when_an_answer_figure_is_edited(monkeypatch, capsys):
    """Break one written figure: the check reports FAIL for it and exits 1 (the test above can fail)."""
    les = lessons.get("supernode")
    fig = les.steps[0].screen.figures[0]
    monkeypatch.setattr(check, "lessons", lambda: (les,))
    object.__setattr__(fig, "value", fig.value * 1.2)
    try:
        assert check.main(quick=True) == 1
    finally:
        object.__setattr__(fig, "value", fig.value / 1.2)
    out = capsys.readouterr().out
    assert f"{fig.name}" in out and "FAIL" in out and "1 FAIL" in out


def test_check_command_line(capsys):
    assert lessons_cli.main(["check", "--lesson", "supernode", "--quick"]) == 0
    assert "PASS, 0 FAIL" in capsys.readouterr().out
    assert lessons_cli.main(["check", "--lesson", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: lesson = 'nope': no such lesson; allowed prefill-decode") and err.count("\n") == 1


def test_every_action_passes_the_twins_validation_and_opens_a_page(dash_app, twin_registry, lessons_page):
    """Each action goes through Twin.control, as the control bar's do (engines are built, not run)."""
    import dash
    registered = {p["path"] for p in dash.page_registry.values()}
    tw = session.Twin("lesson-test", params={"scenario": "paper-decode"})
    for les in lessons.lessons():
        for i, s in enumerate(les.steps, 1):
            msg = tw.control(s.action.control, s.action.value, who="test")
            assert msg.startswith(s.action.control), f"{les.id} step {i}: {msg}"
            assert lessons_page.target_page(s.action) in registered, f"{les.id} step {i}"


def test_quick_measure_matches_the_written_figures():
    """The answers' numbers are what the commands print now (engine runs are seeded: exact)."""
    rows = measure.check(quick=True)
    assert len(rows) >= 30            # the rest are screen figures (check)
    off = [(w, f.name, f.value, v) for w, f, v in rows if measure.off(f, v) > 1e-6]
    assert off == []


def test_measure_reads_json_paths_and_filters():
    doc = {"a": [{"k": "x", "v": 1}, {"k": "y", "v": 2}], "b": {"c": [5, 6]}}
    assert measure.read_path(doc, "a[k=y].v") == 2 and measure.read_path(doc, "b.c.1") == 6
    with pytest.raises(lessons.LessonError, match="0 rows match"):
        measure.read_path(doc, "a[k=z].v")
    with pytest.raises(lessons.LessonError, match="not a command"):
        measure.run_command("rm -rf /")


def test_a_changed_result_is_reported(monkeypatch):
    """Break the figure: measure says which one differs (the check above can fail)."""
    les = lessons.get("pipelining")
    fig = les.steps[0].measures[0].figures[0]
    monkeypatch.setattr(lessons, "lessons", lambda: (les,))
    monkeypatch.setattr(measure, "lessons", lambda: (les,))
    object.__setattr__(fig, "value", fig.value * 1.1)
    try:
        assert measure.main(quick=True) == 1
    finally:
        object.__setattr__(fig, "value", fig.value / 1.1)


@pytest.mark.parametrize("text,match", [
    ('control = "explode"', "action.control = 'explode': allowed reset"),
    ('page = "failures"', "action.page = 'failures': allowed a path"),
    ('answer = "%(nothing)s"', "placeholder\\(s\\) nothing have no measured figure"),
    ('command = "rm -rf /"', "allowed a twin command"),
    ('read = "overview.tpot_p50_ms"', "read = 'overview.tpot_p50_ms' is on page /, not on the page the step opens"),
    ('read = "nope"', "read = 'nope': allowed one of cache.token_hit_ratio"),
    ('screen = { speed = 0, warmup_s = 1, tolerance = 0.1', "allowed 0 < speed <= 1000"),
    # issue 36: a warm-up of 0 s gave the timeline a hold the controls refuse, after the reset was applied
    ('screen = { speed = 20, warmup_s = 0, tolerance = 0.1', "0 < warmup_s <= 3600 \\(the timeline's hold\\)"),
    ('value = { seed = 3 }', "a reset needs a table with a scenario or a fault demo"),
])
def test_bad_lesson_files_name_the_file_and_field(tmp_path: Path, text, match):
    good = {"control": 'control = "reset"', "page": 'page = "/failures"', "answer": 'answer = "x %(a)s %(b)s"',
            "command": 'command = "python -m twin perf decode --json"', "read": 'read = "failures.lost"',
            "screen": 'screen = { speed = 20, warmup_s = 1, tolerance = 0.1', "value": 'value = { scenario = "default" }'}
    key = text.split(" =")[0]
    parts = {**good, key: text}
    body = f"""id = "t"\ntitle = "T"\nsummary = "S"\n[[step]]\ngoal = "g"\npredict = "p"\nnotice = "n"
{parts['answer']}
action = {{ {parts['control']}, {parts['value']}, {parts['page']} }}
{parts['screen']}, figures = {{ b = {{ {parts['read']}, value = 0 }} }} }}
[[step.measure]]
{parts['command']}
figures = {{ a = {{ path = "tpot_ms", value = 1 }} }}
"""
    p = tmp_path / "bad.toml"
    p.write_text(body)
    with pytest.raises(lessons.LessonError, match=match) as exc:
        lessons.load_file(p)
    assert str(exc.value).startswith("bad.toml")


@pytest.mark.parametrize("lesson,step,match", [
    ("nope", 1, "no such lesson; allowed prefill-decode"), ("faults", 0, "allowed 1 to 4"),
    ("faults", "5", "allowed 1 to 4"), ("faults", "1e3", "allowed 1 to 4"), ("faults", True, "allowed 1 to 4"),
    (None, 1, "no such lesson"), ({"x": 1}, 1, "no such lesson")])
def test_unknown_lesson_or_step(lesson, step, match):
    with pytest.raises(lessons.LessonError, match=match):
        lessons.step_index(lessons.get(lesson), step)


@pytest.mark.parametrize("kwargs,shown", [
    ({"lesson": "nope"}, "There is no lesson 'nope'"),
    ({"lesson": "faults", "step": "99"}, "has steps 1 to 4; there is no step '99'"),
    ({"lang": "klingon"}, "Language 'klingon' is not available (allowed: en, zh)"),
    ({"lesson": "<script>", "step": "-1"}, "There is no lesson '<script>'"),
])
def test_bad_urls_get_a_message_in_the_page(dash_app, lessons_page, kwargs, shown):
    from test_i18n import visible_texts
    with dash_app.server.test_request_context("/"):
        texts = " ".join(visible_texts(lessons_page.layout(**kwargs), []))
    assert shown in texts and "Lessons" in texts          # the index with the message above it


def act_id(index: str) -> str:
    return '{"index":"%s","type":"lesson-act"}.n_clicks' % index


def test_action_callback_resets_the_viewed_twin_narrates_and_opens_the_page(lessons_page, twin_registry):
    tw = twin_registry.shared()
    with __import__("app").server.test_request_context("/"):
        out = click(lessons_page.act, act_id("faults/2"), [1], {"faults": [1], "bogus": [1]}, "shared", None,
                    "vtest", None)
    msgs, classes, msg, cls, step, progress, href = out
    assert "msg-ok" in cls and "faults decode-die-redundant" in msg and msgs == [msg] and classes == [cls]
    assert step == {"lesson": "faults", "step": 2} and progress == {"faults": [1, 2]}
    assert href == "/failures"
    end = time.monotonic() + 15
    while tw.run < 1 and time.monotonic() < end:
        time.sleep(0.05)
    assert tw.snapshot.scenario == "peak-384" and tw.params.faults.endswith("decode-die-redundant.toml")
    assert tw.speed == lessons.get("faults").steps[1].screen.speed         # the pace the step's figures assume
    assert "lesson faults" in tw.actions(1)[0]["who"]


@pytest.mark.parametrize("index", ["x", "faults/9", "3/1", "faults/2; drop", "faults/1/2", "/"])
def test_action_callback_refuses_a_forged_step(lessons_page, twin_registry, index):
    with __import__("app").server.test_request_context("/"):
        out = click(lessons_page.act, act_id(index), [1], None, "shared", None, None, None)
    assert out[1] == ["ctl-msg msg-error"] and "not known" in out[0][0] and out[2:] == (no_update,) * 5
    assert twin_registry.shared().run == 0


def test_action_callback_ignores_a_page_load(lessons_page, twin_registry):
    with __import__("app").server.test_request_context("/"):
        assert click(lessons_page.act, act_id("faults/2"), [0], None, "shared", None, None, None) == (
            [no_update], [no_update]) + (no_update,) * 5


@pytest.mark.parametrize("lang,said", [("en", "locked by the instructor"), ("zh", "共享孪生已被讲师锁定")])
def test_action_on_a_locked_twin_says_why_in_the_viewers_language_and_still_opens_the_page(
        lessons_page, dash_app, lang, said):
    """Issue 23 bug 7: the refusal is wholly in the viewer's language and the student still gets
    the step's page, narrated, to watch (nothing is marked done)."""
    reg = session.configure(wall_dt=0.05, token="s3cret")
    try:
        reg.shared()
        with dash_app.server.test_request_context("/", headers={"Cookie": f"twin_lang={lang}"}):
            out = click(lessons_page.act, act_id("kv-cache/1"), [1], None, "shared", None, None, None)
        msgs, classes, msg, cls, step, progress, href = out
        assert cls == "ctl-msg msg-error" and said in msg and msgs == [msg]
        if lang == "zh":
            assert "locked" not in msg and "instructor" not in msg and "讲师" in msg
        assert step == {"lesson": "kv-cache", "step": 1} and href == "/cache" and progress is no_update
        assert reg.shared().run == 0                      # nothing was applied
    finally:
        reg.shutdown()


def test_progress_store_is_cleaned_and_shown(lessons_page, dash_app):
    assert lessons_page._progress({"faults": [1, 3, 3, 9, "x", True], "nope": [1], "kv-cache": "all"}) == {
        "faults": [1, 3]}
    assert lessons_page._progress("garbage") == {}
    ids = [{"type": "lesson-progress", "index": i} for i in ("faults", "kv-cache", "nope")] + ["bad"]
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        assert lessons_page.show_progress({"faults": [1, 2]}, ids) == ["已完成 2 / 4", "", "", ""]


def test_banner_narrates_the_step_and_reports_a_bad_lang(dash_app):
    from test_i18n import visible_texts
    from twin.ui import teach
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        text, cls = teach.narrate({"lesson": "faults", "step": 1}, "?lang=zh")
        assert cls == "teach-banner" and "故障与恢复" in " ".join(visible_texts(text, []))
        assert teach.narrate(None, "") == ([], "teach-banner teach-hidden")
        assert teach.narrate({"lesson": "faults", "step": 7}, None)[1] == "teach-banner teach-hidden"
        text, cls = teach.narrate(None, "?lang=de")
        assert cls == "teach-banner" and "不支持语言 'de'" in " ".join(visible_texts(text, []))


def test_the_next_step_button_names_the_step_as_its_row_does(lessons_page):
    les, n, plan = lessons_page._step_of({"type": "lesson-go", "index": "faults/4/next"}, plan=True)
    assert (les.id, n, plan) == ("faults", 4, None)
    les, n, plan = lessons_page._step_of({"type": "lesson-go", "index": "faults/4/why-supernode/next"}, plan=True)
    assert (les.id, n, plan) == ("faults", 4, "why-supernode")
    assert lessons_page._step_of({"type": "lesson-go", "index": "faults/4/later"}, plan=True) is None


def test_layouts_have_unique_ids_with_the_shell(dash_app, lessons_page):
    import importlib

    def ids(c, out):
        if isinstance(c, (list, tuple)):
            for x in c:
                ids(x, out)
        elif hasattr(c, "to_plotly_json"):
            i = getattr(c, "id", None)
            if i is not None:
                out.append(str(i))
            ids(getattr(c, "children", None), out)
        return out
    glossary = importlib.import_module("pages.glossary")
    with dash_app.server.test_request_context("/"):
        shell = ids(dash_app.serve_layout(), [])
        for layout in (lessons_page.layout(), *(lessons_page.layout(lesson="faults", step=str(n)) for n in (1, 3, 4)),
                       glossary.layout()):
            all_ids = shell + ids(layout, [])
            assert len(all_ids) == len(set(all_ids))


def test_glossary_term_on_hover_in_the_viewers_language(dash_app):
    from twin.ui import teach
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        abbr = teach.term("ttft")
    assert abbr.title.startswith("用户等到回答的第一个词元") and abbr.children.href == "/glossary#gl-ttft"
    assert abbr.children.children == "TTFT"
    with pytest.raises(KeyError, match="allowed supernode"):
        teach.term("nope")
