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
