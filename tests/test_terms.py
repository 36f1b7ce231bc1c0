"""One term per concept: the termbase covers the concepts the room reads, the catalogs, lessons and
glossary use one rendering of each, an injected variant is caught with its file:line, and units on
Chinese screens follow the termbase's rule (Chinese words for time and token rates)."""
from __future__ import annotations

import re
import shutil

import pytest
from babel.messages.catalog import Catalog

from twin import i18n
from twin.cli.texts import template
from twin.i18n import LangError, terms
from twin.i18n.__main__ import main

ZH_PO = i18n.po_path("zh")
CONCEPTS = {"ttft", "tpot", "throughput", "goodput", "token", "tokens-per-s", "ms", "s", "all-to-all",
            "expert-parallelism", "prefill", "decode", "supernode", "npu", "die", "ems", "cache-hit", "kv-cache",
            "microbatch", "mtp", "slo", "optical-link", "ub-switch", "switch-levels", "planes"}


def test_the_termbase_covers_the_concepts_and_passes_its_own_check():
    table = terms.terms()
    assert CONCEPTS <= set(table)
    assert table["ttft"].zh == "首个词元时间" and table["tpot"].zh == "每个输出词元的时间"
    assert table["all-to-all"].zh == "全交换"
    for t in table.values():          # a term never trips its own (or another's) forbidden variants
        assert terms.find(t.zh, "zh", t.id) == [] and terms.find(t.en, "en", t.id) == [], t.id


def test_catalogs_lessons_and_glossary_use_one_term_per_concept(capsys):
    assert [str(h) for h in terms.problems(template())] == []
    assert main(["terms"]) == 0
    assert capsys.readouterr().out.strip() == "one term per concept"


def _line_of(path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if text in line)


