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


# ---- the Failures page: detection measured, TPOT before / during / after, the what-if -----------------

GRAY = {"id": 3, "kind": "straggler", "target": "n36/npu3/d1", "at_s": 60.0, "detect_s": 12.5, "recover_s": 14.0,
        "served_s": 14.0, "requests_affected": 0, "requeued": 0, "recomputed": 0, "lost": 0,
        "goodput_before": 1000.0, "goodput_during": 600.0, "slo_before": 0.9, "slo_during": 0.5, "active": True,
        "detected_by": "telemetry", "mitigated_s": 14.0, "mitigation": "experts rerouted to redundant copies",
        "tpot_before_ms": 30.0, "tpot_during_ms": 57.0, "tpot_after_ms": 31.0,
        "whatif": {"tokens_lost": 123456, "tpot_ms_without": 30.2, "slo_without": 0.91, "won_back_tokens": 400000}}
STOP = {"id": 1, "kind": "l2", "target": "sp2/l2-5", "at_s": 30.0, "detect_s": 60.0, "recover_s": 540.0,
        "served_s": 2.0, "requests_affected": 5, "requeued": 0, "recomputed": 0, "lost": 0, "active": False,
        "goodput_before": 100.0, "goodput_during": 99.0}


def test_a_gray_faults_row_says_what_it_cost_and_exports_its_what_if():
    from twin.engine.faults import rows as faultrows
    (row,) = faultrows.rows([GRAY], 100.0)
    assert row["state"] == "mitigated · part still slow"
    assert row["impact"] == ("TPOT p50 30.0 -> 57.0 ms (x1.90); noticed by the detector after 12 s; experts "
                             "rerouted to redundant copies after 14 s, then 31.0 ms; it cost 123,456 tokens against "
                             "the same run without it, the mitigation won back 400,000; none lost")
    head, line = faultrows.csv_text([row]).splitlines()
    assert head.endswith("goodput_rise_before,detected_by,mitigated_s,mitigation,tpot_before_ms,tpot_during_ms,"
                         "tpot_after_ms,whatif_tokens_lost,whatif_tpot_ms_without,whatif_slo_without,"
                         "whatif_won_back_tokens,state,impact")
    assert ",telemetry,14.0,experts rerouted to redundant copies,30.0,57.0,31.0,123456.0,30.2,0.91,400000.0," in line
    (stop,) = faultrows.rows([STOP], 600.0)
    assert stop["detected_by"] is None and stop["whatif_tokens_lost"] is None
    assert stop["impact"].startswith("no impact")


def test_the_table_marks_a_measured_detection_and_the_report_shows_the_what_if(dash_app):
    from twin.engine.faults import rows as faultrows
    from twin.ui import faultreport, faulttable
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=en"}):
        gray_row, stop_row = faultrows.rows([GRAY, STOP], 600.0)
        summary = {"injected": 2, "active": 1, "detector": {"flags": 1, "false_alarms": 0, "threshold": 1.15}}
        cells = str(faulttable.table([gray_row, stop_row], 600.0, summary).to_plotly_json())
        assert cells.count("by the detector") == 1
        assert "2 fault(s) · 1 active · detector: 1 flagged slow, 0 false alarms" in cells
        report = str(faultreport.panel(GRAY, 100.0).to_plotly_json())
        for text in ("the detector, from telemetry (measured)", "14.0 s · experts rerouted to redundant copies",
                     "30.0 / 57.0 / 31.0", "123.5k tokens fewer; TPOT p50 30.2 ms and SLO attainment 91.0 % without the fault",
                     "won back by the mitigation",
                     "400.0k tokens"):
            assert text in report, text
        caught_up = {**GRAY, "whatif": {**GRAY["whatif"], "tokens_lost": -351}}
        assert "351 tokens more (a backlog caught up)" in str(faultreport.panel(caught_up, 100.0).to_plotly_json())
        plain = str(faultreport.panel(STOP, 600.0).to_plotly_json())
        assert "TPOT p50 before" not in plain and "what-if" not in plain and "detected by" not in plain


# ---- the what-if on the live page: a background job replays the demo ------------------------------

SMALL = """scenario = "paper-decode"
seed = 1
duration_s = 40
[[fault]]
at_s = 10
kind = "straggler"
target = "n20/npu3/d1"
factor = 0.5
"""


def test_the_what_if_job_measures_what_the_command_line_does(tmp_path, capsys):
    import json
    from twin.cli.main import main
    from twin.explore import incidentjob
    path = tmp_path / "slow.toml"
    path.write_text(SMALL)
    done = []
    got = incidentjob.whatif_job(str(path), done.append)
    assert done == [1, incidentjob.RUNS] and set(got) == {"1"}
    assert main(["run", "--faults", str(path), "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)["faults"][0]["whatif"]
    assert got["1"] == cli and cli["tokens_lost"] > 0 and cli["won_back_tokens"] > 0


def test_a_report_shows_the_what_if_of_the_demo_the_twin_replays_only():
    from twin.ui import faultreport
    plain = {k: v for k, v in GRAY.items() if k != "whatif"}
    store = {"job": "wh1", "faults": "/demo/one-slow-die.toml", "result": {"3": GRAY["whatif"]}}
    assert faultreport.with_whatif(plain, store, "/demo/one-slow-die.toml") == GRAY
    assert faultreport.with_whatif(plain, store, "/demo/l2-loss.toml") == plain        # another demo now
    assert faultreport.with_whatif(plain, {**store, "result": {"4": {}}}, "/demo/one-slow-die.toml") == plain
    assert faultreport.with_whatif(plain, "tampered", "/demo/one-slow-die.toml") == plain


def test_the_report_offers_the_what_if_until_it_has_one(dash_app):
    from twin.ui import faultreport
    plain = {k: v for k, v in GRAY.items() if k != "whatif"}
    with dash_app.server.test_request_context("/", headers={"Cookie": "twin_lang=en"}):
        asked = str(faultreport.panel(plain, 100.0).to_plotly_json())
        assert "Run the what-if" in asked and "'type': 'fl-whatif', 'index': 3" in asked
        assert "Run the what-if" not in str(faultreport.panel(GRAY, 100.0).to_plotly_json())
        assert "Run the what-if" not in str(faultreport.panel(STOP, 600.0).to_plotly_json())


def test_the_what_if_button_needs_a_demo_and_queues_a_job_for_it(dash_app, twin_registry, monkeypatch):
    import importlib
    from test_callbacks import triggered
    from twin.live import jobs
    fl = importlib.import_module("pages.failures")
    secret = "w" * 32
    msg, cls, store, disabled = triggered(fl.on_whatif, '{"index":3,"type":"fl-whatif"}.n_clicks', [1], "shared", secret)
    assert cls == "ctl-msg msg-error" and "a what-if replays a fault demo" in msg and store is fl.no_update
    asked = []
    monkeypatch.setattr(jobs.pool(), "submit", lambda kind, fn, args, **kw: asked.append((kind, fn, args, kw)) or "wh9")
    monkeypatch.setattr(twin_registry.shared().params, "faults", "one-slow-die")     # as a demo's reset sets it
    msg, cls, store, disabled = triggered(fl.on_whatif, '{"index":3,"type":"fl-whatif"}.n_clicks', [1], "shared", secret)
    assert cls == "ctl-msg msg-ok" and store == {"job": "wh9", "faults": "one-slow-die"} and disabled is False
    (kind, fn, args, kw), = asked
    assert (kind, fn.__name__, args, kw["total"]) == ("whatif", "whatif_job", ("one-slow-die",), 3)
    assert 0 < kw["cost_s"] < jobs.MAX_JOB_CPU_S
