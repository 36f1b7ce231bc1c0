"""The Failures page's numbers read right (issue 12): each fault's "during" window ends where the
next fault struck (one definition, the engine's), and a window without completions says so."""
from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np

from twin.engine.accounting import fault_windows, rise_in
from twin.engine.faults import Fault, FaultManager
from twin.ui import faulttable
from twin.engine.faults import rows as faultrows

from test_callbacks import failures  # noqa: F401 (fixture)


def test_a_faults_during_window_ends_where_the_next_fault_struck():
    assert fault_windows(100.0, 400.0, 1.0) == ((40.0, 100.0), (100.0, 400.0))
    assert fault_windows(100.0, 400.0, 1.0, next_at=150.0) == ((50.0, 100.0), (100.0, 150.0))
    assert fault_windows(100.0, 400.0, 1.0, next_at=90.0) == ((40.0, 100.0), (100.0, 400.0))


def _manager(history: dict, now: float) -> FaultManager:
    eng = SimpleNamespace(metrics=SimpleNamespace(history=history), lost_ids=lambda: np.zeros(0, dtype=np.int64),
                          env=SimpleNamespace(now=now), scenario=SimpleNamespace(interval_s=1.0, seed=0),
                          topo=SimpleNamespace(die_ids=[]), ems=None)      # the detector's telemetry: none here
    return FaultManager(eng, policy=object())


def test_a_later_faults_numbers_stay_out_of_an_earlier_faults_row():
    t = list(range(1, 301))
    good = [100.0 if x <= 200 else 40.0 for x in t]          # the second fault (at 200) halves goodput
    slo = [1.0 if x <= 200 else float("nan") for x in t]     # ...and nothing completes after it
    fm = _manager({"t": t, "goodput_tps": good, "slo_attainment": slo}, now=300.0)
    fm.faults = [Fault(1, "optical_link", "n20/l1-3--sp3/l2-7", 100.0, active=True),
                 Fault(2, "npu_die", "n36/npu3/d1", 200.0, active=True)]
    first, second = fm.report()
    assert (first["goodput_before"], first["goodput_during"]) == (100.0, 100.0)      # not -30 %
    assert (first["slo_before"], first["slo_during"]) == (1.0, 1.0)
    assert (second["goodput_before"], second["goodput_during"]) == (100.0, 40.0)
    assert (second["slo_before"], second["slo_during"]) == (1.0, None)               # no completions
    row = faultrows.rows([second], 300.0)[0]
    assert faulttable._cells(row)[11].children == "100.0 → no completions"
    fresh = faultrows.rows([dict(second, goodput_during=None, slo_during=None)], 200.5)[0]   # no interval ended yet
    assert faulttable._cells(fresh)[11].children == "100.0 → …" and faulttable._cells(fresh)[10].children == "100 → …"


def test_a_rise_is_the_second_half_of_a_window_over_its_first():
    t = np.arange(1.0, 61.0)
    assert rise_in(t, np.where(t <= 30, 100.0, 150.0), (0.0, 60.0)) == 0.5
    assert rise_in(t, np.full(60, 80.0), (0.0, 60.0)) == 0.0
    assert rise_in(t, np.where(t <= 30, 0.0, 50.0), (0.0, 60.0)) is None       # nothing before to compare with
    assert rise_in(t, np.full(60, 80.0), (60.0, 120.0)) is None                 # no interval in the window


