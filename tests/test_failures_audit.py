"""Issue 23, "every screen true to the system it shows": the Failures page breaks the part the viewer
picked, labels each recovery for what it is, keeps each fault's report, and draws goodput and all
output on one time basis; the Traffic matrix keeps one orientation; Topology tells busy from failed."""
from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from dash import no_update

from test_callbacks import _components, failures, pages  # noqa: F401 (fixtures)


def _console_after_first_tick(failures, target: str) -> tuple[str, str, str]:
    """(kind, target, hint) the console shows once the first tick checked `?target=` (no kind)."""
    layout = failures.layout(target=target)
    comps = {c.id: c for c in _components(layout) if isinstance(getattr(c, "id", None), str)}
    first = failures.tick(1, "shared", None, view_name="supernode", url=comps["fl-url"].data)
    kind = comps["fl-kind"].value if first["kind"] is no_update else first["kind"]
    shown = comps["fl-target"].value if first["target"] is no_update else first["target"]
    return kind, shown, first["hint"]


@pytest.mark.parametrize("target, kind", [("n20", "node"), ("n20/npu3/d1", "npu_die"), ("n05/cpu2", "cpu"),
                                          ("n20/l1-3--sp3/l2-7", "optical_link"), ("rdma/spine-0", "rdma_plane"),
                                          ("sp2/l2-5", "l2")])
def test_a_target_without_a_kind_opens_the_console_on_that_part(failures, twin_registry, target, kind):
    """/failures?target=n20 (no kind): the console keeps n20 and picks the kind that breaks it,
    never the default L2 switch."""
    assert _console_after_first_tick(failures, target)[:2] == (kind, target)


def test_a_target_that_cannot_be_broken_is_kept_and_the_hint_says_so(failures, twin_registry):
    kind, target, hint = _console_after_first_tick(failures, "vpc/switch")
    assert target == "vpc/switch" and "cannot be broken" in hint


def test_break_this_part_carries_the_part_and_its_kind(pages, twin_registry):
    href, style = pages.topology.break_link({"kind": "node", "id": "n20", "view": "supernode"}, "shared")
    q = parse_qs(urlsplit(href).query)
    assert style == {} and q == {"target": ["n20"], "kind": ["node"]}


# ---- 5: service recovery and hardware repair are two events -------------------------------------------

def test_a_dies_service_recovery_and_its_hardware_repair_are_logged_as_what_they_are():
    """A die lost at t=2 s (detect 5 s, redundant expert 1 s, hardware repair 30 s): the timeline says
    service recovered after 6 s at t=8, and at t=38 that the die was repaired, not "recovered after 6 s"."""
    from twin.engine import Engine
    from twin.engine.commands import InjectFault
    from twin.engine.faults import Policy
    eng = Engine(scenario="paper-decode")
    eng.faults.policy = Policy.load(detect_s=5.0, hardware_repair_s=30.0)
    eng.advance(2.0)
    die = f"{eng.topo.die_ids[int(eng.decode[0].dies[0])]}"
    eng.submit(InjectFault({"kind": "npu_die", "target": die}))
    eng.advance(40.0)
    lines = [(round(e["t"]), e["kind"], e["message"]) for e in eng.snapshot().events
             if (e.get("args") or {}).get("id") == 1 and e["kind"] in ("recover", "repair")]
    assert lines == [(8, "recover", f"#1 npu_die on {die}: service recovered after 6.0 s"),
                     (38, "repair", f"#1 npu_die on {die}: hardware repaired after 36.0 s, back in service")]


# ---- 6: goodput and all output on one time basis -----------------------------------------------------

def test_goodput_never_rises_above_all_output_through_an_optical_flap():
    """The optical-flap demo (paper-decode at peak load, a link flapping from 120 s): the Failures
    goodput chart's two lines count output tokens on the same basis, so goodput <= all output at
    every point (goodput counted at completion drawn over output counted per token reached 2.4x)."""
    from twin.engine import Engine
    from twin.engine.commands import InjectFault
    from twin.ui import faultconsole
    eng = Engine(scenario="paper-decode", seed=1)
    eng.submit(InjectFault({"kind": "optical_flap", "target": "n20/l1-3--sp3/l2-7", "at_s": 20.0,
                            "period_s": 10, "duration_s": 200}))
    eng.advance(120.0)
    hist = eng.snapshot().history
    good, out = (s.key for s in faultconsole.CHARTS["good"].series)
    assert good == "goodput_tps"
    g, o = np.array(hist[good]), np.array(hist[out])
    assert len(g) >= 119 and g.max() > 0
    assert (g <= o + 1e-9).all(), f"goodput above all output at t = {np.array(hist['t'])[g > o + 1e-9]}"


# ---- 9: the node matrix keeps n00 at the top -----------------------------------------------------------

def _matrix_orientation(fig) -> str | None:
    """The matrix's y-axis autorange as a figure sets it."""
    return fig["layout"]["yaxis"].get("autorange")


def test_the_node_matrix_has_n00_at_the_top_however_the_page_was_reached(pages, twin_registry):
    """A direct load draws the matrix whole; arriving by the nav bar the first figure Plotly sees is
    the layout's, and later ticks redraw it: each of them sets n00 at the top (y reversed)."""
    layout = pages.traffic.layout()
    placeholder = next(c for c in _components(layout) if getattr(c, "id", None) == "tr-matrix").figure
    full = pages.traffic.tick(1, "shared", None)
    later = pages.traffic.tick(2, "shared", dict(full["cursor"], v=-1))         # a later tick
    assert [_matrix_orientation(f) for f in (placeholder, full["matrix"], later["matrix"])] == ["reversed"] * 3


# ---- 4: a fault's report is frozen when service is restored -----------------------------------------

def test_a_faults_report_is_frozen_at_restoration_and_outlives_the_rolling_history():
    """Goodput 100 before a fault at 100 s, 40 while it lasts (to 160 s), 90 after: the report frozen
    at restoration (and its "after" once that window has passed) still reads 100 → 40 → 90 when the
    rolling history has long scrolled past the fault."""
    from test_failures_read import _manager
    from twin.engine.faults import Fault
    t = list(range(1, 301))
    good = [100.0 if x <= 100 else 40.0 if x <= 160 else 90.0 for x in t]
    hist = {"t": t, "goodput_tps": good, "slo_attainment": [1.0] * 300}
    fm = _manager(hist, now=160.0)
    f = Fault(1, "npu_die", "n36/npu3/d1", 100.0, detect_s=60.0, recover_s=60.0)
    fm.faults = [f]
    fm.freeze(f)                      # service restored at 160 s
    fm.eng.env.now = 300.0
    fm.freeze(f)                      # the "after" window (as long as "before", 60 s) has passed
    late = list(range(1200, 2100))    # 18 simulated minutes on: the history holds none of it
    fm.eng.metrics.history = {"t": late, "goodput_tps": [70.0] * 900, "slo_attainment": [0.5] * 900}
    fm.eng.env.now = 2100.0
    r = fm.report()[0]
    assert (r["goodput_before"], r["goodput_during"], r["goodput_after"]) == (100.0, 40.0, 90.0)
    assert (r["slo_before"], r["slo_during"], r["slo_after"]) == (1.0, 1.0, 1.0)
