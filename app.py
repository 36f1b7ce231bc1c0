"""CloudMatrix Twin dashboard: the Dash app shell (navigation, run controls) around pages/.

Run it with ``python app.py --host 127.0.0.1 --port 8050`` (``make run``), or for a room
``make room`` (``python -m twin.cli.room``: waitress, one process: the live twins live in it;
threads serve the viewers). No simulation logic here: callbacks only call `twin.live.session`
(commands) and `twin.ui` (builders).
"""
from __future__ import annotations

import argparse
import logging
import math
import threading
import time
import traceback
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

import dash
import flask
from dash import ALL, Dash, Input, Output, State, clientside_callback, ctx, dcc, html, no_update
from dash.exceptions import DependencyException
from werkzeug.exceptions import BadRequest, HTTPException, InternalServerError, NotFound
from werkzeug.serving import WSGIRequestHandler

from twin.live import session
from twin.live.budget import REQUESTS
from twin.live import tracestore
from twin.live.budget import LogBudget, RateLimit
from twin.model.config import catalog
from twin.engine import list_scenarios
from twin.ui import answer, classbar
from twin.ui import components
from twin.ui import eventtext
from twin.ui import guard
from twin.ui import runnable
from twin.ui import teach
from twin.ui import urlstate
from twin.ui.errors import explain
from twin.ui.lang import _, request_lang
from twin.ui.polling import BEAT, TICKET, current_beat, shell_stores, shell_tick, twin_for

MAX_BODY_BYTES = 4 * 1024 * 1024     # a request body; the largest is a trace upload (2 MB, base64)
ERROR_LINES_PER_MIN = 20             # log lines a minute for requests refused or failed; the rest are counted
SERVER_NAME = "CloudMatrix Twin"     # the `Server` header: no framework or Python versions
PAGE_LOADS_PER_MIN_ADDRESS = 60      # page loads (the index) per remote address a minute; a tab loads it
                                     # once and then navigates in the browser; assumption, sized for a class
                                     # behind one address opening the app at once
VERSION_KEYS = ("dash_version", "python_version", "dash_version_url", "ddk_version", "plotly_version")


class TwinDash(Dash):
    """Dash, minus what the page tells a stranger about the server: no Python, Dash or Plotly versions
    in the `_dash-config` the index carries (only Dash's dev tools, off unless --debug, read them).
    Nor every page's layout (`validation_layout`, 360 KB of the 368 KB index): the renderer reads it
    only to check callback ids against all pages when the page loads, which the server's callbacks
    check anyway; without dev tools the browser skips that check."""

    def _config(self):
        config = super()._config()
        if not self._dev_tools.ui:
            for key in VERSION_KEYS + ("validation_layout",):
                config.pop(key, None)
            config["suppress_callback_exceptions"] = True     # the renderer's id check at load (above)
        return config


app = TwinDash(__name__, use_pages=True, title="CloudMatrix Twin", update_title=None, on_error=guard.on_error)
server = app.server
teach.install(app)                    # <html lang> and the ?lang= cookie (issue 12)
server.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
log = logging.getLogger(__name__)
log_refusal = LogBudget(log, ERROR_LINES_PER_MIN)
DASH_FIRST_REQUEST = tuple(server.before_request_funcs.get(None, ()))   # Dash's setup and pages router
page_loads = RateLimit(PAGE_LOADS_PER_MIN_ADDRESS, 60.0)
MSG = (Output("ctl-msg", "children", allow_duplicate=True),      # the control bar's message line
       Output("ctl-msg", "className", allow_duplicate=True))


_setup_lock = threading.Lock()
_set_up_csp: str | None = None     # the CSP, fixed once Dash's first-request setup is complete


def _set_up_once():
    """Dash's first-request setup (callbacks, then the pages router, which adds the last inline script)
    run once, under a lock, before any request is answered, and the CSP fixed from it. Dash marks each
    part done as it starts, so tabs arriving at once at a fresh server were answered while the first
    request was still setting up: a CSP of 4 of the 5 script hashes, cached for good (issue 36)."""
    global _set_up_csp
    if _set_up_csp is not None:
        return
    with _setup_lock:
        if _set_up_csp is None:
            for fn in DASH_FIRST_REQUEST:
                fn()
            _set_up_csp = _csp()


