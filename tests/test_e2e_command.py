"""Issue 25 item 2 in headless Chromium: a command the engine refuses (a fault on a part it finds
already down) shows its refusal, with the engine's reason in the viewer's language, on the page that
sent it; an accepted one says "applied at t = ..." only once the engine took it."""
from __future__ import annotations

import pytest

from test_e2e import wait_live, wait_text

pytestmark = pytest.mark.e2e


def test_a_fault_on_a_part_already_down_shows_the_engines_refusal_on_the_failures_page(
        browser_page, live_server, monkeypatch, artifacts):
    from twin.ui import answer
    monkeypatch.setattr(answer, "WAIT_S", 0.0)     # the answer comes on the page's next poll, as under load
    pg = browser_page
    tw = live_server[1].shared()
    node = tw.send("fault", {"kind": "node", "target": "n20"})       # down for detection + repair (~10 min)
    assert node.wait(10) and node.accepted, node
    for _ in range(100):                     # the snapshot with it is published right after the answer
        if any(f["target"] == "n20" for f in tw.snapshot.faults):
            break
        pg.wait_for_timeout(50)
    n_faults = len(tw.snapshot.faults)
    try:
        pg.goto(pg.base_url + "/failures?lang=zh&kind=npu_die&target=n20/npu3/d1")
        wait_live(pg)
        pg.wait_for_function("() => document.querySelector('#fl-target').value === 'n20/npu3/d1'")
        pg.click("#fl-inject")
        # the refusal, from the engine's thread, with its reason in Chinese, on this page's line
        wait_text(pg, "#fl-msg", r"未应用：故障目标 = 'n20/npu3/d1' 已经宕机：故障 #\d+（node）自 t = [\d.,]+ 秒起使其宕机，尚未修复")
        assert "msg-error" in pg.get_attribute("#fl-msg", "class")
        pg.screenshot(path=str(artifacts / "failures-refused-zh.png"))
        assert len(tw.snapshot.faults) == n_faults                       # nothing was injected
        pg.fill("#fl-target", "n21/npu3/d1")                             # a part that is up: accepted
        pg.click("#fl-inject")
        wait_text(pg, "#fl-msg", r"n21/npu3/d1 .*已在 t = [\d.,]+ 秒应用到共享孪生")
        assert "msg-ok" in pg.get_attribute("#fl-msg", "class")
        assert any(f["target"] == "n21/npu3/d1" for f in tw.snapshot.faults)
        assert pg.errors == [], pg.errors[:2]
    finally:
        tw.control("reset", {"scenario": "default"})                     # the next test's twin has no faults
