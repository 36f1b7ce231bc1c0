"""What the room sees of faults (issue 23), in headless Chromium at a laptop's 1440x900: the fault
table fits, the chart labels are words that do not overlap, a timeline line opens its fault's report,
a chart's PNG is named and titled after the run, and the whole-supernode drawing marks a lost L2
switch and a dead optical link. Screenshots: test-artifacts/e2e/fault-screens-*.png."""
from __future__ import annotations

import re

import pytest

from test_e2e import wait_live, wait_text

pytestmark = pytest.mark.e2e

FAULTS = ({"kind": "l2", "target": "sp3/l2-5"}, {"kind": "optical_link", "target": "n07/l1-2--sp2/l2-4"})

# label boxes per chart and the pairs of them that overlap
LABELS = """() => [...document.querySelectorAll('.js-plotly-plot')].map(gd => {
  const boxes = [...gd.querySelectorAll('g.annotation')].map(a => ({text: a.textContent, r: a.getBoundingClientRect()}));
  const over = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const p = boxes[i].r, q = boxes[j].r;
    if (Math.min(p.right, q.right) - Math.max(p.left, q.left) > 1 && Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top) > 1)
      over.push([boxes[i].text, boxes[j].text]);
  }
  return {texts: boxes.map(b => b.text), over};
})"""


def test_faults_read_right_on_failures_and_topology(browser_page, live_server, artifacts):
    pg = browser_page
    _, reg = live_server
    pg.set_viewport_size({"width": 1440, "height": 900})
    tw = reg.shared()
    run = tw.run
    tw.control("reset", {"scenario": "default", "deployment": None, "trace": None, "seed": 0})   # no older faults
    for _ in range(300):
        if tw.run != run and tw.snapshot.sim_time > 1:
            break
        pg.wait_for_timeout(100)
    for spec in FAULTS:
        tw.control("fault", spec)                      # struck now (checked once, at the edge)
    pg.goto(pg.base_url + "/failures")
    wait_live(pg)
    wait_text(pg, "#fl-table", "sp3/l2-5")
    wait_text(pg, "#fl-table", "n07/l1-2--sp2/l2-4")
    pg.wait_for_function("() => document.querySelectorAll('#fl-tpot-chart g.annotation').length >= 2")
    pg.mouse.move(0, 0)
    pg.screenshot(path=str(artifacts / "fault-screens-failures.png"), full_page=True)

    # the table fits: no sideways scroll at 1440 px, its state column in view
    fit = pg.evaluate("""() => { const w = document.querySelector('#fl-table .tbl-wrap');
        const th = [...w.querySelectorAll('th')].pop().getBoundingClientRect();
        return [w.scrollWidth, w.clientWidth, th.right, document.documentElement.clientWidth]; }""")
    assert fit[0] <= fit[1] and fit[2] <= fit[3], fit

    # chart labels: short words, none over another
    for chart in pg.evaluate(LABELS):
        assert not chart["over"], chart
        assert all(re.fullmatch(r"#\d+ [^_]+", t) for t in chart["texts"]), chart["texts"]
    assert any("L2 lost" in t for c in pg.evaluate(LABELS) for t in c["texts"])

    # a timeline line opens its fault's report
    link = pg.locator("#fl-events button.linkish").first
    fid = re.search(r"\d+", link.inner_text()).group(0)
    link.click()
    wait_text(pg, "#fl-report", f"Fault #{fid}:")
    assert "requests affected / requeued / recomputed / lost" in pg.inner_text("#fl-report")

    # a chart's PNG: named and titled after the run
    pg.hover("#fl-tpot-chart")
    with pg.expect_download() as dl:
        pg.click("#fl-tpot-chart .modebar-btn")
    snap = tw.snapshot
    name = dl.value.suggested_filename
    assert re.fullmatch(rf"failures-{snap.scenario}-{snap.deployment}-seed{snap.seed}-t\d+s\.png", name), name
    title = pg.evaluate("""() => { const gd = document.querySelector('#fl-tpot-chart .js-plotly-plot');
        return window.twinExport.figure(gd, window.twinFacts, 'Failures').layout.title.text; }""")
    t = int(re.search(r"-t(\d+)s\.png", name).group(1))
    assert "Time per output token" in title and f"seed {snap.seed}" in title and snap.deployment in title
    assert abs(int(re.search(r"t = (\d+) s", title).group(1)) - t) <= 5

    # the whole supernode marks both faults on their groups
    pg.goto(pg.base_url + "/topology")
    wait_live(pg)
    pg.wait_for_function("() => { const el = document.getElementById('topo-cy'); return el && el._cyreg && "
                         "el._cyreg.cy.getElementById('sp3').hasClass('npart'); }")
    marks = pg.evaluate("""() => { const cy = document.getElementById('topo-cy')._cyreg.cy;
        return ['sp3', 'sp2', 'n07', 'sp0'].map(i => [cy.getElementById(i).hasClass('npart'),
                                                     cy.getElementById(i).style('label')]); }""")
    assert marks[0] == [True, "UB plane 3 ✕1"] and marks[1] == [True, "UB plane 2 ✕1"]
    assert marks[2] == [True, "n07 ✕1"] and marks[3] == [False, "UB plane 0"]
    pg.mouse.move(0, 0)
    pg.screenshot(path=str(artifacts / "fault-screens-topology.png"))
    assert pg.errors == [], pg.errors[:3]
