"""At 1440x900 a chart is in the Overview's first screen (issue 36, item 15): the cards no longer fill
it (14 cards in three rows, the third half empty, pushed every chart below the fold).
Screenshot: test-artifacts/e2e/overview-1440x900.png."""
from __future__ import annotations

import pytest

from test_e2e import settle

pytestmark = pytest.mark.e2e


def test_a_chart_is_in_the_overviews_first_screen_at_1440x900(browser_page, artifacts):
    pg = browser_page
    pg.set_viewport_size({"width": 1440, "height": 900})
    pg.goto(pg.base_url + "/")
    pg.wait_for_selector(".main h2", state="attached", timeout=60_000)
    settle(pg)                               # the first tick has drawn the cards and charts
    pg.screenshot(path=artifacts / "overview-1440x900.png")      # beside the others, not a shared /tmp
    box = pg.locator("#ov-thr-chart").bounding_box()
    assert box is not None and box["y"] + box["height"] / 2 < 900, box     # at least half the chart shows
    rows = pg.evaluate("""() => new Set([...document.querySelectorAll('.kpi-grid > .kpi')]
                                        .map(e => Math.round(e.getBoundingClientRect().top))).size""")
    assert rows <= 2                                                       # 14 cards in two full rows
    assert not pg.errors, pg.errors
