"""End to end in headless Chromium (Debian /usr/bin/chromium via Playwright): every page opens without a
browser console error, the run controls work, a topology node can be picked, and the numbers move.
A screenshot of every page lands in test-artifacts/e2e/ (git-ignored)."""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.e2e

# (path, artifact name, selector whose text must become a real value)
PAGES = (
    ("/", "overview", "#ov-out-tps"),
    ("/topology", "topology", "#topo-crumbs"),
    ("/traffic", "traffic", "#tr-now"),
    ("/cache", "cache", "#ca-dram"),
    ("/tradeoffs", "tradeoffs", "#to-answer"),
    ("/validation", "validation", "#va-summary"),
)


def sim_time(pg) -> float:
    text = pg.inner_text("#ctl-status-time")
    m = re.search(r"t = ([\d.:]+)\s*(s|min|h)", text)
    assert m, text
    v, unit = m.groups()
    if unit == "s":
        return float(v)
    parts = [float(x) for x in v.split(":")]
    return (parts[0] * 60 + parts[1]) if unit == "min" else (parts[0] * 3600 + parts[1] * 60 + parts[2])


def wait_text(pg, selector: str, pattern: str, timeout: float = 15_000) -> None:
    pg.wait_for_function(
        "([sel, pat]) => { const el = document.querySelector(sel); return !!el && new RegExp(pat, 'i').test(el.innerText); }",
        arg=[selector, pattern], timeout=timeout)


def fill(pg, selector: str, value: str) -> None:
    pg.fill(selector, value)
    pg.press(selector, "Enter")       # debounced inputs send their value on Enter


def refused(pg, prefix: str, message: str) -> None:
    """A job page's Start is refused in one line under its form."""
    pg.click(f"#{prefix}-start")
    wait_text(pg, f"#{prefix}-msg", message)


def run_job(pg, prefix: str, queued: str, done: str, timeout: float = 120_000) -> None:
    """A job page's Start queues its job, whose progress then reads `done`."""
    pg.click(f"#{prefix}-start")
    wait_text(pg, f"#{prefix}-msg", queued)
    wait_text(pg, f"#{prefix}-progress-text", done, timeout=timeout)


def wait_live(pg) -> None:
    pg.wait_for_selector("#ctl-status-state.state-live", timeout=15_000)   # "live" in any language


TICKS = """() => { const s = window.store && window.store.getState();
  if (!s || !s.paths.strs['shell-tick']) return -1;
  return s.paths.strs['shell-tick'].reduce((node, key) => node[key], s.layout).props.n_intervals || 0; }"""
SETTLED = """(past) => { const s = window.store && window.store.getState();
  if (!s || !s.paths.strs['shell-tick']) return false;
  const tick = s.paths.strs['shell-tick'].reduce((node, key) => node[key], s.layout);
  return tick.props.n_intervals > past && Object.entries(s.callbacks)
    .every(([k, v]) => k === 'stored' || !Array.isArray(v) || !v.length); }"""


def ticks(pg) -> int:
    """How often the shell's clock has ticked since the page was loaded (-1: not drawn yet)."""
    return pg.evaluate(TICKS)


def settle(pg, timeout: float = 15_000, past: int = 0) -> None:
    """Until the shell's clock has ticked `past` + 1 times since the page was loaded (once by default;
    `past=ticks(pg)` after an in-app navigation: once since) and every callback the page asked for
    has answered (Dash's store holds none requested, waiting or running), then two frames drawn: the
    page shows what that tick sent. An event, where a fixed sleep waited 1.5-2.5 s and could be too
    short on a busy machine."""
    pg.wait_for_function(SETTLED, arg=past, timeout=timeout)
    pg.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


def cy_node_center(pg, node_id: str) -> tuple[float, float]:
    """Page coordinates of a cytoscape node (the instance cytoscape keeps on its container)."""
    pos = pg.evaluate(
        """(id) => { const el = document.getElementById('topo-cy'); const cy = el._cyreg.cy;
                     const n = cy.getElementById(id); if (n.empty()) return null;
                     const r = el.getBoundingClientRect(); const p = n.renderedPosition();
                     return [r.x + p.x, r.y + p.y]; }""", node_id)
    assert pos, f"{node_id} not drawn"
    return pos[0], pos[1]