def test_a_fault_while_goodput_still_rises_claims_no_change():
    t = list(range(1, 401))
    good = [x * 1000.0 if x <= 100 else 100_000.0 for x in t]       # warming up for 100 s, then steady
    fm = _manager({"t": t, "goodput_tps": good, "slo_attainment": [1.0] * 400}, now=400.0)
    fm.faults = [Fault(1, "l2", "sp2/l2-5", 50.0, recover_s=100.0), Fault(2, "l2", "sp2/l2-6", 300.0, recover_s=50.0)]
    early, late = faultrows.rows(fm.report(), 400.0)
    assert early["goodput_rise_before"] == round(38 / 13 - 1, 3)       # halves of (0, 50]: means 13k and 38k
    assert late["goodput_rise_before"] == 0.0
    cell = faulttable._cells(early)[10]
    assert cell.children == "25.5k → 87.8k (not steady before)" and "rose 192 %" in cell.title
    assert faultrows.impact(early).startswith("not comparable: goodput was still rising when it struck (+192 %")
    from twin.ui import faultreport
    report = str(faultreport.panel(fm.report()[0], 400.0))
    assert "+192 %" in report and "not steady: before against during" in report
    assert "+0 %" in str(faultreport.panel(fm.report()[1], 400.0)) and "not steady" not in str(
        faultreport.panel(fm.report()[1], 400.0))
    assert faulttable._cells(late)[10].children == "100.0k → 100.0k (+0 %)"
    assert faultrows.impact(late) == "no impact, because no request was on the part"


def test_on_the_default_scenario_a_fault_in_the_first_minute_is_marked_not_steady():
    from twin.engine import Engine
    from twin.engine.commands import InjectFault
    eng = Engine(scenario="default", seed=0)
    eng.submit(InjectFault({"kind": "l2", "target": "sp2/l2-5", "at_s": 60.0, "duration_s": 5}))
    eng.advance(70.0)
    (row,) = faultrows.rows(eng.snapshot().faults, 70.0)
    assert row["goodput_rise_before"] > 1.0 and faultrows.rising(row) == row["goodput_rise_before"]
    assert "not steady before" in faulttable._cells(row)[10].children


def test_each_fault_appears_once_in_the_timeline():
    from twin.engine import Engine
    from twin.engine.commands import InjectFault
    eng = Engine(scenario="paper-decode")
    eng.advance(1.0)
    eng.submit(InjectFault({"kind": "l2", "target": "sp2/l2-5", "duration_s": 3}))
    eng.submit(InjectFault({"kind": "l1", "target": "n20/l1-3", "at_s": 5.0, "duration_s": 1}))
    eng.advance(8.0)
    lines = [e["message"] for e in FT_events(eng.snapshot().events)]
    assert [m for m in lines if m.startswith("#1 ")] == [      # struck, rerouted, back up: each once
        "#1 l2 on sp2/l2-5: back up after 3.0 s", "#1 l2 on sp2/l2-5: traffic rerouted after 2.0 s",
        "#1 l2 on sp2/l2-5"]
    assert sum(m.startswith("#2 ") for m in lines) == 2


def FT_events(evs) -> list[dict]:
    """The timeline's events, as the page lists them (newest first)."""
    return [e for e in evs or () if e.get("kind") in faulttable.TIMELINE_KINDS][::-1]


def test_a_network_faults_band_ends_when_traffic_flows_again_not_at_the_repair():
    from twin.engine import Engine
    from twin.engine.commands import InjectFault
    eng = Engine(scenario="paper-decode")
    eng.advance(1.0)
    eng.submit(InjectFault({"kind": "optical_link", "target": "n20/l1-3--sp3/l2-7"}))          # no duration
    eng.submit(InjectFault({"kind": "optical_flap", "target": "n21/l1-3--sp3/l2-7", "duration_s": 200,
                            "period_s": 10}))
    eng.advance(99.0)
    down, flap = eng.snapshot().faults
    assert down["active"] and down["recover_s"] is None and down["served_s"] == 2.0   # rerouted (reroute_s)
    assert flap["active"] and flap["served_s"] == 60.0                                # isolated at detection
    shapes, _ = faulttable.marks([down], 100.0)
    assert [(s["x0"], s["x1"]) for s in shapes if s["type"] == "rect"] == [(1.0, 3.0)]
    # the flap is isolated at its detection, 60 s after it struck
    shapes, _ = faulttable.marks([flap], 100.0)
    assert [(s["x0"], s["x1"]) for s in shapes if s["type"] == "rect"] == [(1.0, 61.0)]


