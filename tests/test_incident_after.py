"""A fault's harm after its part serves again (issue 36, item 13): node power loss on n21 in paper-decode.
The decode instance restarts after 61 s, but its backlog keeps SLO attainment near 0 for ~1,100 more
simulated seconds. The report has an "after" phase to service back, and the Failures page's charts of
the incident are pinned to the report's window, drawn from the series the engine kept (the rolling
history has long dropped the strike); both are read here from one run and must agree."""
from __future__ import annotations

import json

import numpy as np
import pytest

from twin.engine import Engine
from twin.engine.faults import aftermath
from twin.engine.faults import rows as faultrows
from twin.engine.scenario import load_scenario
from twin.ui import failpanels, faultconsole, faultreport, faulttable

AT = 300.0


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    path = tmp_path_factory.mktemp("faults") / "n21.toml"
    path.write_text(f'scenario = "paper-decode"\nseed = 0\nduration_s = 1600\n'
                    f'[[fault]]\nat_s = {AT}\nkind = "node"\ntarget = "n21"\n')
    eng = Engine(load_scenario("paper-decode", seed=0, duration_s=1600, faults=str(path)))
    eng.run(1600, step=20)
    return eng.snapshot()


def _chart(figs, key: str) -> dict:
    return figs[list(faultconsole.CHARTS).index(key)]


def test_report_after_phase_and_service_back_agree_with_the_pinned_charts(run):
    snap = run
    r = faultreport.find(snap, 1)
    assert r["final"] and r["served_s"] == pytest.approx(61.0) and r["recover_s"] == pytest.approx(61.0)
    back, ref, margin = r["back_s"], r["slo_reference"], r["back_margin"]
    assert ref == pytest.approx(1.0, abs=0.01) and margin == aftermath.MARGIN == 0.05
    assert 900 < back < 1300                                  # the backlog drained for ~1,100 s after the restart
    assert r["window_s"] == [AT - 60, pytest.approx(AT + back + aftermath.TAIL_S)]
    assert snap.history["t"][0] > AT + 60                     # the live history no longer holds the strike

    figs = failpanels.pinned(snap, 1)
    slo = _chart(figs, "slo")
    assert slo["layout"]["xaxis"]["range"] == r["window_s"]   # pinned to the report's window
    x = np.array(slo["data"][0]["x"], dtype=float)
    y = np.array([np.nan if v is None else v for v in slo["data"][0]["y"]], dtype=float) / 100
    assert x[0] == AT - 59 and x[-1] == pytest.approx(AT + back + aftermath.TAIL_S)
    served, t_back = AT + r["recover_s"], AT + back
    ok = y >= ref - margin - 1e-9
    # service back on the chart: from t_back the SLO line stays within the margin for HOLD_S; the last
    # measured point before it is outside the margin (so t_back is where the line came back)
    hold = (x >= t_back) & (x <= t_back + aftermath.HOLD_S)
    assert hold.sum() >= aftermath.HOLD_S and ok[hold & np.isfinite(y)].all()
    before_back = (x > served) & (x < t_back) & np.isfinite(y)
    assert not ok[before_back][-1] and before_back.sum() > 900
    # the after phase is the chart's mean from the part repaired to service back
    after = (x > served) & (x <= t_back + 1e-9)
    assert r["slo_after"] == pytest.approx(np.nanmean(y[after]), abs=1e-3) and r["slo_after"] < 0.2
    good = _chart(figs, "good")["data"][0]
    gy = np.array([np.nan if v is None else v for v in good["y"]], dtype=float)
    assert r["goodput_after"] == pytest.approx(np.nanmean(gy[after]), rel=1e-3)
    assert r["goodput_during"] == 0.0 and r["goodput_before"] > 250_000
    # the charts mark the part serving again and service back where the report says
    lines = {s["x0"] for s in slo["layout"]["shapes"] if s["line"].get("color") == failpanels.theme.GREEN}
    assert lines == {round(served, 1), round(t_back, 1)}


def test_report_panel_and_table_say_the_harm_after_the_repair(run):
    r = faultreport.find(run, 1)
    row = faultrows.rows([r], float(run.sim_time))[0]
    assert row["state"] == "recovered"
    text = json.dumps(faultreport.panel(row, float(run.sim_time)).to_plotly_json(),
                      default=lambda o: o.to_plotly_json(), ensure_ascii=False)
    t_back = f"{AT + r['back_s']:,.1f}"
    assert f"(t = {t_back} s): SLO attainment back within 5 points of the minute before (100.0 %)" in text
    assert f"240–300 / 300–361 / 361–{AT + r['back_s']:,.0f}" in text
    assert "part serving again after" in text and "61.0 s" in text
    table = json.dumps(faulttable.table([row], float(run.sim_time)).to_plotly_json(),
                       default=lambda o: o.to_plotly_json(), ensure_ascii=False)
    assert f"100.0 → no completions → {r['slo_after'] * 100:.1f}" in table      # the table's SLO: before → during → after
    assert row["impact"].endswith(f"after it, SLO attainment was {r['slo_after'] * 100:.1f} % (against 100.0 % "
                                  f"before) and service was back after {r['back_s']:,.0f} s")


def test_service_not_back_yet_is_said():
    """While the backlog drains the fault is "recovered · service not back yet", and its after phase runs."""
    r = {"id": 1, "kind": "node", "target": "n21", "at_s": 300.0, "recover_s": 61.0, "served_s": 61.0,
         "back_s": None, "back_margin": 0.05, "slo_reference": 1.0, "slo_before": 1.0, "slo_after": 0.0,
         "goodput_before": 270_000.0, "goodput_during": 0.0, "active": False}
    row = faultrows.rows([r], 900.0)[0]
    assert row["state"] == "recovered · service not back yet"
    assert row["impact"].endswith("after it, SLO attainment was 0.0 % (against 100.0 % before) and service is "
                                  "not back yet")
