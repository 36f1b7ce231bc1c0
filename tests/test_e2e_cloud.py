"""The Cloud page in headless Chromium: the co-pool day loaded from a link (`?scenario=copool-day`)
runs live on the shared twin and its timeline grows; a policy change goes through the twin's
action path; a bad knob gets a message; a short comparison runs and re-prices; no console error.
Screenshot: test-artifacts/e2e/cloud.png."""
from __future__ import annotations

import pytest

from tests.test_e2e import wait_live, wait_text

pytestmark = pytest.mark.e2e


def test_cloud_day_live_policy_change_and_comparison(browser_page, artifacts):
    pg = browser_page
    pg.goto(pg.base_url + "/cloud?scenario=copool-day")
    wait_live(pg)
    wait_text(pg, "#cl-live", "policy copool", timeout=30_000)
    pg.wait_for_selector("#cl-timeline .gtitle:has-text(\"switches\")")
    pg.fill("#cl-dedicated_prefill_groups", "17")       # beyond the pool: refused by the twin's check
    pg.click("#cl-apply")
    wait_text(pg, "#cl-msg", "Not applied: .*dedicated_prefill_groups = 17: allowed 0..16")
    pg.fill("#cl-dedicated_prefill_groups", "6")
    pg.click("#cl-policy")
    pg.get_by_role("option", name="dedicated split (dedicated)", exact=True).click()
    pg.click("#cl-apply")
    wait_text(pg, "#cl-msg", "co-pool policy=dedicated")
    wait_text(pg, "#cl-live", "policy dedicated", timeout=20_000)
    pg.fill("#cl-day", "30")
    pg.click("#cl-go")
    wait_text(pg, "#cl-msg", "A 30 s day under 3 policies and 3 seeds is queued as a background job")
    wait_text(pg, "#cl-table", "inference-only", timeout=180_000)
    wait_text(pg, "#cl-verdict", "Over 3 seeds")
    pg.fill("#cl-pue", "1.1")                        # re-prices the kept day
    pg.press("#cl-pue", "Enter")
    wait_text(pg, "#cl-msg", "Re-priced the simulated day")
    pg.click("a.nav-link[href='/']")                 # away and back: the comparison is still there
    pg.wait_for_selector("#ov-out-tps")
    pg.goto(pg.base_url + "/cloud")
    wait_text(pg, "#cl-table", "inference-only", timeout=20_000)
    pg.wait_for_timeout(1000)
    pg.screenshot(path=str(artifacts / "cloud.png"), full_page=True)
    assert pg.errors == [], pg.errors
