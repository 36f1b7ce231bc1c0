"""What the room sees of faults (issue 23): busy and failed cannot be confused (also for colour-blind
viewers), failed parts show at every zoom level of the topology, chart labels are short words that do
not overprint, every kept fault report can be opened and exported. The browser side (the table's fit,
the report from the timeline, chart exports) is in test_e2e_fault_screens.py."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from twin.engine import Engine, command
from twin.engine.faults import KINDS, Policy
from twin.engine.faults.manager import SNAPSHOT_FAULTS
from twin.topology import static
from twin.ui import faultreport
from twin.ui import faulttable
from twin.engine.faults import rows as faultrows
from twin.ui import theme
from twin.ui import topolive
from twin.ui import topostyle
from twin.ui import topoview

# ---- colours: CIELAB distance under normal vision and simulated colour-vision deficiencies ----------

# Machado, Oliveira & Fernandes 2009, severity 1.0, applied to linear RGB
CVD = {"normal": np.eye(3),
       "protan": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                           [-0.003882, -0.048116, 1.051998]]),
       "deutan": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                           [-0.011820, 0.042940, 0.968881]]),
       "tritan": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                           [0.004733, 0.691367, 0.303900]])}
MIN_DELTA_E = 40.0      # CIE76: ~2.3 is just noticeable; the old ">80 %" red and the failed red were 10 apart


def _lab(hex_: str, vision: str) -> np.ndarray:
    c = np.array([int(hex_[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    lin = np.clip(CVD[vision] @ lin, 0, 1)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ lin
    xyz /= np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def delta_e(a: str, b: str, vision: str = "normal") -> float:
    return float(np.linalg.norm(_lab(a, vision) - _lab(b, vision)))


@pytest.mark.parametrize("vision", list(CVD))
def test_no_busy_colour_reads_as_failed_in_any_vision(vision):
    busy = theme.UTIL_STOPS[1:]
    nearest = min(delta_e(c, theme.FAILED, vision) for c in busy)
    assert nearest >= MIN_DELTA_E, (vision, nearest)
    assert delta_e("#e03131", theme.FAILED, vision) < MIN_DELTA_E      # the old ">80 %" red did read as failed


def test_busy_scale_is_sequential_lighter_when_busier():
    lightness = [_lab(c, "normal")[0] for c in theme.UTIL_STOPS[1:]]
    assert all(b - a >= 8 for a, b in zip(lightness, lightness[1:])), lightness
    assert len(topostyle.UTIL_LABELS) == len(theme.UTIL_STOPS)


@pytest.mark.parametrize("sheet", [topostyle.stylesheet, topostyle.picker_stylesheet])
def test_failed_is_a_pattern_and_a_marker_drawn_over_any_fill(sheet):
    css = sheet()
    sel = [r["selector"] for r in css]
    rule = {r["selector"]: r["style"] for r in css}
    last_fill = max(i for i, s in enumerate(sel) if s.startswith(("node.u", "edge.u", ".k-")))
    for s in ("edge.part", "edge.down", "node.npart", "node.down"):
        assert sel.index(s) > last_fill                        # later rules win in cytoscape
    assert rule["node.down"]["background-color"] == theme.FAILED_FILL
    assert rule["node.down"]["border-style"] == "dashed" and rule["node.down"]["label"] == "data(flabel)"
    assert rule["node.npart"]["border-style"] == "double" and rule["node.npart"]["label"] == "data(flabel)"
    assert rule["edge.down"]["line-style"] == rule["edge.part"]["line-style"] == "dashed"
    assert rule["edge.down"]["line-color"] == theme.FAILED
    assert not any(theme.FAILED in str(r["style"]) for r in css[:last_fill + 1])   # red means failed only


def test_legend_states_busy_and_failed():
    text = str(topostyle.legend().to_plotly_json())
    assert ">80 %" in text and "failed (black, red dashed)" in text and "n failed parts inside (red ring)" in text
    assert "idle" not in str(topostyle.legend(busy=False).to_plotly_json())


# ---- failed parts aggregate upwards ------------------------------------------------------------

L2 = "sp3/l2-5"
OPTICAL = "n07/l1-2--sp2/l2-4"


def _snap(failed=(), degraded=None):
    return SimpleNamespace(version=1, failed=tuple(failed), degraded=dict(degraded or {}))


def _named(v, pairs) -> dict:
    return {v.node_ids[i]: n for i, n in pairs}


def test_whole_supernode_shows_a_lost_l2_switch_and_a_dead_optical_link():
    v = topoview.view(static("cloudmatrix384"), topoview.AGG)
    live = topolive.live(v, _snap([L2, OPTICAL]))
    assert _named(v, live["nfail"]) == {"sp3": 1, "sp2": 1, "n07": 1}      # main drew none of them
    assert live["ndown"] == []
    live = topolive.live(v, _snap([L2, "sp3/l2-6"], {"n01/l1-3--sp3/l2-0": 0.5}))   # a degraded link counts too
    assert _named(v, live["nfail"]) == {"sp3": 3, "n01": 1}


def test_drilled_in_views_count_the_same_faults():
    t = static("cloudmatrix384")
    node = topoview.view(t, "n07")
    assert _named(node, topolive.live(node, _snap([L2, OPTICAL]))["nfail"]) == {"sp3": 1, "sp2": 1, "n07/l1-2": 1}
    plane = topoview.view(t, "sp3")
    live = topolive.live(plane, _snap([L2]))
    assert [plane.node_ids[i] for i in live["ndown"]] == [L2] and live["nfail"] == []   # drawn failed itself


def test_a_wholly_failed_node_is_down_not_counted():
    v = topoview.view(static("cloudmatrix384"), topoview.AGG)
    live = topolive.live(v, _snap(["n07"]))
    assert [v.node_ids[i] for i in live["ndown"]] == ["n07"] and live["nfail"] == []


# ---- chart labels ---------------------------------------------------------------------------------

def _strike(i, at, kind="l2", target="sp3/l2-5"):
    return {"id": i, "kind": kind, "target": target, "at_s": at, "recover_s": 2.0, "served_s": 2.0, "active": False}


def test_near_strikes_get_short_words_in_staggered_rows():
    reps = [_strike(1, 81.3), _strike(2, 90.8, "optical_link", OPTICAL), _strike(3, 95.0, "node", "n20")]
    _, notes = faulttable.marks(reps, 200.0, t_from=0.0)
    assert [n["text"] for n in notes] == ["#1 L2 lost", "#2 link down", "#3 node down"]
    assert [n["y"] for n in notes] == [0.72, 0.86, 1.0]                 # the newest on top
    assert "optical link down on n07/l1-2--sp2/l2-4 at t = 90.8 s" in notes[1]["hovertext"]
    assert notes[1]["captureevents"] and faultreport.fault_id({"annotation": notes[1]}) == 2


def test_label_rows_keep_labels_apart_and_drop_what_has_no_room():
    xs = [10.0, 12.0, 14.0, 16.0, 60.0]
    rows = faulttable.label_rows(xs, 100.0)
    assert rows == [None, 2, 1, 0, 0]                    # the oldest of four close strikes has no room
    gap = faulttable.LABEL_GAP * 100.0
    for r in set(rows) - {None}:
        same = sorted(x for x, rr in zip(xs, rows) if rr == r)
        assert all(b - a >= gap for a, b in zip(same, same[1:]))


def test_every_fault_kind_has_short_words():
    assert all(len(k.short) <= 16 and "_" not in k.short for k in KINDS.values())


# ---- reports: every kept one can be opened and exported ------------------------------------------

def _report(i):
    return {**_strike(i, float(i)), "detect_s": None, "requests_affected": 0, "requeued": 0, "recomputed": 0,
            "lost": 0, **{k: 1.0 for k in faultrows.MEASURED}, "note": "", "final": True}


def test_export_and_reports_cover_the_archive_not_only_the_snapshot():
    snap = SimpleNamespace(fault_archive=tuple(_report(i) for i in range(1, 31)),
                           faults=tuple(_report(i) for i in range(31, 51)), sim_time=123.4,
                           scenario="default", deployment="cloudmatrix-infer-paper", seed=3)
    rows = faultreport.export_rows(snap)
    assert [r["id"] for r in rows] == list(range(1, 51))
    assert faultrows.csv_text(rows).count("\n") == 51
    assert faultreport.find(snap, 7)["id"] == 7 and faultreport.find(snap, "50")["id"] == 50 and faultreport.find(snap, 51) is None
    assert faultreport.file_name(snap, "csv") == "faults-default-cloudmatrix-infer-paper-seed3-t123s.csv"
    assert faultreport.final(_report(3)) and not faultreport.final({**_report(3), "final": False})
    text = str(faultreport.panel(_report(7), 200.0).to_plotly_json())
    assert "Fault #7: L2 " in text and "switch lost on sp3/l2-5" in text and "Final:" in text   # UB: glossed


@pytest.mark.parametrize("value,fid", [(3, 3), ("12", 12), (0, None), (-1, None), ("x", None), (None, None),
                                       ({"annotation": {"name": "fault-9"}}, 9), ({"annotation": {}}, None),
                                       ({"annotation": [1]}, None), ({"annotation": {"name": ["x"]}}, None)])
def test_fault_id_from_links_labels_and_urls(value, fid):
    assert faultreport.fault_id(value) == fid


def test_timeline_lines_link_to_their_fault_reports():
    evs = [{"t": 1.0, "kind": "fault", "message": "#4 l2 on sp3/l2-5", "template": "#%(id)s %(kind)s on %(target)s",
            "args": {"id": 4, "kind": "l2", "target": "sp3/l2-5"}},
           {"t": 2.0, "kind": "policy", "message": "policy set"}]
    lines = faulttable.timeline(evs)
    ids = [c.id for line in lines for c in line.children if getattr(c, "id", None)]
    assert ids == [{"type": faulttable.LINK, "index": 4, "at": "ev1"}]        # newest first: the fault is line 1


def test_engine_archive_keeps_every_report_and_makes_final_ones_once():
    eng = Engine("paper-decode", seed=1)
    eng.advance(5.0)
    eng.faults.policy = Policy.load(detect_s=1.0, reroute_s=0.5, network_repair_s=1.0, hardware_repair_s=1.0)
    n = SNAPSHOT_FAULTS + 5
    for i in range(n):
        eng.submit(command("fault", {"kind": "optical_degrade", "target": f"n{i % 48:02d}/l1-0--sp0/l2-0",
                                     "duration_s": 0.5, "at_s": 6.0 + 0.1 * i}))
    eng.advance(100.0)                      # every fault over and its "after" window (<= 60 s) frozen
    snap = eng.snapshot()
    assert len(snap.faults) == SNAPSHOT_FAULTS and len(snap.fault_archive) == n - SNAPSHOT_FAULTS
    assert [r["id"] for r in faultreport.kept(snap)] == list(range(1, n + 1))
    assert all(faultreport.final(r) for r in snap.fault_archive)
    eng.advance(1.0)
    again = eng.snapshot()
    assert all(a is b for a, b in zip(again.fault_archive, snap.fault_archive))    # made once, kept
