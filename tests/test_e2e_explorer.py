"""Explorer page end to end in headless Chromium: a bounded engine sweep runs in the background, its
progress reaches "done", the frontier is drawn, a bad range gets a one-line message, no console error.
The screenshot lands in test-artifacts/e2e/explorer.png."""
from __future__ import annotations

import pytest

from tests.test_e2e import fill, refused, run_job, wait_live, wait_text

pytestmark = pytest.mark.e2e



def test_explorer_sweep_in_the_background(browser_page, artifacts, monkeypatch, tmp_path):
    monkeypatch.setenv("TWIN_SWEEP_CACHE", str(tmp_path))
    pg = browser_page
    pg.goto(pg.base_url + "/explorer")
    pg.wait_for_selector("#ex-start")
    fill(pg, "#ex-v1", "0.9:0.1:0.2")
    refused(pg, "ex", "inverted range")
    fill(pg, "#ex-v1", "0.3,0.6,0.9,1.2")
    fill(pg, "#ex-seeds", "2")
    fill(pg, "#ex-dur", "10")
    run_job(pg, "ex", "queued", "16 of 16 runs — done", timeout=120_000)
    wait_text(pg, "#ex-msg", "8 points")
    n = pg.evaluate("() => document.getElementById('ex-pareto').querySelectorAll('.scatterlayer .trace').length")
    assert n == 4                                 # mtp=True, mtp=False, frontier, paper
    pg.hover("#ex-pareto")
    assert pg.query_selector("#ex-pareto .modebar-btn[data-title*='png' i]")    # export as PNG
    wait_live(pg)
    pg.evaluate("() => window.scrollTo(0, 0)")        # hovering scrolled: a full-page shot then shifts the sticky header
    pg.screenshot(path=str(artifacts / "explorer.png"), full_page=True)
    assert pg.errors == [], pg.errors


def test_compare_page_shows_five_systems_and_exports(browser_page, artifacts):
    pg = browser_page
    pg.goto(pg.base_url + "/compare")
    wait_text(pg, "#cmp-table", "CloudMatrix384")     # systems by their catalog names
    assert pg.evaluate("() => document.querySelectorAll('#cmp-table tbody tr').length") == 5
    for chart in ("cmp-curves", "cmp-bars", "cmp-ep"):
        pg.wait_for_selector(f"#{chart} .main-svg")
    with pg.expect_download() as dl:
        pg.click("#cmp-csv")
    assert dl.value.suggested_filename == "compare.csv"
    pg.screenshot(path=str(artifacts / "compare.png"), full_page=True)
    assert pg.errors == [], pg.errors


def test_compare_puts_a_what_if_beside_the_baseline(browser_page, monkeypatch, tmp_path):
    """Pick a what-if, measure it in the job pool, read its engine figures beside the baseline's. The
    job's process forks from a forkserver an earlier job started; it still caches in this test's
    TWIN_SWEEP_CACHE, where the page reads (twin.live.jobs gives a job its asker's environment)."""
    monkeypatch.setenv("TWIN_SWEEP_CACHE", str(tmp_path))
    pg = browser_page
    pg.goto(pg.base_url + "/compare")
    pg.click("#cmp-with")
    pg.keyboard.type("cloudmatrix-unified")
    pg.keyboard.press("Enter")
    wait_text(pg, "#cmp-beside", "not measured yet")
    pg.click("#cmp-measure")
    wait_text(pg, "#cmp-msg", "queued")
    wait_text(pg, "#cmp-beside-supports", "cloudmatrix-unified moves KV in", timeout=180_000)
    assert pg.evaluate("() => document.querySelectorAll('#cmp-beside-table tbody tr').length") == 2
    assert pg.errors == [], pg.errors
