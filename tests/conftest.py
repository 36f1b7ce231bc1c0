"""Shared fixtures. Dashboard fixtures: the Dash app, a fresh session registry, a live server and a
headless Chromium (Debian's /usr/bin/chromium through Playwright; never a browser download)."""
from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import sys
import threading
from pathlib import Path

import pytest

_NEEDED = ("simpy", "dash", "dash_cytoscape", "numpy", "pandas", "networkx", "pydantic", "scipy")
_MISSING = [m for m in _NEEDED if importlib.util.find_spec(m) is None]

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CHROMIUM = os.environ.get("TWIN_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = ROOT / "test-artifacts"


def pytest_configure(config):
    if _MISSING:   # say what to do instead of failing collection module by module
        pytest.exit(f"this Python lacks {', '.join(_MISSING)}: run `make test`, which installs "
                    f"requirements.txt into .venv and runs the tests there", returncode=4)
    config.addinivalue_line("markers", "e2e: end-to-end tests in headless Chromium")


BROWSER_GROUP = "browser"


@pytest.hookimpl(tryfirst=True)          # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config, items):
    """Work units for pytest-xdist (`--dist loadgroup`, pytest.ini): a test module is one unit, so its
    module-scoped fixtures are built once; every browser test is in one unit, so one worker holds the
    session's live server and Chromium and no two browsers compete for the cores. The browser unit and
    the modules with slow tests are handed out first (`--no-loadscope-reorder` keeps this order): the
    longest units start while the other worker works through the short ones."""
    def unit(item):
        return BROWSER_GROUP if item.get_closest_marker("e2e") else item.nodeid.split("::")[0]
    slow = {unit(i) for i in items if i.get_closest_marker("slow")}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(unit(item)))
    items.sort(key=lambda i: (unit(i) != BROWSER_GROUP, unit(i) not in slow))   # stable: module order kept


@pytest.fixture(scope="session")
def dash_app():
    """The Dash app module (pages register on import, so import it before any page module)."""
    import app as app_module
    from twin.live.budget import RateLimit
    app_module.page_loads = RateLimit(10**6)   # every test client and test browser is 127.0.0.1
    return app_module


@pytest.fixture
def twin_registry(dash_app):
    """A fresh session registry with a fast loop; its twins are stopped afterwards."""
    from twin.live import session
    reg = session.configure(wall_dt=0.05, max_sandboxes=2, ttl_s=600, token=None)
    yield reg
    reg.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def live_server(dash_app):
    """The app served by werkzeug in a thread on a free port; yields its base URL."""
    import logging

    from werkzeug.serving import make_server

    from twin.live import session
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    reg = session.configure(max_sandboxes=4, per_address=4, token=None)     # every browser here is 127.0.0.1
    reg.shared()
    srv = make_server("127.0.0.1", _free_port(), dash_app.server, threaded=True)
    th = threading.Thread(target=srv.serve_forever, name="e2e-server", daemon=True)
    th.start()
    url = f"http://127.0.0.1:{srv.server_port}"
    yield url, reg
    srv.shutdown()
    reg.shutdown()


@pytest.fixture(scope="session")
def chromium():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium chromium-driver)")
    sync_api = pytest.importorskip("playwright.sync_api")
    pw = sync_api.sync_playwright().start()
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
    yield browser
    browser.close()
    pw.stop()


@pytest.fixture
def browser_page(chromium, live_server):
    """A fresh browser page that records console errors and uncaught exceptions in page.errors."""
    from twin.live import session
    url, reg = live_server
    session._registry = reg          # the server's registry, even if a callback test replaced it
    ctx = chromium.new_context(viewport={"width": 1600, "height": 1000})
    pg = ctx.new_page()
    pg.errors = []
    pg.on("console", lambda m: pg.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.errors.append(f"pageerror: {e}"))
    pg.base_url = url
    pg.set_default_timeout(15_000)
    yield pg
    ctx.close()
    for key in reg.sandboxes():     # a test's sandboxes (links open one) end with it
        reg.close(key, reg.get(key).owner)


@pytest.fixture(scope="module")
def dask_address():
    """A local Dask cluster (two worker processes on loopback) for the module's tests; its scheduler
    address. Module-scoped: its workers do not outlive the tests that use them."""
    from distributed import LocalCluster
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=None)
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    out = ARTIFACTS / "e2e"
    out.mkdir(parents=True, exist_ok=True)
    return out



def run_coro(coro):
    """asyncio.run in a thread of its own: Playwright's sync API (the e2e tests' session-wide browser)
    keeps an event loop running in the main thread, where asyncio.run refuses to start."""
    out = {}

    def target():
        try:
            out["value"] = asyncio.run(coro)
        except BaseException as exc:      # re-raised in the caller's thread
            out["error"] = exc
    th = threading.Thread(target=target)
    th.start()
    th.join()
    if "error" in out:
        raise out["error"]
    return out["value"]
