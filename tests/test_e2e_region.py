"""Region page end to end in headless Chromium: a bad failure time, a bad load and a bad link failure
time are each refused in one line, a 10-s cm384-pair at half the scenario's load fetching prefixes,
losing supernode 1 and the link between supernodes 0 and 1 from 2 s for 2 s runs as a background job to
"done" with nothing lost at half the arrival rate, the link failure is listed as applied with the links'
figures, its table shows both supernodes, supernode 1's figures open, and its link opens a private
sandbox on the Overview; no console error. The screenshot lands in test-artifacts/e2e/region.png."""
from __future__ import annotations

import pytest

from tests.test_e2e import fill, refused, run_job, until, wait_text
from tests.test_e2e_cluster import pick
from twin.region.pagejob import region_rate
from twin.ui.components import fmt

pytestmark = pytest.mark.e2e



def test_region_run_and_drill_into_supernode_1(browser_page, artifacts, live_server):
    pg = browser_page
    _, reg = live_server
    pg.goto(pg.base_url + "/region")
    pg.wait_for_selector("#rg-start")
    pick(pg, "rg-name", "cm384-pair — 2 × cloudmatrix-infer-paper")
    fill(pg, "#rg-dur", "10")
    # the form's failure at 15 s is past 10 s
    refused(pg, "rg", "Failure time: allowed 0 to less than the 10 simulated s")
    fill(pg, "#rg-at", "5")
    fill(pg, "#rg-load", "3")
    refused(pg, "rg", "Load: allowed 0.1 to 2, a fraction of the region's capacity")
    fill(pg, "#rg-load", "0.45")                               # half the scenario's 0.9: half its arrival rate
    pg.check("#rg-reuse input[value=fetch]")                   # prefixes cross the inter-supernode link
    pick(pg, "rg-link-a", "supernode 0")                       # the link 0 - 1 (the other end's default is 1)
    wait_text(pg, "#rg-link-b", "^supernode 1$")
    fill(pg, "#rg-link-at", "10")
    fill(pg, "#rg-link-for", "2")
    # down at 10 s is not before the arrivals end
    refused(pg, "rg", "Link failure time: allowed 0 to less than the 10 simulated s of arrivals")
    fill(pg, "#rg-link-at", "2")
    run_job(pg, "rg", "queued", "10 of 10 windows — done", timeout=120_000)
    wait_text(pg, "#rg-msg", "2 supernodes, 0 requests lost")
    wait_text(pg, "#rg-audit", "lost 0")
    wait_text(pg, "#rg-what", f"at {fmt(region_rate('cm384-pair', 0.45))} req/s")
    wait_text(pg, "#rg-links", "Link failure: supernode 0 – supernode 1 down at 2 s, up again at 4 s \\(asked: at 2 s "
                               "for 2 s")
    wait_text(pg, "#rg-links", "Inter-supernode links, all together \\(the region model keeps no per-link figures\\): "
                               "[0-9,]+ prefix fetches")
    assert pg.evaluate("() => document.querySelectorAll('#rg-table tbody tr').length") == 2
    wait_text(pg, "#rg-table tbody tr.row-failed", "failed at 5 s")
    pg.wait_for_selector("#rg-fig .main-svg")
    wait_text(pg, "#rg-detail", "Supernode 1: cloudmatrix-infer-paper on cloudmatrix384")   # the failed one, first
    wait_text(pg, "#rg-detail-table", "in flight \\(a failed one's: moved away\\)")
    pg.screenshot(path=str(artifacts / "region.png"), full_page=True)
    pg.click("#rg-open")
    wait_text(pg, "#ctl-msg", "applied to your sandbox")
    (key,) = reg.sandboxes()
    until(pg, lambda: reg.get(key).params.deployment == "cloudmatrix-infer-paper", "the link's reset swapped in")
    assert pg.errors == [], pg.errors
