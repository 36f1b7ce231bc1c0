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


def _unit(nodeid: str) -> str:
    """A test's work unit under pytest-xdist: its module, or one unit for every browser (test_e2e*) module."""
    path = nodeid.split("::")[0]
    return BROWSER_GROUP if Path(path).name.startswith("test_e2e") else path


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """With `--dist loadscope` (pytest.ini) a module is one work unit, so its module-scoped fixtures are
    built once, and the browser modules are one unit more, so one worker holds the session's live
    server and Chromium and no two browsers compete for the cores. (xdist 3.8's own `loadgroup` does
    not group under pytest 9, which keeps a node's id in `_id`, not the `_nodeid` xdist rewrites.)"""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Units(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)
    return Units(config, log)


def pytest_collection_modifyitems(config, items):
    """The browser unit and the modules with slow tests first (`--no-loadscope-reorder` keeps this
    order): the longest units start while the other worker works through the short ones."""
    slow = {_unit(i.nodeid) for i in items if i.get_closest_marker("slow")}
    items.sort(key=lambda i: (_unit(i.nodeid) != BROWSER_GROUP, _unit(i.nodeid) not in slow))   # stable


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
