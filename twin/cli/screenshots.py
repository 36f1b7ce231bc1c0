"""Screenshots of the dashboard for the README (headless Debian Chromium through Playwright).

    python -m twin.cli.screenshots                    # starts the app, runs it a while, writes docs/screenshots/
    python -m twin.cli.screenshots --url http://127.0.0.1:8050 --out /tmp/shots
    python -m twin.cli.screenshots --only failures --warmup 0   # one page (the failures shot replays a demo)
    python -m twin.cli.screenshots --only failures-gray,topology-gray --warmup 0   # the gray fault, then its node

The shots are the pages' own (twin.cli.pagelist: each page's `shots`, as it registers itself).
Every page is shot at the laptop size (--width x --height) and again at a phone's 390x844 as
<name>-phone.png, so the README shows, and a reviewer can check, both layouts. The Explorer's and
the Region's laptop shots show a finished background job: they are the browser tests' (copied from
test-artifacts/e2e), not taken here.
"""
from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from twin.ui.faultview import DEMO_TITLES
from twin.cli import pagelist
from twin.cli.loadtest import CHROMIUM, CHROMIUM_ARGS, ROOT, free_port, set_speed, start_server

FROM_E2E = ("explorer", "maas")   # laptop shots of a finished job: the browser test's (test-artifacts/e2e), copied by hand
PHONE = (390, 844)       # a phone's viewport in CSS pixels (assets/60_phone.css applies below 700)

# the topology drawing has its live data merged in (some element coloured by how busy it is)
DRAWN = ("() => { const el = document.getElementById('topo-cy'); return !!(el && el._cyreg && "
         "el._cyreg.cy.elements('.u1, .u2, .u3, .u4, .u5').length); }")
DEMO_SHOT_AT_S = 300.0   # sim time of the failures shot: the demos strike at 120 s and recover by ~190 s


def _sim_time(pg) -> float:
    """Sim seconds from the status strip ("t = 12.3 s", "t = 4:10 min", "t = 1:02:03 h", or the same
    with the units in the viewer's language): the colons say which."""
    m = re.search(r"t = ([\d.:]+)", pg.inner_text("#ctl-status-time"))
    if not m:
        return 0.0
    seconds = 0.0
    for part in m.group(1).split(":"):
        seconds = seconds * 60 + float(part)
    return seconds


def _replay_demo(pg, base: str, demo: str) -> None:
    """Load a fault demo through its button and run it at 20x to DEMO_SHOT_AT_S."""
    pg.click(f"button.demo-btn:text-is('{DEMO_TITLES.get(demo, demo)}')")
    pg.mouse.move(0, 0)                      # no hover highlight in the picture
    pg.wait_for_function("() => /Demo/.test(document.getElementById('fl-demo-line').innerText)")
    set_speed(base, "20")
    end = time.monotonic() + 120
    while _sim_time(pg) < DEMO_SHOT_AT_S and time.monotonic() < end:
        pg.wait_for_timeout(500)
    set_speed(base, "1")
    pg.wait_for_timeout(2500)


def _gray_report(pg) -> None:
    """Open the gray fault's incident report and run its what-if (a background job) until it is in."""
    pg.locator("#fl-table").get_by_text("#1", exact=True).first.click()
    pg.get_by_text("Run the what-if").click()
    pg.wait_for_function("() => /What-if measured/.test(document.getElementById('fl-msg').innerText)",
                         timeout=300_000)
    pg.wait_for_timeout(2000)
    pg.evaluate("window.scrollTo(0, 0)")         # the opened report scrolled the page: a full-page shot starts at the top
    pg.wait_for_timeout(500)


AFTER_DEMO = {"failures-gray": _gray_report}     # what a laptop shot does once its demo is replayed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url")
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    ap.add_argument("--warmup", type=float, default=40.0, help="wall seconds to run at --speed first")
    ap.add_argument("--speed", default="20")
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=1000)
    ap.add_argument("--only", help="comma-separated shot names (e.g. failures)")
    a = ap.parse_args(argv)
    only = set(a.only.split(",")) if a.only else None
    shots = pagelist.shots()     # each page's own, as it registers itself (twin.cli.pagelist)
    from playwright.sync_api import sync_playwright   # lazy: an optional tool, only when shots are taken
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    proc, base = None, a.url
    if not base:
        port = free_port()
        proc = start_server(port, 4)
        base = f"http://127.0.0.1:{port}"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            pg = browser.new_page(viewport={"width": a.width, "height": a.height})
            pg.goto(base + "/")
            pg.wait_for_timeout(1500)
            set_speed(base, a.speed)
            time.sleep(a.warmup)
            for (w, h), suffix in (((a.width, a.height), ""), (PHONE, "-phone")):
                pg.set_viewport_size({"width": w, "height": h})
                for name, path, demo in shots:
                    if (only and name not in only) or (name in FROM_E2E and not suffix):
                        continue
                    pg.goto(base + path)
                    pg.wait_for_timeout(3500)
                    if path.startswith("/topology"):     # a loaded machine draws later: wait for the live colours
                        pg.wait_for_function(DRAWN, timeout=30_000)
                    if demo and not suffix:          # the demo is replayed once; the phone shot shows its table
                        _replay_demo(pg, base, demo)
                        AFTER_DEMO.get(name, lambda _pg: None)(pg)
                    pg.screenshot(path=str(out / f"{name}{suffix}.png"), full_page=bool(demo))
                    print(out / f"{name}{suffix}.png")
            set_speed(base, "1")
            browser.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