server.before_request_funcs.setdefault(None, []).insert(0, _set_up_once)


@server.before_request
def _start_timer():
    """Time the request and count it in flight (sandboxes yield to it); refuse an oversized body from
    its declared length, before reading it."""
    flask.g.t0 = time.perf_counter()
    REQUESTS.enter()
    flask.g.counted = True
    if (flask.request.content_length or 0) > MAX_BODY_BYTES:
        flask.abort(413)
    if flask.request.endpoint in PAGE_ENDPOINTS:
        return _page_load()


PAGE_ENDPOINTS = {app.config.routes_pathname_prefix, app.config.routes_pathname_prefix + "<path:path>"}


@cache
def _page_paths() -> tuple[str, ...]:
    """The paths that are pages (dash.page_registry, complete once the app has loaded)."""
    return tuple(sorted(p["relative_path"] for p in dash.page_registry.values()))


def _page_load():
    """Dash answers any GET path with the index: a path that is no page gets a small 404 naming the
    pages, and index loads are budgeted per remote address (a 429 saying when to come back)."""
    path = flask.request.path
    if path not in _page_paths():
        body = _("No page at %(path)s. Pages: %(pages)s") % {"path": path[:100], "pages": ", ".join(_page_paths())}
        return flask.Response(body + "\n", 404, mimetype="text/plain")
    wait = math.ceil(page_loads.wait_s(guard.remote_address() or "?"))
    if wait:
        body = _("Too many page loads from your address (at most %(n)s a minute): try again in %(s)s s") % {
            "n": PAGE_LOADS_PER_MIN_ADDRESS, "s": wait}
        return flask.Response(body + "\n", 429, mimetype="text/plain", headers={"Retry-After": str(wait)})
    return None


@server.teardown_request
def _done(_exc):
    if flask.g.pop("counted", False):
        REQUESTS.leave()


def _one_line(exc: BaseException) -> str:
    """An exception as one short line: its type, the first line of its message and where it was
    raised (file name and line, no directories), so a flood of them stays readable and bounded."""
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f" at {Path(where[0].filename).name}:{where[0].lineno}" if where else ""
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]}{at}"


@server.errorhandler(Exception)
def _refuse(exc):
    """Framework error paths answer with a bare status and write one rate-limited log line, never a
    traceback (to the viewer or the log): a malformed callback body is 400, an asset path Dash does
    not serve is 404, anything else 500. HTTP errors (413, 404, ...) pass through."""
    if isinstance(exc, HTTPException):
        return exc
    path = flask.request.path[:120]
    if path.endswith("_dash-update-component"):
        log_refusal(logging.WARNING, "malformed callback request refused: %s", _one_line(exc))
        return BadRequest("malformed callback request")
    if isinstance(exc, DependencyException):
        log_refusal(logging.WARNING, "asset not served: %s: %s", path, _one_line(exc))
        return NotFound()
    log_refusal(logging.ERROR, "request %s failed: %s", path, _one_line(exc))
    return InternalServerError()


def _csp() -> str:
    """The Content-Security-Policy: scripts only from this server plus the hashes of Dash's own
    inline scripts (the renderer start and clientside callbacks given as strings); no eval. Styles
    allow 'unsafe-inline' because React, plotly and cytoscape set style attributes. Computed once
    Dash's first-request setup is complete (`_set_up_once`)."""
    return "; ".join((
        "default-src 'self'", f"script-src 'self' {' '.join(app.csp_hashes())}",
        "style-src 'self' 'unsafe-inline'", "img-src 'self' data: blob:", "font-src 'self' data:",
        "connect-src 'self'", "worker-src 'self' blob:", "object-src 'none'", "base-uri 'self'",
        "form-action 'self'", "frame-ancestors 'self'"))


SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"}


@server.after_request
def _headers(resp):
    """Server-side time of every request (seen in browser dev tools; read by twin.cli.loadtest), and
    the security headers."""
    t0 = getattr(flask.g, "t0", None)
    if t0 is not None:
        resp.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - t0) * 1e3:.2f}"
    resp.headers["Content-Security-Policy"] = _set_up_csp or _csp()     # _csp(): a setup that failed
    resp.headers.update(SECURITY_HEADERS)
    return resp