def test_a_30_s_p99_tpot_is_clipped_and_named_instead_of_flattening_the_chart():
    from twin.ui import faultconsole
    from twin.ui import figures
    t = list(range(1, 201))
    hist = {"t": t, "tpot_p50_ms": [40.0] * 200, "tpot_p99_ms": [48.0 if x != 150 else 30_000.0 for x in t]}
    fig = figures.strip_figure(faultconsole.CHARTS["tpot"], hist)
    ax = fig["layout"]["yaxis"]
    assert ax["range"] == [0, 192.0] and ax["autorange"] is False          # 4x the 90th percentile (48 ms)
    assert ax["title"]["text"] == "ms · clipped at 192; max 30,000 at t=150 s"
    spiky = dict(hist, tpot_p99_ms=[48.0 if x % 5 else 120.0 for x in t])   # ordinary p99 spikes stay drawn
    assert figures.strip_figure(faultconsole.CHARTS["tpot"], spiky)["layout"]["yaxis"]["autorange"] is True
    start = {"t": [1, 2, 3], "tpot_p50_ms": [20.0, 15.0, 14.0], "tpot_p99_ms": [22.0, 16.0, 400.0]}
    assert figures.strip_figure(faultconsole.CHARTS["tpot"], start)["layout"]["yaxis"]["autorange"] is True


def test_the_fault_table_downloads_as_csv():
    rows = faultrows.rows([{"id": 2, "kind": "l2", "target": "sp2/l2-5", "at_s": 30.0, "detect_s": None, "recover_s": 2.5,
                     "served_s": 2.5, "requests_affected": 5, "requeued": 0, "recomputed": 0, "lost": 0,
                     "goodput_before": 100.0, "goodput_during": 90.0, "slo_before": 1.0, "slo_during": None,
                     "active": False},
                    {"id": 1, "kind": "cpu", "target": "n05/cpu0", "at_s": 10.0, "active": True}], 40.0)
    assert faultrows.csv_text(rows).splitlines() == [
        "id,kind,target,at_s,detect_s,served_s,recover_s,back_s,requests_affected,requeued,recomputed,lost,"
        "goodput_before,goodput_during,goodput_after,slo_before,slo_during,slo_after,slo_reference,back_margin,"
        "goodput_rise_before,detected_by,mitigated_s,"
        "mitigation,tpot_before_ms,tpot_during_ms,tpot_after_ms,whatif_tokens_lost,whatif_tpot_ms_without,"
        "whatif_slo_without,whatif_won_back_tokens,state,impact",
        "1,cpu,n05/cpu0,10.0,,,,,,,,,,,,,,,,,,,,,,,,,,,,active,not measured yet",
        "2,l2,sp2/l2-5,30.0,,2.5,2.5,,5,0,0,0,100.0,90.0,,1.0,,,,,,,,,,,,,,,,recovered,\"goodput fell 10 % until the "
        "part was repaired; 5 requests affected, 0 requeued, 0 recomputed, none lost\""]
    assert json.loads(faultrows.json_text(rows))[1]["impact"].startswith("goodput fell 10 %")


def test_the_csv_button_sends_the_viewed_twins_table(failures, twin_registry):   # noqa: F811
    from test_callbacks import triggered
    out = triggered(failures.download_csv, "fl-csv.n_clicks", 1, None, "shared")
    run = re.escape(f"{twin_registry.shared().params.scenario}-")
    assert re.fullmatch(f"faults-{run}.+-seed0-t\\d+s\\.csv", out["filename"])           # named after the run
    assert out["content"].startswith("id,kind,target,at_s,")
    out = triggered(failures.download_csv, "fl-json.n_clicks", None, 1, "shared")
    assert out["filename"].endswith(".json") and json.loads(out["content"]) == []