def wait_sim(pg, pred, what: str, timeout_s: float = 15.0) -> float:
    """Poll the sim time shown in the status strip until `pred(t)` holds (a condition, not a sleep)."""
    pg.wait_for_function("() => /t = /.test(document.querySelector('#ctl-status-time').innerText)")
    for _ in range(int(timeout_s * 10)):
        t = sim_time(pg)
        if pred(t):
            return t
        pg.wait_for_timeout(100)
    raise AssertionError(f"sim time never {what} (last {sim_time(pg)})")


def until(pg, pred, what: str, timeout_s: float = 15.0) -> None:
    """Poll a server-side condition (a twin's params after a reset swaps engines) until it holds."""
    for _ in range(int(timeout_s * 10)):
        if pred():
            return
        pg.wait_for_timeout(100)
    raise AssertionError(f"never {what} within {timeout_s:g} s")


def wait_update(pg) -> None:
    """Wait until the status strip shows a newer sim time than now (the page got a live update)."""
    t0 = sim_time(pg)
    wait_sim(pg, lambda t: t > t0, f"passed {t0}")


def set_speed(pg, label: str) -> None:
    pg.click(f"#ctl-speed button:text-is('{label}')")
    wait_text(pg, "#ctl-status-speed", f"speed {re.escape(label)}")


def test_every_page_renders_live_without_console_errors(browser_page, artifacts):
    pg = browser_page
    for path, name, ready in PAGES:
        pg.goto(pg.base_url + path)
        wait_live(pg)
        wait_text(pg, ready, r"[0-9A-Za-z]")
        wait_update(pg)                      # a few live updates
        wait_update(pg)
        pg.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)
        assert pg.errors == [], f"{path}: {pg.errors}"
    assert "PASS" in pg.inner_text("#va-table")


def test_every_page_renders_under_the_content_security_policy(browser_page):
    """Dash's renderer, plotly, cytoscape and the clientside callbacks run under app.py's CSP (no
    'unsafe-eval', inline scripts by hash): a violation is reported as a console error."""
    import dash
    pg = browser_page
    pg.add_init_script("document.addEventListener('securitypolicyviolation', e => console.error("
                       "'CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI))")
    for path in [p["path"] for p in dash.page_registry.values()]:
        resp = pg.goto(pg.base_url + path)
        assert "frame-ancestors 'self'" in resp.headers["content-security-policy"]
        wait_live(pg)
        wait_update(pg)
        assert pg.errors == [], f"{path}: {pg.errors}"


def test_play_pause_speed_and_the_numbers_move(browser_page, live_server, artifacts):
    pg = browser_page
    _, reg = live_server
    pg.goto(pg.base_url + "/")
    wait_live(pg)
    set_speed(pg, "20×")
    t0, kpi0 = sim_time(pg), pg.inner_text("#ov-in-tps")
    wait_sim(pg, lambda t: t > t0 + 5, "5 s further")              # live at 20x
    pg.wait_for_function("(v) => document.querySelector('#ov-in-tps').innerText !== v", arg=kpi0)

    pg.click("#ctl-play")                                          # pause
    wait_text(pg, "#ctl-status-state", "paused")
    wait_text(pg, "#ctl-play", "Play")
    tw = reg.shared()
    for _ in range(20):                        # a chunk in flight when the pause came may still land
        frozen = tw.snapshot
        wait_sim(pg, lambda t: abs(t - frozen.sim_time) <= 1.0, "the paused twin's time")
        if tw.snapshot.version == frozen.version:
            break
    assert tw.snapshot.version == frozen.version        # the screen shows the twin, and it stays put

    pg.click("#ctl-play")                                          # play again
    wait_live(pg)
    set_speed(pg, "100×")
    assert "pill-active" in pg.get_attribute("#ctl-speed button:text-is('100×')", "class")
    t1 = sim_time(pg)
    wait_sim(pg, lambda t: t > t1 + 20, "20 s further")            # faster now
    wait_text(pg, "#ctl-log-last", "speed 100x")                   # shared action logged on screen
    pg.screenshot(path=str(artifacts / "overview-100x.png"), full_page=True)
    set_speed(pg, "1×")
    assert pg.errors == []