class QuietHandler(WSGIRequestHandler):
    """The development server's request handler, naming no versions in `Server` (werkzeug's says
    "Werkzeug/x Python/y"); the room server (twin.cli.room) sends the same name."""

    def version_string(self) -> str:
        return SERVER_NAME

def _nav() -> html.Nav:
    pages = [p for p in sorted(dash.page_registry.values(), key=lambda p: p.get("order", 99)) if p.get("nav", True)]
    link = lambda p: dcc.Link(_(p["name"]), href=p["relative_path"], className="nav-link",
                              id={"type": "nav", "index": p["path"]})
    # pages registered with menu="more" are reached from the "More" menu, so the top bar stays one
    # row at 1440 px in English and Chinese
    more = [link(p) for p in pages if p.get("menu") == "more"]
    menu = html.Div([html.Span(_("More") + " ▾", className="nav-link nav-more-btn", tabIndex="0"),
                     html.Div(more, className="nav-menu")], className="nav-more") if more else None
    return html.Nav([link(p) for p in pages if p.get("menu") != "more"] + [menu], className="nav")


def serve_layout():
    return html.Div([
        dcc.Location(id="url", refresh=False),
        dcc.Store(id="ctl-twin", storage_type="session", data=session.SHARED),   # which twin this tab views
        dcc.Store(id="ctl-token", storage_type="session"),                 # {"credential", "ok"} (twin.live.gate)
        dcc.Store(id="ctl-viewer", storage_type="local"),                  # anonymous viewer id (shown)
        dcc.Store(id="ctl-secret", storage_type="local"),                  # this browser's secret (never shown)
        *shell_stores(),                       # the app's one clock, the twin status and the pages' beat
        html.Header([
            html.Div([html.Span("CloudMatrix", className="brand-a"), html.Span(" Twin", className="brand-b")],
                     className="brand", title=_("A live digital twin of the CloudMatrix384 supernode")),
            _nav(),
            html.Div(id="ctl-status-twin", className="twin-badge"),
            dcc.Store(id="ctl-url-done", storage_type="session"),   # the query string last applied
            dcc.Store(id="ctl-url-pending"),         # a link waiting for the instructor's confirm
            html.Span(dcc.Clipboard(id="ctl-link", title=_(
                "Copy a link to this run: page, scenario, deployment, seed, speed, load, demo and language")), className="copy-link"),
            teach.tools(),
        ], className="topbar"),
        components.controls_bar(list_scenarios(), sorted(catalog().deployments)),
        teach.banner(),
        classbar.bar(),                        # follow the lecturer, predict, the tally (issue 26)
        html.Main(dash.page_container, className="main"),
        html.Footer([
            html.Span(_("Tags say where a number comes from:") + " "), components.tag("sim"), components.tag("model"), components.tag("paper"),
            html.Span(" · " + _("CloudMatrix384 and CloudMatrix-Infer figures from the published paper; "
                                "everything else is computed here."), className="muted"),
        ], className="footer"),
    ], className="shell")


app.layout = serve_layout


# ---- run controls -----------------------------------------------------------------------------

