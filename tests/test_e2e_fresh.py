"""Issue 36, item 5: four browsers opening at once on a freshly started server (a class arriving) see
no console error, on the page each opened and then on every other page, all four moving through
them at the same time (in-app navigation, as the nav links and a following student move). The first requests used to race Dash's first-request setup: some were answered
while it ran, with a Content-Security-Policy of 4 of the 5 inline-script hashes that was then cached
for every response (a blocked script, "Cannot read properties of undefined (reading 'apply')")."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import _free_port

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("/", "/traffic", "/lessons", "/failures")       # one per browser, all requested at once
EVERY = ("/", "/topology", "/traffic", "/cache", "/tradeoffs", "/failures", "/lessons", "/validation", "/explorer",
         "/region", "/compare", "/cloud", "/glossary")     # every page of the nav, "More" included
GO = ("(p) => { window.history.pushState({}, '', p); "
      "window.dispatchEvent(new CustomEvent('_dashprivate_pushstate')); }")   # as dcc.Link navigates
DRAWN = "(p) => location.pathname === p && !!document.querySelector('#_pages_content > *')"


def _wait_for_port(port: int, proc, timeout_s: float = 90.0) -> None:
    """Until the server accepts connections (no HTTP request: that would set Dash up before the browsers)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"app.py exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"app.py did not listen on {port} within {timeout_s:g} s")


def test_four_browsers_at_once_on_a_fresh_server_see_no_console_error(chromium, artifacts):
    port = _free_port()
    log = (artifacts / "fresh-server.log").open("w")
    proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT)
    ctxs = []
    try:
        _wait_for_port(port, proc)
        pages = []
        for _path in PAGES:
            ctx = chromium.new_context(viewport={"width": 1440, "height": 900})
            ctxs.append(ctx)
            pg = ctx.new_page()
            pg.errors = []
            pg.on("console", lambda m, pg=pg: pg.errors.append(f"console.{m.type}: {m.text}")
                  if m.type == "error" else None)
            pg.on("pageerror", lambda e, pg=pg: pg.errors.append(f"pageerror: {e}"))
            pg.set_default_timeout(60_000)
            pages.append(pg)
        for pg, path in zip(pages, PAGES):          # navigations started together, not one after another
            pg.evaluate("(u) => { window.location.href = u; }", f"http://127.0.0.1:{port}{path}")
        for pg, path in zip(pages, PAGES):
            pg.wait_for_url(f"http://127.0.0.1:{port}{path}")
            pg.wait_for_load_state("load")
            pg.wait_for_selector("#ctl-status-state.state-live", timeout=60_000)   # live, in any language
        pages[0].wait_for_timeout(2000)             # the first polls and clientside callbacks run
        assert {path: pg.errors for pg, path in zip(pages, PAGES)} == {path: [] for path in PAGES}
        for k in range(1, len(EVERY)):              # then every page, the four browsers each on another one
            tour = [EVERY[(EVERY.index(path) + k) % len(EVERY)] for path in PAGES]
            for pg, path in zip(pages, tour):
                pg.evaluate(GO, path)
            for pg, path in zip(pages, tour):
                pg.wait_for_function(DRAWN, arg=path)
            pages[0].wait_for_timeout(1500)         # the page's first tick and its clientside callbacks
        seen = {path: pg.errors for pg, path in zip(pages, PAGES)}
        assert seen == {path: [] for path in PAGES}
    finally:
        for ctx in ctxs:
            ctx.close()
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