def test_topology_pick_a_node_and_an_element(browser_page, artifacts):
    pg = browser_page
    pg.goto(pg.base_url + "/topology")
    wait_live(pg)
    pg.wait_for_function("() => { const el = document.getElementById('topo-cy'); return el && el._cyreg && "
                         "el._cyreg.cy.nodes().length > 60; }")
    x, y = cy_node_center(pg, "n07")
    pg.mouse.click(x, y)
    wait_text(pg, "#topo-crumbs", "node n07")
    pg.wait_for_function("() => document.getElementById('topo-cy')._cyreg.cy.nodes('[kind = \"die\"]').length === 16")
    # live utilisation arrives for the drilled-down view
    pg.wait_for_function("() => document.getElementById('topo-cy')._cyreg.cy.edges()"
                         ".some(e => e.data('util') > 0)", timeout=20_000)
    x, y = cy_node_center(pg, "n07/npu3/d1")
    pg.mouse.click(x, y)
    wait_text(pg, "#topo-stats", "NPU die")
    wait_text(pg, "#topo-stats", "die busy")
    pg.screenshot(path=str(artifacts / "topology-node.png"), full_page=True)
    pg.click("#topo-back")
    wait_text(pg, "#topo-crumbs", "^Supernode$")
    pg.wait_for_function("() => document.getElementById('topo-cy')._cyreg.cy.nodes('[kind = \"subplane\"]')"
                         ".length === 7")
    x, y = cy_node_center(pg, "sp4")
    pg.mouse.click(x, y)
    wait_text(pg, "#topo-crumbs", "sub-plane 4")
    wait_text(pg, "#topo-stats", "UB sub-plane")                   # the drilled-into part's own numbers
    pg.wait_for_function("() => document.getElementById('topo-cy')._cyreg.cy.edges().length === 768")
    pg.screenshot(path=str(artifacts / "topology-subplane.png"), full_page=True)
    assert pg.errors == []


def test_bad_input_shows_a_message_and_keeps_the_twin(browser_page, live_server):
    pg = browser_page
    _, reg = live_server
    pg.goto(pg.base_url + "/cache")
    wait_live(pg)
    run = reg.shared().run
    pg.click("#ctl-setup summary")
    pg.wait_for_selector("#ctl-trace", state="visible")          # (is_visible does not wait for the opening)
    assert not pg.query_selector("input#ctl-trace")                 # a list, not a path field
    pg.set_input_files("#ctl-trace-upload input[type=file]",
                       files=[{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"hello,world\n1,2\n"}])
    wait_text(pg, "#ctl-msg", "Trace not accepted")
    assert "cannot tell the trace format" in pg.inner_text("#ctl-msg")
    assert "msg-error" in pg.get_attribute("#ctl-msg", "class")
    assert reg.shared().run == run and not reg.shared().paused
    wait_live(pg)
    pg.fill("#ctl-speed-custom", "5000")
    pg.press("#ctl-speed-custom", "Enter")
    wait_text(pg, "#ctl-msg", "allowed 1 to 1000")
    assert reg.shared().speed == 1.0
    assert pg.errors == []


def test_an_uploaded_trace_is_offered_and_replayed(browser_page, live_server, artifacts):
    from twin.workload import default_trace_path
    pg = browser_page
    _, reg = live_server
    rows = default_trace_path("mooncake_conversation").read_text().splitlines()[:300]
    pg.goto(pg.base_url + "/")
    wait_live(pg)
    run = reg.shared().run
    pg.click("#ctl-setup summary")
    pg.set_input_files("#ctl-trace-upload input[type=file]",
                       files=[{"name": "class-demo.jsonl", "mimeType": "application/json",
                               "buffer": ("\n".join(rows) + "\n").encode()}])
    wait_text(pg, "#ctl-msg", "300 requests")
    wait_text(pg, "#ctl-trace", r"class-demo\.jsonl \(uploaded\)")
    pg.screenshot(path=str(artifacts / "trace-upload.png"), full_page=False)
    pg.click("#ctl-reset")
    wait_text(pg, "#ctl-msg", r"trace class-demo\.jsonl \(uploaded\)")
    try:
        pg.wait_for_function("() => /live|paused/i.test(document.querySelector('#ctl-status-state').innerText)")
        until(pg, lambda: reg.shared().run == run + 1, "the reset's engine swapped in")
        assert len(reg.shared()._engine.source.workload) == 300
    finally:
        reg.shared().control("reset", {"scenario": "default", "trace": None})
    assert pg.errors == []