@dash.callback(
    Output("ctl-msg", "children"),
    Output("ctl-msg", "className"),
    Input("ctl-play", "n_clicks"),
    Input({"type": "ctl-speed-btn", "index": ALL}, "n_clicks"),
    Input("ctl-speed-custom", "value"),
    Input({"type": "ctl-load-btn", "index": ALL}, "n_clicks"),
    Input("ctl-load-custom", "value"),
    Input("ctl-reset", "n_clicks"),
    State("ctl-twin", "data"),
    State("ctl-token", "data"),
    State("ctl-viewer", "data"),
    State("ctl-scenario", "value"),
    State("ctl-deployment", "value"),
    State("ctl-trace", "value"),
    State("ctl-seed", "value"),
    State("ctl-secret", "data"),
    prevent_initial_call=True,
)
def on_control(_play, _speeds, speed_custom, _loads, load_custom, _reset, choice, token, viewer,
               scenario, deployment, trace, seed, secret):
    """Apply one run control to the twin this viewer is looking at."""
    trig = ctx.triggered_id
    if trig is None:
        return no_update, no_update
    tw, _note = twin_for(choice)
    moved = ""
    try:
        if trig == "ctl-play":
            action, value = ("pause" if not tw.paused else "play"), None
        elif isinstance(trig, dict) and trig.get("type") == "ctl-speed-btn":
            action, value = "speed", guard.text(trig.get("index"))
        elif trig == "ctl-speed-custom":
            if guard.number(speed_custom) is None:
                raise session.ControlError(f"speed: allowed {components.allowed('speed')} (times real time)")
            action, value = "speed", speed_custom
        elif isinstance(trig, dict) and trig.get("type") == "ctl-load-btn":
            pct = guard.number(trig.get("index"))
            action, value = "load", None if pct is None else pct / 100.0
        elif trig == "ctl-load-custom":
            if guard.number(load_custom) is None:
                raise session.ControlError(f"load: allowed {components.allowed('load')} % of capacity")
            action, value = "load", guard.number(load_custom) / 100.0
        elif trig == "ctl-reset":
            if guard.number(seed) is None:
                raise session.ControlError(f"seed: allowed a whole number {components.allowed('seed')}")
            if guard.ident(scenario) is None or deployment not in ("", None) and guard.ident(deployment) is None:
                raise session.ControlError("scenario and deployment: allowed one of the names in their lists")
            scenario, moved = runnable.fit(scenario, deployment)
            action, value = "reset", {"scenario": scenario, "deployment": deployment or None,
                                      "trace": trace or None, "seed": seed}
        else:
            return no_update, no_update
    except session.ControlError as exc:
        return _("Not applied: %(why)s") % {"why": explain(exc)}, "ctl-msg msg-error"
    ticket = tw.send(action, value, **guard.actor(viewer, token, secret))
    if moved and not ticket.refused:
        dash.set_props("ctl-scenario", {"value": scenario})
    return answer.sent(tw, ticket, lambda: f"{moved}; {eventtext.said(ticket.said)}" if moved
                       else eventtext.said(ticket.said), TICKET)


answer.follow("ctl-msg", TICKET, Input(BEAT, "data"))     # the engine's answer to a load or a reset


HIDDEN = {"display": "none"}


@dash.callback(
    *MSG, Output("ctl-url-done", "data"), Output("ctl-twin", "data", allow_duplicate=True),
    Output("ctl-url-confirm", "style"), Output("ctl-url-pending", "data"),
    inputs={"search": Input("url", "search"), "done": State("ctl-url-done", "data"),
            "choice": State("ctl-twin", "data"), "token": State("ctl-token", "data"),
            "viewer": State("ctl-viewer", "data"), "secret": Input("ctl-secret", "data")},
    prevent_initial_call="initial_duplicate",
)
def on_url(search, done, choice, token, viewer, secret):
    """A shared link (twin.ui.urlstate), once per query string. A link must not reset the shared
    twin under a whole room: it runs in this browser's own sandbox (the one this tab views, else a
    new one with the link's settings, which the tab then views). The instructor's tab is asked first
    (on_url_confirm) instead. A link naming what the shared twin already runs changes nothing."""
    search = guard.text(search) or ""
    fields = urlstate.parse(search)
    if not fields or search == guard.text(done):
        return (no_update,) * 6
    reg = session.sessions()
    tw, _note = twin_for(choice)
    who, addr = guard.client(secret)
    if not who.startswith("s-"):          # the browser's secret is not in its store yet: wait for it
        return (no_update,) * 6           # (a sandbox must belong to the secret its later clicks send)
    opened = None
    if tw.owner is None or tw.owner != who:            # the shared twin, or someone else's sandbox
        if tw.shared and not urlstate.differs(tw, fields):
            return no_update, no_update, search, no_update, no_update, no_update
        if tw.shared and guard.unlocked(token):
            return (_("This link would change the shared twin for everyone (%(what)s): apply it with the "
                      "button, or ignore it to keep the shared twin as it runs.") % {"what": urlstate.summary(fields)},
                    "ctl-msg msg-ok", search, no_update, {}, search)
        try:
            tw = opened = reg.open_sandbox(dict(vars(reg.shared().params)), client=who, addr=addr)
        except session.ControlError as exc:
            return (_("Link not applied: no private sandbox could open for it, and it would change the shared "
                      "twin for everyone: %(why)s") % {"why": explain(exc)}, "ctl-msg msg-error", search,
                    no_update, no_update, no_update)
    try:
        done_msgs = urlstate.apply(tw, fields, **guard.actor(viewer, token, secret))
    except session.ControlError as exc:
        if opened is not None:
            reg.close(opened.key, who)
        return (_("Link not fully applied: %(why)s") % {"why": explain(exc)}, "ctl-msg msg-error", search,
                no_update, no_update, no_update)
    key = opened.key if opened is not None else no_update
    if not done_msgs:
        return no_update, no_update, search, key, no_update, no_update
    return _from_link(done_msgs, tw) + (search, key, no_update, no_update)


