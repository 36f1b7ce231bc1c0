"""Gray failures on screen (issue 35): a part running slowly is drawn distinctly from a failed one and
from a busy one, at every zoom level, with the fraction of its speed kept; the Failures page's table
and incident report show how it was detected and what it cost."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from test_fault_screens import CVD, MIN_DELTA_E, delta_e
from twin.engine import Engine
from twin.ui import theme, topolive, topostyle, topoview


@pytest.fixture(scope="module")
def snap():
    eng = Engine("paper-decode", seed=1)
    eng.advance(1.0)
    s = eng.snapshot()
    fields = ("version", "die_util", "die_pool", "link_util", "link_capacity", "failed", "degraded", "system")
    return SimpleNamespace(**{k: getattr(s, k) for k in fields},
                           health={"n36/npu3/d1": {"compute": 0.5}, "n36/npu2/d0": {"hbm": 0.8},
                                   "n05/cpu2": {"cpu": 0.7}, "n20/l1-3--sp3/l2-7": {"bandwidth": 0.25}})


@pytest.mark.parametrize("vision", list(CVD))
def test_slow_reads_neither_as_failed_nor_as_busy(vision):
    assert delta_e(theme.SLOW, theme.FAILED, vision) >= MIN_DELTA_E, vision
    assert min(delta_e(theme.SLOW, c, vision) for c in theme.UTIL_STOPS[1:]) >= 30, vision


@pytest.mark.parametrize("sheet", [topostyle.stylesheet, topostyle.picker_stylesheet])
def test_slow_is_an_amber_dotted_border_that_a_failure_drawn_on_it_overrides(sheet):
    css = sheet()
    sel = [r["selector"] for r in css]
    rule = {r["selector"]: r["style"] for r in css}
    last_fill = max(i for i, s in enumerate(sel) if s.startswith(("node.u", "edge.u", ".k-")))
    assert last_fill < sel.index("node.slow") < sel.index("node.npart") < sel.index("node.down")
    assert rule["node.slow"] == {"border-color": theme.SLOW, "border-style": "dotted", "border-width": 4,
                                 "label": "data(flabel)"}
    assert "background-color" not in rule["node.slow"]          # the busy fill stays readable


def test_a_slow_part_marks_its_view_node_at_every_zoom_with_the_speed_kept(snap):
    t = snap.system.topology
    whole = topoview.view(t, topoview.AGG)
    marks = {whole.node_ids[i]: f for i, f in topolive.live(whole, snap)["slow"]}
    assert marks == {"n36": 0.5, "n05": 0.7}             # the slowest part in each; the slow link is drawn as a link
    node = topoview.view(t, "n36")
    marks = {node.node_ids[i]: f for i, f in topolive.live(node, snap)["slow"]}
    assert marks == {"n36/npu3/d1": 0.5, "n36/npu2/d0": 0.8}
    healthy = SimpleNamespace(**{**vars(snap), "health": {}})
    assert topolive.live(whole, healthy)["slow"] == []


def test_a_failed_part_is_drawn_failed_not_slow(snap):
    t = snap.system.topology
    node = topoview.view(t, "n36")
    dead = SimpleNamespace(**{**vars(snap), "failed": ("n36/npu3/d1",)})
    live = topolive.live(node, dead)
    i = node.node_ids.index("n36/npu3/d1")
    assert i in live["ndown"] and i not in [j for j, _f in live["slow"]]


def test_the_details_of_a_slow_part_say_what_runs_slowly(snap):
    t = snap.system.topology
    assert topolive.element_stats(topoview.view(t, "n36"), snap, "node", "n36/npu3/d1")[-1] == (
        "running slow", "1 of 1 elements · compute 50 % kept")
    assert topolive.element_stats(topoview.view(t, topoview.AGG), snap, "node", "n36")[-1] == (
        "running slow", "2 of 36 elements · compute 50 % kept, HBM bandwidth 80 % kept")


def test_the_legend_says_how_a_slow_part_is_drawn(dash_app):
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=en"}):
        text = str(topostyle.legend().to_plotly_json())
    assert "running slow, f of its speed kept (amber dotted)" in text and "×f" in text