def test_private_sandbox_and_instructor_lock(browser_page, live_server):
    pg = browser_page
    _, reg = live_server
    shared = reg.shared()
    pg.goto(pg.base_url + "/")
    wait_live(pg)
    pg.click("#ctl-setup summary")
    pg.click("#ctl-sandbox")
    wait_text(pg, "#ctl-status-twin", "Private sandbox")
    pg.click("#ctl-play")                                          # pauses the sandbox only
    wait_text(pg, "#ctl-status-state", "paused")
    assert not shared.paused
    pg.click("#ctl-shared")
    wait_text(pg, "#ctl-status-twin", "Shared twin")
    wait_live(pg)

    reg.gate.token = "tok-e2e"                                     # lock the shared controls
    try:
        pg.reload()
        wait_text(pg, "#ctl-status-twin", "locked")
        wait_text(pg, "#ctl-lock-note", "locked by the instructor")
        assert pg.is_disabled("#ctl-play")
        pg.click("#ctl-setup summary")
        pg.fill("#ctl-token-input", "wrong")
        pg.click("#ctl-unlock")
        wait_text(pg, "#ctl-msg", "Wrong instructor token")
        pg.fill("#ctl-token-input", "tok-e2e")
        pg.click("#ctl-unlock")
        wait_text(pg, "#ctl-status-twin", "instructor")
        assert not pg.is_disabled("#ctl-play")
    finally:
        reg.gate.token = None
    assert pg.errors == []


def test_failures_inject_l2_now_and_watch_it_detected_and_recovered(browser_page, live_server, artifacts):
    pg = browser_page
    _, reg = live_server
    pg.goto(pg.base_url + "/failures")
    wait_live(pg)
    wait_text(pg, "#fl-table", "No faults yet|#")
    n0 = len(reg.shared().snapshot.faults)
    set_speed(pg, "100×")
    pg.fill("#fl-target", "sp2/l2-99")                              # bad id: refused, twin untouched
    pg.click("#fl-inject")
    wait_text(pg, "#fl-msg", "Not applied.*out of range|Not applied.*no l2")
    assert len(reg.shared().snapshot.faults) == n0
    pg.fill("#fl-target", "sp2/l2-5")
    pg.click("#fl-inject")
    wait_text(pg, "#fl-msg", "L2 UB switch lost: sp2/l2-5 injected now")
    row = "#fl-table tr:has-text('sp2/l2-5') >> nth=0"
    pg.wait_for_selector(row)
    wait_text(pg, "#fl-failed", "sp2/l2-5")                        # listed as failed while it lasts
    pg.wait_for_function("() => { const el = document.getElementById('fl-cy'); return el && el._cyreg && "
                         "el._cyreg.cy.getElementById('sp2').hasClass('npart'); }")   # and drawn so
    wait_text(pg, "#fl-table", r"60\.0 s")                          # detected after the policy's 60 s
    pg.wait_for_function(   # the charts grow and carry the marks (the 2 s band stays in view ~600 s)
        "() => { const gd = document.querySelector('#fl-tpot-chart .js-plotly-plot'); return gd && gd.data && "
        "gd.data[0].x.length > 20 && (gd.layout.shapes || []).some(s => s.type === 'rect'); }")
    # repaired: detect + 8 min. The default serves 111 req/s (CPU-bound near 80x real time on one core),
    # so under a loaded machine the 100x asked for can take ~40 s of wall time to reach 540 s.
    wait_text(pg, "#fl-table", r"540\.0 s", timeout=60_000)
    assert pg.locator(f"{row} >> td.lost-ok").count() == 1
    wait_text(pg, "#fl-events", "recover")
    pg.screenshot(path=str(artifacts / "failures.png"), full_page=True)
    set_speed(pg, "1×")
    assert pg.errors == []