def _from_link(done_msgs: list, tw) -> tuple[str, str]:
    """The message line after a link was applied, naming the twin it changed."""
    where = _("applied to the shared twin") if tw.shared else _("applied to your sandbox")
    what = "; ".join(map(eventtext.said, done_msgs))
    return _("From the link: %(what)s") % {"what": what} + f" — {where}", "ctl-msg msg-ok"


@dash.callback(
    *MSG, Output("ctl-url-confirm", "style", allow_duplicate=True),
    Output("ctl-url-pending", "data", allow_duplicate=True),
    inputs={"_click": Input("ctl-url-apply", "n_clicks"), "pending": State("ctl-url-pending", "data"),
            "token": State("ctl-token", "data"), "viewer": State("ctl-viewer", "data"),
            "secret": State("ctl-secret", "data")},
    prevent_initial_call=True,
)
def on_url_confirm(_click, pending, token, viewer, secret):
    """The instructor confirmed: apply the pending link to the shared twin (the lock still decides)."""
    fields = urlstate.parse(guard.text(pending) or "")
    if not fields:
        return no_update, no_update, HIDDEN, None
    try:
        done_msgs = urlstate.apply(session.sessions().shared(), fields, **guard.actor(viewer, token, secret))
    except session.ControlError as exc:
        return _("Link not fully applied: %(why)s") % {"why": explain(exc)}, "ctl-msg msg-error", HIDDEN, None
    return _from_link(done_msgs, session.sessions().shared()) + (HIDDEN, None)


@dash.callback(
    Output("ctl-link", "content"),
    Input("ctl-link", "n_clicks"),
    State("url", "href"),
    State("url", "pathname"),
    State("ctl-twin", "data"),
    prevent_initial_call=True,
)
def on_copy_link(_clicks, href, path, choice):
    """The current run as a link (copied to the clipboard by dcc.Clipboard)."""
    parts = urlsplit(guard.text(href, 2048) or "")
    base = f"{parts.scheme}://{parts.netloc}" if parts.scheme in ("http", "https") and parts.netloc else ""
    return urlstate.link(base, guard.text(path) or "/", twin_for(choice)[0], request_lang())


@dash.callback(
    Output("ctl-twin", "data"), *MSG,
    inputs={"_open": Input("ctl-sandbox", "n_clicks"), "_back": Input("ctl-shared", "n_clicks"),
            "choice": State("ctl-twin", "data"), "secret": State("ctl-secret", "data")},
    prevent_initial_call=True,
)
def on_twin_choice(_open, _back, choice, secret):
    """Open a private sandbox (bounded in total, per browser and per address), or go back to the
    shared twin (closing the sandbox if this browser owns it)."""
    reg = session.sessions()
    choice = guard.choice(choice)
    who, addr = guard.client(secret)
    if ctx.triggered_id == "ctl-sandbox":
        current = reg.get(choice) if choice and choice != session.SHARED else None
        if current is not None and current.owner == who:
            return no_update, _("You already have a private sandbox; it is what you are viewing."), "ctl-msg msg-ok"
        try:
            tw = reg.open_sandbox(client=who, addr=addr)
        except session.ControlError as exc:
            return no_update, explain(exc), "ctl-msg msg-error"
        return tw.key, _("Private sandbox %(key)s started with the shared twin's settings; only this "
                         "browser controls it. It is freed after %(min)s min without an action.") % {
            "key": tw.key, "min": f"{reg.ttl_s / 60:.0f}"}, "ctl-msg msg-ok"
    if ctx.triggered_id == "ctl-shared":
        if choice and choice != session.SHARED:
            try:
                reg.close(choice, who)
            except session.ControlError:
                pass          # someone else's sandbox: stop viewing it, leave it running
        return session.SHARED, _("Back on the shared twin."), "ctl-msg msg-ok"
    return no_update, no_update, no_update


