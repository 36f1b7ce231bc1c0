"""The control bar's callbacks (its layout: twin.ui.components.controls_bar): the run controls
(play, speed, load, reset), a shared link applied to this tab's twin, the copy-link button, a
private sandbox opened or left, the instructor's unlock and sign-out, and a trace upload. Each
checks what the browser sent and goes through `twin.live.session`: the lock, sandbox ownership
and the budgets apply here as on every page (twin.ui.command)."""
from __future__ import annotations

from urllib.parse import urlsplit

import dash
from dash import ALL, Input, Output, State, clientside_callback, ctx, no_update

from twin.live import session
from twin.live import tracestore
from twin.ui import command
from twin.ui import components
from twin.ui import eventtext
from twin.ui import guard
from twin.ui import runnable
from twin.ui import urlstate
from twin.ui.errors import explain
from twin.ui.lang import _, request_lang
from twin.ui.polling import BEAT, TICKET, twin_for

MSG = (Output("ctl-msg", "children", allow_duplicate=True),      # the control bar's message line
       Output("ctl-msg", "className", allow_duplicate=True))


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
    by = command.Actor(choice, token, viewer, secret)
    tw, moved = by.twin, ""
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
        return command.refused(exc)
    line = by.send(action, value, TICKET, lambda ticket: f"{moved}; {command.said(ticket)}" if moved
                   else command.said(ticket))
    if moved and not by.ticket.refused:
        dash.set_props("ctl-scenario", {"value": scenario})
    return line


command.follow("ctl-msg", TICKET, Input(BEAT, "data"))     # the engine's answer to a load or a reset


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
