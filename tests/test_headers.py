"""Issue 22, item 5: security headers suited to Dash, no versions in `Server`, and a framework error
(a bad /_dash-component-suites/ path) answered with a plain 404 and at most one rate-limited log line,
never a traceback to the viewer or a flood to the log."""
from __future__ import annotations

import logging
import threading

# ---- 5. headers; framework errors are one bounded log line, never a traceback -----------------------

def test_responses_carry_security_headers(dash_app):
    r = dash_app.server.test_client().get("/")
    csp = r.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'self'" in csp and "object-src 'none'" in csp
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert r.headers["Referrer-Policy"] == "same-origin"
    assert "Server" not in r.headers              # the server's own header is set without versions


def test_the_dev_server_names_no_versions(dash_app):
    import urllib.request
    from werkzeug.serving import make_server
    srv = make_server("127.0.0.1", 0, dash_app.server, threaded=True, request_handler=dash_app.QuietHandler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{srv.server_port}/_favicon.ico") as r:
            assert r.headers["Server"] == "CloudMatrix Twin"
    finally:
        srv.shutdown()


def test_a_bad_component_suites_path_gets_one_bounded_log_line(dash_app, caplog):
    caplog.set_level(logging.INFO)
    c = dash_app.server.test_client()
    for i in range(50):
        r = c.get(f"/_dash-component-suites/nopkg{i}/x.js" if i % 2 else "/_dash-component-suites/dash/../../x.js")
        body = r.get_data(as_text=True)
        assert r.status_code == 404 and "Traceback" not in body and "site-packages" not in body
        assert "registered" not in body
    ours = [r for r in caplog.records if r.name == "app"]
    assert 1 <= len(ours) <= dash_app.ERROR_LINES_PER_MIN + 1
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in ours)
    assert "suppressed" in ours[-1].getMessage()


# ---- issue 36, item 5: tabs arriving at once at a fresh server all get the whole CSP --------------------

RACE = r"""
import json, threading, time
import app
slow = app.app.clientside_callback            # the pages router registers its inline script with this, on
def late(*a, **k):                            # the first request: made slow, the others arrive meanwhile
    time.sleep(0.5)
    return slow(*a, **k)
app.app.clientside_callback = late
got = []
def get():
    r = app.server.test_client().get("/")
    got.append((r.status_code, r.headers["Content-Security-Policy"]))
first = threading.Thread(target=get)
first.start()
time.sleep(0.2)
rest = [threading.Thread(target=get) for _ in range(3)]
[t.start() for t in rest]
[t.join() for t in [first, *rest]]
get()
print(json.dumps({"got": got, "hashes": app.app.csp_hashes()}))
"""


def test_tabs_arriving_at_once_at_a_fresh_server_all_get_every_script_hash():
    """Four tabs on a freshly started server (a fresh process): the first request sets Dash up (the
    pages router adds the fifth inline script); the other three used to be answered meanwhile with a
    CSP of four hashes, cached for every later response (a blocked script, console errors)."""
    import json
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", RACE], cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(res["hashes"]) == 5
    assert len(res["got"]) == 5
    for status, csp in res["got"]:
        assert status == 200
        script_src = next(d for d in csp.split("; ") if d.startswith("script-src"))
        assert sorted(script_src.split()[2:]) == sorted(res["hashes"])
# ---- issue 34: unknown paths, page loads per address, no versions in the page ----------------------

def test_a_path_that_is_no_page_gets_a_small_404_naming_the_pages(dash_app):
    c = dash_app.server.test_client()
    assert c.get("/topology").status_code == 200 and c.get("/").status_code == 200
    for path in ("/nope", "/wp-login.php", "/topology/x", "/" + "a" * 5000, "/.env"):
        r = c.get(path)
        body = r.get_data(as_text=True)
        assert r.status_code == 404 and len(r.data) < 600, path
        assert "No page at" in body and "/topology" in body and "_dash-config" not in body
        assert r.headers["X-Content-Type-Options"] == "nosniff" and r.mimetype == "text/plain"


def test_page_loads_are_budgeted_per_address(dash_app, monkeypatch):
    from twin.live.budget import RateLimit
    monkeypatch.setattr(dash_app, "page_loads", RateLimit(dash_app.PAGE_LOADS_PER_MIN_ADDRESS))
    c = dash_app.server.test_client()
    at = lambda addr, path="/": c.get(path, environ_base={"REMOTE_ADDR": addr})
    assert all(at("203.0.113.9", p).status_code == 200
               for p in ["/", "/traffic"] * (dash_app.PAGE_LOADS_PER_MIN_ADDRESS // 2))
    r = at("203.0.113.9")
    assert r.status_code == 429 and 1 <= int(r.headers["Retry-After"]) <= 60
    assert "at most 60 a minute" in r.get_data(as_text=True) and len(r.data) < 300
    assert at("198.51.100.7").status_code == 200                     # another address is not slowed
    assert at("203.0.113.9", "/_dash-layout").status_code == 200    # the app's own requests are not page loads


def test_the_page_names_no_python_dash_or_plotly_version(dash_app):
    import json
    import re
    import sys
    r = dash_app.server.test_client().get("/")
    config = json.loads(re.search(r'<script id="_dash-config" type="application/json">(.*?)</script>',
                                  r.get_data(as_text=True), re.S).group(1))
    assert not set(config) & {"dash_version", "python_version", "plotly_version", "ddk_version", "dash_version_url"}
    text = json.dumps(config) + json.dumps(dict(r.headers))
    assert sys.version.split()[0] not in text and "Python" not in text
    assert "validation_layout" not in config and len(r.data) < 20_000      # not every page's layout (368 KB)