@dash.callback(prevent_initial_call=True, output=[Output("ctl-token", "data"), *MSG], inputs={
    "_clicks": Input("ctl-unlock", "n_clicks"), "_submit": Input("ctl-token-input", "n_submit"),
    "value": State("ctl-token-input", "value"), "secret": State("ctl-secret", "data")})
def on_unlock(_clicks, _submit, value, secret):
    """Check an instructor token at the gate (twin.live.gate: throttled, logged); if it is right, this tab
    keeps the random credential the gate hands out, never the token."""
    reg = session.sessions()
    if not reg.locked:
        return no_update, _("The shared twin is not locked: anyone can use the controls."), "ctl-msg msg-ok"
    value = guard.text(value)
    try:
        credential = reg.unlock(value, *guard.client(secret))
    except session.ControlError as exc:
        return no_update, _("Not checked: %(why)s") % {"why": explain(exc)}, "ctl-msg msg-error"
    if credential:
        return {"credential": credential, "ok": True}, _("Instructor controls unlocked for this tab."), "ctl-msg msg-ok"
    return None, _("Wrong instructor token: shared controls stay locked."), "ctl-msg msg-error"


@dash.callback(Output("ctl-token", "data", allow_duplicate=True), *MSG,
               Output("class-lead", "data", allow_duplicate=True),
               Input("ctl-signout", "n_clicks"), State("ctl-token", "data"), prevent_initial_call=True)
def on_signout(_clicks, token):
    """Sign this tab out: the gate revokes its credential (a copy of it opens nothing any more), the
    tab forgets it and stops leading the class."""
    session.sessions().gate.revoke(guard.credential(token))
    return None, _("Signed out: this tab's instructor credential is revoked."), "ctl-msg msg-ok", {"on": False}


clientside_callback(      # Unlock while this tab holds no credential, Sign out while it holds one
    dash.ClientsideFunction(namespace="twin", function_name="signedIn"),
    Output("ctl-token-input", "style"), Output("ctl-unlock", "style"), Output("ctl-signout", "style"),
    Input("ctl-token", "data"),
)


@dash.callback(
    Output("ctl-trace", "options"),
    Output("ctl-trace", "value"),
    Output("ctl-trace-upload", "contents"),
    *MSG,
    Input("ctl-trace-upload", "contents"),
    State("ctl-trace-upload", "filename"),
    State("ctl-trace", "options"),
    State("ctl-secret", "data"),
    prevent_initial_call=True,
)
def on_upload(contents, filename, options, secret):
    """Parse an uploaded trace in memory (bounded size, same checks as a trace file) and offer it
    in this browser's Trace list; Apply & reset then runs it."""
    if contents is None:
        return no_update, no_update, no_update, no_update, no_update
    try:
        session.sessions().allow_upload(*guard.client(secret))
        key, w = tracestore.upload(contents, guard.text(filename))
    except (session.ControlError, ValueError) as exc:
        return no_update, no_update, None, _("Trace not accepted: %(why)s") % {"why": explain(exc)}, "ctl-msg msg-error"
    opts = [o for o in (options if isinstance(options, list) else []) if isinstance(o, dict)][:40]
    name = tracestore.label(key)
    if all(o.get("value") != key for o in opts):
        opts.append({"label": name, "value": key})
    span = float(w.arrival_s[-1] - w.arrival_s[0])
    return (opts, key, None, _("%(name)s: %(n)s requests over %(span)s s; press Apply & reset to replay it") % {
        "name": name, "n": f"{len(w):,}", "span": f"{span:,.0f}"}, "ctl-msg msg-ok")