def test_an_injected_chinese_variant_fails_the_check_naming_file_line_and_term(tmp_path, monkeypatch, capsys):
    po = tmp_path / "messages.po"
    shutil.copy(ZH_PO, po)
    text = po.read_text(encoding="utf-8")
    good = 'msgstr "首个词元时间（TTFT）p50 / p99"'
    assert text.count(good) == 1
    po.write_text(text.replace(good, 'msgstr "首字延迟（TTFT）p50 / p99"'), encoding="utf-8")
    line = _line_of(po, "首字延迟")
    monkeypatch.setattr(terms, "po_path", lambda lang: po)
    assert main(["check"]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [f"{po}:{line}: zh '首字延迟' -> use '首个词元时间' (ttft)"]


def test_a_variant_wrapped_over_two_lines_of_a_po_file_is_found_on_its_first_line(tmp_path):
    po = tmp_path / "messages.po"
    po.write_text('msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8\\n"\n\n'
                  'msgid "all-to-all share"\nmsgstr ""\n"专家全对"\n"全占比 ms"\n', encoding="utf-8")
    hits = terms.scan_po(po, "zh")
    assert [(h.where.rsplit(":", 1)[1], h.variant, h.term.id) for h in hits] == [("6", "全对全", "all-to-all"),
                                                                                ("7", "ms", "ms")]


def test_english_variants_in_lessons_and_msgids_are_named_by_line(tmp_path):
    (tmp_path / "9-x.toml").write_text(
        'title = "Time to first token"\n'                                  # allowed: the spelled-out name
        'answer = "the time-to-first-token rose by %(ms)s ms"\n'           # variant; %(ms)s is no unit
        'command = "python -m twin.lessons probe alltoall"\n', encoding="utf-8")   # a command, not text
    hits = terms.scan_lessons(tmp_path)
    assert [str(h) for h in hits] == [
        f"{tmp_path / '9-x.toml'}:2: en 'time-to-first-token' -> use 'TTFT' (ttft)"]
    cat = Catalog()
    cat.add("Micro-batch pipelines", locations=[("pages/x.py", 12)])
    cat.add("Run `alltoall` for the all-to-all", locations=[("pages/x.py", 13)])   # code spans are identifiers
    assert [str(h) for h in terms.scan_msgids(cat)] == ["pages/x.py:12: en 'Micro-batch' -> use 'microbatch' (microbatch)"]


@pytest.mark.parametrize("text,found", [
    ("%(ttft_ms)s 毫秒", []),                                  # placeholders are not text
    ("TPOT 为 49.4 ms", ["ms"]),
    ("每秒 1,943 tok/s", ["tok/s"]),
    ("等待 3 s 后", ["s"]),
    ("带宽 392 GB/s", []),                                      # sizes and bandwidths keep their symbols
    ("讲师令牌错误", []), ("输入 token 数", ["token"]),           # 讲师令牌: the instructor's key
    ("双微批流水线", ["微批"]), ("双微批次流水线", []),
    ("L2 交换机丢失", ["L2 交换机"]), ("RDMA 交换机丢失", []),
])
def test_chinese_variants_and_the_unit_rule(text, found):
    assert [h.variant for h in terms.find(text, "zh", "x")] == found


def test_unit_gives_each_language_its_rendering_and_names_what_is_allowed():
    assert [terms.unit(u, "zh") for u in ("tok/s", "ms", "s", "µs", "GB/s", "%", "")] == \
        ["词元/秒", "毫秒", "秒", "微秒", "GB/s", "%", ""]
    assert [terms.unit(u, "en") for u in ("tok/s", "ms", "s")] == ["tok/s", "ms", "s"]
    with pytest.raises(terms.TermError, match=r"unit 'furlong' is not in terms.toml; allowed .*ms.*tok/s"):
        terms.unit("furlong", "zh")
    with pytest.raises(LangError, match="allowed en or zh"):
        terms.unit("ms", "xx")


@pytest.mark.parametrize("data,message", [
    ({"term": {"x": {"en": "X"}}}, r"term\.x: field 'zh' missing or empty"),
    ({"term": {"x": {"en": "X", "zh": "叉", "zh_forbidden": ["(叉"]}}}, r"term\.x: zh_forbidden '\(叉' is not a regular"),
    ({"term": {"x": {"en": "X", "zh": "叉", "colour": "red"}}}, r"term\.x: unknown field\(s\) colour; allowed"),
    ({}, r"no \[term\.<id>\] tables"),
])
def test_a_broken_termbase_entry_is_named(data, message):
    with pytest.raises(terms.TermError, match=message):
        terms.parse(data)


def test_overview_in_chinese_shows_units_in_chinese_words(dash_app):
    from pages import overview
    from twin.ui import figures
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=zh"}):
        tree = overview.layout(lang="zh")
        axes = [figures.strip_figure(spec, {})["layout"]["yaxis"]["title"]["text"] for spec in overview.CHARTS.values()]
    units = []

    def walk(c):
        if isinstance(c, (list, tuple)):
            for x in c:
                walk(x)
        elif hasattr(c, "children"):
            if "kpi-unit" in (getattr(c, "className", "") or "") and c.children:
                units.append(c.children)
            walk(c.children)
    walk(tree)
    assert units[:6] == ["词元/秒"] * 4 + ["秒", "毫秒"]
    assert axes[:3] == ["词元/秒", "秒", "毫秒"]
    assert not [u for u in units + axes if re.search(r"tok/s|\bms\b|^s$", u)]


def test_docs_show_every_term_of_the_termbase():
    doc = (terms.ROOT / "docs" / "terms.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(): line for line in doc.splitlines() if line.startswith("| ")}
    missing = [t.id for t in terms.terms().values() if t.id not in rows or t.zh not in rows[t.id]]
    assert missing == [], f"docs/terms.md lacks rows for {missing}"


def test_the_status_strip_units_follow_the_viewers_language():
    """assets/twin.js draws "t = 12.3 s" with these words: 秒 / 分钟 / 小时 on a Chinese screen."""
    import flask

    from twin.ui.polling import status_text
    app = flask.Flask("units")
    for lang, words in (("zh", ("秒", "分钟", "小时")), ("en", ("s", "min", "h"))):
        with app.test_request_context(f"/?lang={lang}"):
            t = status_text()
            assert (t["s"], t["min"], t["h"]) == words
