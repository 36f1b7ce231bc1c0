"""The Cloud page in headless Chromium: run a short day, see the timeline and the comparison, a bad
value gets a message, and no console error. Screenshot: test-artifacts/e2e/cloud.png."""
from __future__ import annotations

import pytest

from tests.test_e2e import wait_text

pytestmark = pytest.mark.e2e


def test_cloud_day_runs_and_compares_policies(browser_page, artifacts):
    pg = browser_page
    pg.goto(pg.base_url + "/cloud")
    wait_text(pg, "#cl-show", "copool")
    pg.fill("#cl-day", "30")
    pg.click("#cl-go")
    wait_text(pg, "#cl-msg", "Simulated a 30 s day", timeout=90_000)
    wait_text(pg, "#cl-table", "inference-only", timeout=20_000)
    pg.wait_for_selector("#cl-timeline .gtitle:has-text(\"switches\")")
    pg.fill("#cl-train_from_h", "3")                 # each value in range, together an empty window
    pg.fill("#cl-train_to_h", "3")
    pg.click("#cl-go")
    wait_text(pg, "#cl-msg", "Not run: .*must differ from train_from_h")
    pg.fill("#cl-train_to_h", "24")
    pg.fill("#cl-train_from_h", "0")
    pg.fill("#cl-pue", "1.1")                        # re-prices the kept day
    pg.press("#cl-pue", "Enter")
    wait_text(pg, "#cl-msg", "Re-priced the simulated day")
    pg.wait_for_timeout(1000)
    pg.screenshot(path=str(artifacts / "cloud.png"), full_page=True)
    assert pg.errors == [], pg.errors