@dash.callback(
    Output("shell-status", "data"),
    Output("shell-beat", "data"),
    Output({"type": "beat", "page": ALL}, "data"),
    Input("shell-tick", "n_intervals"),
    Input("ctl-twin", "data"),
    Input("ctl-msg", "children"),
    Input("ctl-token", "data"),
    State("shell-beat", "data"),
)
def on_tick(_n, choice, _msg, token, last):
    """The app's one clock: the status of the twin this tab views (the only writer of shell-status),
    and the beat every page's live callback runs on (sent only when the twin has news) to the page
    shown. A control's message refreshes the status at once. A page that just mounted (no trigger:
    Dash calls this for the page's new beat store, and holds the page's own first call until this
    one answers) gets the current beat even when the twin has no news: a paused twin used to leave a
    page that a follower or "Open page" reached drawing "waiting for the twin" (issue 36)."""
    unlocked = guard.unlocked(token)
    status, beat = shell_tick(choice, guard.store(last) or None, action=ctx.triggered_id == "ctl-msg",
                              unlocked=unlocked)
    shown = len(ctx.outputs_list[2]) if ctx.outputs_list else 0     # the page's beat store, if any
    page = beat
    if beat is no_update and ctx.triggered_id is None and shown:
        page = current_beat(choice, unlocked)
    return status, beat, [page] * shown


# Status strip, lock state and the shared-action log are drawn in the browser from the small
# status dict the shell's clock returns.
SPEED, LOAD = {"type": "ctl-speed-btn", "index": ALL}, {"type": "ctl-load-btn", "index": ALL}
STATUS_DRAWN = (   # what assets/twin.js `status` draws, in its return order
    ("ctl-status-state", "children"), ("ctl-status-state", "className"), ("ctl-status-time", "children"),
    ("ctl-status-speed", "children"), ("ctl-status-twin", "children"), ("ctl-status-scenario", "children"),
    ("ctl-play", "children"), ("ctl-lock-note", "children"), ("ctl-log", "children"), ("ctl-log-last", "children"),
    (SPEED, "className"), ("ctl-play", "disabled"), ("ctl-reset", "disabled"), ("ctl-speed-custom", "disabled"),
    ("ctl-load-custom", "disabled"), (SPEED, "disabled"), (LOAD, "className"), (LOAD, "disabled"),
    ("ctl-load-wrap", "title"), ("ctl-sandbox", "style"), ("ctl-shared", "style"), ("ctl-token-wrap", "style"))
clientside_callback(
    dash.ClientsideFunction(namespace="twin", function_name="status"),
    *(Output(cid, prop) for cid, prop in STATUS_DRAWN),
    Input("shell-status", "data"),
    Input("ctl-token", "data"),
    State(SPEED, "id"),
    State(LOAD, "id"),
)

clientside_callback(
    dash.ClientsideFunction(namespace="twin", function_name="viewerId"),
    Output("ctl-viewer", "data"),
    Input("ctl-viewer", "modified_timestamp"),
    State("ctl-viewer", "data"),
)

clientside_callback(
    dash.ClientsideFunction(namespace="twin", function_name="secret"),
    Output("ctl-secret", "data"),
    Input("ctl-secret", "modified_timestamp"),
    State("ctl-secret", "data"),
)

clientside_callback(
    dash.ClientsideFunction(namespace="twin", function_name="navActive"),
    Output({"type": "nav", "index": ALL}, "className"),
    Input("url", "pathname"),
    State({"type": "nav", "index": ALL}, "id"),
)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="CloudMatrix Twin dashboard (development server)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8050)
    ap.add_argument("--debug", action="store_true", help="Dash dev tools and reloader")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not a.debug:
        session.sessions().shared()   # start the default scenario now so the first page is already live
    print(f"CloudMatrix Twin on http://{a.host}:{a.port}/  (instructor lock: "
          f"{'on' if session.sessions().locked else 'off'}; set {session.TOKEN_ENV} to lock shared controls)")
    app.run(host=a.host, port=a.port, debug=a.debug, threaded=True, request_handler=QuietHandler)


if __name__ == "__main__":
    main()
