"""Screenshots of the dashboard for the README (headless Debian Chromium through Playwright).

    python -m twin.ui.screenshots                    # starts the app, runs it a while, writes docs/screenshots/
    python -m twin.ui.screenshots --url http://127.0.0.1:8050 --out /tmp/shots
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from .loadtest import CHROMIUM, CHROMIUM_ARGS, ROOT, free_port, set_speed, start_gunicorn

SHOTS = (("overview", "/", None), ("topology", "/topology", None), ("topology-node", "/topology?view=n05", None),
         ("traffic", "/traffic", None), ("cache", "/cache", None), ("tradeoffs", "/tradeoffs", None),
         ("validation", "/validation", None))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url")
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    ap.add_argument("--warmup", type=float, default=40.0, help="wall seconds to run at --speed first")
    ap.add_argument("--speed", default="20")
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=1000)
    a = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    proc, base = None, a.url
    if not base:
        port = free_port()
        proc = start_gunicorn(port, 4)
        base = f"http://127.0.0.1:{port}"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            pg = browser.new_page(viewport={"width": a.width, "height": a.height})
            pg.goto(base + "/")
            pg.wait_for_timeout(1500)
            set_speed(base, a.speed)
            time.sleep(a.warmup)
            for name, path, _ in SHOTS:
                pg.goto(base + path)
                pg.wait_for_timeout(3500)
                pg.screenshot(path=str(out / f"{name}.png"), full_page=False)
                print(out / f"{name}.png")
            set_speed(base, "1")
            browser.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
