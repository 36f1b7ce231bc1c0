"""Failures: a fault console (pick a part and a fault, inject now or schedule), the fault policy,
random failures and replayable demos; every fault marked on the KPI charts, measured in a table,
and failed parts drawn on the topology of the system the viewer's twin runs (from its snapshot).
Layout parts live in `twin.ui.faultconsole`, read-outs in `twin.ui.faulttable` and the tick's
builders in `twin.ui.failpanels`; what stays here (~420 lines) is the page's callbacks, kept together
because they share its component ids."""
from __future__ import annotations

import dash
from dash import ALL, Input, Output, State, clientside_callback, ctx, dcc, html, no_update

from twin.live import jobs
from twin.live import session
from twin.explore import incidentjob
from twin.engine.faults import KINDS, RANDOM_MAX, load_fault_file
from twin.engine.faults.spec import MAX_RECORDS
from twin.ui import answer
from twin.ui import components
from twin.ui import failpanels
from twin.ui import faultconsole
from twin.ui import faultreport
from twin.ui import faulttable
from twin.engine.faults import rows as faultrows
from twin.ui import eventtext
from twin.ui import faultview
from twin.ui import figures
from twin.ui import guard
from twin.ui import topolive
from twin.ui import topostyle
from twin.ui import topoview
from twin.ui.polling import Tick, beat_id, page_stores, page_tick, twin_for
from twin.ui import lang
from twin.ui.errors import explain
from twin.ui.lang import N_, _

dash.register_page(__name__, path="/failures", name=N_("Failures"), title=lang.title("Failures"), order=6,
                   live=("fl-cursor", "#fl-table"),
                   # a demo replayed past its recovery; a gray fault: detected, mitigated, the die still
                   # slow, and its node drawn with the slow die
                   shots=(("failures", "/failures", "node-power-loss"), ("failures-gray", "/failures", "one-slow-die"),
                          ("topology-gray", "/topology?view=n36")))

P = faultconsole.P
CHARTS = faultconsole.CHARTS
DEFAULT_KIND = faultconsole.DEFAULT_KIND
FL_MSG = (Output(f"{P}-msg", "children", allow_duplicate=True),      # the console's message line
          Output(f"{P}-msg", "className", allow_duplicate=True))
TICKET = f"{P}-ticket"
ACTOR = (State("ctl-twin", "data"), State("ctl-token", "data"), State("ctl-viewer", "data"),   # who acts
         State("ctl-secret", "data"))


def layout(target: str | None = None, kind: str | None = None, report: str | None = None, **_kwargs):
    """System-free: the first tick fills in what depends on the viewer's system, and checks a part
    given in the URL against it; ?report=<id> opens that fault's report."""
    url = {"target": guard.ident(target), "kind": kind if kind in KINDS else None}    # as given: the tick checks it
    kind, target = faultconsole.initial(None, url["target"], url["kind"])
    return html.Div([
        *page_stores(P),
        dcc.Store(id=f"{P}-url", data=url),
        dcc.Store(id=TICKET),                 # a sent action the engine has not answered yet (twin.ui.answer)
        dcc.Store(id=f"{P}-view", data=topoview.AGG),
        dcc.Store(id=f"{P}-live"),
        dcc.Store(id=f"{P}-strips"),
        dcc.Store(id=f"{P}-report-id", data=faultreport.fault_id(report)),
        dcc.Store(id=f"{P}-whatif-job"),      # the what-if job of this browser: its id, demo and, when done, result
        dcc.Interval(id=f"{P}-whatif-tick", interval=1000, disabled=True),
        components.page_header(_("Failures"), _("Break any part of the system while it serves and watch what follows: "
                                       "detection, rerouting or recovery, requests requeued (never lost), and what "
                                       "it costs in latency and goodput. Compare policies, replay the demos."),
                      html.Div(id=f"{P}-demo-line", className="scenario-line")),
        html.Div(id=f"{P}-banner", className="banner", role="alert"),
        html.Div([     # the console beside the charts: at 1440x900 both are in view without scrolling
            html.Div([faultconsole.console(kind, target), faultconsole.demos()], className="fl-stack"),
            html.Div([html.Div(components.graph(f"{P}-{name}-chart", figures.empty_figure(spec.title), faultconsole.CHART_H), className="chart")
                      for name, spec in CHARTS.items()], className="chart-grid grid-2"),
        ], className="two-even fl-block"),
        components.panel([html.Div(id=f"{P}-table"), html.Div([
                    html.Button(_("Download CSV"), id=f"{P}-csv", className="btn btn-small"),
                    html.Button(_("Download JSON"), id=f"{P}-json", className="btn btn-small"),
                    html.Span(_("every report the run keeps (up to %(n)s closed faults), not only the rows shown; "
                                "click a fault's # for its report") % {"n": MAX_RECORDS}, className="hint small")],
                    className="fl-export"),
                 dcc.Download(id=f"{P}-csv-dl")], _("Faults: detection, recovery and cost"), "sim",
                extra=faultconsole.legend(), className="fl-block"),
        html.Div(id=f"{P}-report"),
        html.Div(faultconsole.picker(), className="fl-block"),
        html.Div([
            faultconsole.policy(),
            faultconsole.random_failures(),
            components.panel(html.Div(id=f"{P}-events", className="events"), _("Fault timeline"), "sim"),
        ], className="fl-three fl-block"),
    ])


# ---- live updates -----------------------------------------------------------------------------

LIVE = {
    "figs": [Output(f"{P}-{name}-chart", "figure") for name in CHARTS],
    "strips": Output(f"{P}-strips", "data"),
    "table": Output(f"{P}-table", "children"),
    "events": Output(f"{P}-events", "children"),
    "failed": Output(f"{P}-failed", "children"),
    "banner": Output(f"{P}-banner", "children"),
    "banner_cls": Output(f"{P}-banner", "className"),
    "policy_now": Output(f"{P}-policy-now", "children"),
    "detect": Output(f"{P}-detect", "value"),
    "redundant": Output(f"{P}-redundant", "value"),
    "weights": Output(f"{P}-weights", "value"),
    "random_now": Output(f"{P}-random-now", "children"),
    "random": Output(f"{P}-random", "value", allow_duplicate=True),
    "random_rate": Output(f"{P}-random-rate", "value"),
    "demo_line": Output(f"{P}-demo-line", "children"),
    "live": Output(f"{P}-live", "data"),
    "elements": Output(f"{P}-cy", "elements", allow_duplicate=True),
    "layout": Output(f"{P}-cy", "layout", allow_duplicate=True),
    "view": Output(f"{P}-view", "data", allow_duplicate=True),
    "options": Output(f"{P}-view-select", "options"),
    "select": Output(f"{P}-view-select", "value", allow_duplicate=True),
    "picker_help": Output(f"{P}-picker-help", "children"),
    "canvas": Output(f"{P}-cy-wrap", "children"),
    "kind": Output(f"{P}-kind", "value", allow_duplicate=True),
    "target": Output(f"{P}-target", "value", allow_duplicate=True),
    "hint": Output(f"{P}-target-hint", "children", allow_duplicate=True),
    "factor_style": Output(f"{P}-factor-wrap", "style", allow_duplicate=True),
    "period_style": Output(f"{P}-period-wrap", "style", allow_duplicate=True),
    "factor_title": Output(f"{P}-factor-wrap", "title", allow_duplicate=True),
    "period_title": Output(f"{P}-period-wrap", "title", allow_duplicate=True),
    "report": Output(f"{P}-report", "children", allow_duplicate=True),
}


@page_tick(P, LIVE, {"view_name": State(f"{P}-view", "data"), "url": State(f"{P}-url", "data"),
                     "report_id": State(f"{P}-report-id", "data"), "whatif": State(f"{P}-whatif-job", "data")},
           initial_duplicate=True)
def tick(t: Tick, view_name, url=None, report_id=None, whatif=None) -> dict:
    """One poll: nothing when the snapshot is unchanged; else one compact update for the charts
    (new points, and the fault marks when they moved), and each panel only when its content changed.
    The very first tick sends numbers; the second draws the picker (drawing takes the browser a second)."""
    cursor = failpanels.cursor(t.prior)
    tw, snap, info = t.twin, t.snap, t.system
    view_name = guard.ident(view_name) or topoview.AGG
    rebuild = cursor.get("system") != info.name
    full = t.mode == "full"
    sigs = {} if full or rebuild else dict(cursor.get("s") or {})

    def changed(name: str, sig: int, force: bool = False) -> bool:
        if not (full or force) and sigs.get(name) == sig:
            return False
        sigs[name] = sig
        return True

    out = failpanels.twin_settings(tw, info, changed)
    first = not cursor                          # the very first tick: numbers first, drawing next
    if first or rebuild:                        # another system (a deployment switch): its part, its count
        out.update(failpanels.url_pick(info, url, keep=first))
    fid = faultreport.fault_id(report_id)
    pin = fid if failpanels.pin_sig(snap, fid) is not None else None    # an open report pins the charts
    repin = pin != cursor.get("pin")
    if not t.changed and not rebuild and cursor.get("drawn") and not repin:
        return {**out, "cursor": dict(cursor, **t.cursor, s=sigs)}

    panels = tw.memo(f"fl-panels:{info.name}:{lang.request_lang()}", failpanels.panels)     # text in the viewer's language
    if pin is not None:                         # the incident's window, from its report: it does not scroll
        if changed("pin", failpanels.pin_sig(snap, pin), force=repin):
            out["figs"] = tw.memo(f"fl-pin:{pin}:{lang.request_lang()}", lambda s: failpanels.pinned(s, pin))
    elif t.changed or repin:
        out.update(failpanels.charts(t, panels, changed, whole=repin))
    for name in ("table", "events", "failed", "banner"):
        sig, content = panels[name]
        if t.changed and changed(name, sig):
            out[name] = content
    if "banner" in out:
        out["banner"], out["banner_cls"] = out["banner"]
    if t.changed and fid:                       # the open report, while its numbers still move
        r = faultreport.with_whatif(faultreport.find(snap, fid), whatif, tw.params.faults)
        if changed("report", faultview.crc([fid, r])):
            out["report"] = faultreport.panel(r, float(snap.sim_time)) if r else faultreport.missing(fid)
    try:
        v = topoview.view(info.topology, view_name)
    except ValueError:
        v = topoview.view(info.topology, topoview.AGG)
    out["live"] = tw.memo(f"fl-topo:{v.name}", lambda s: topolive.live(v, s))
    if not first and (rebuild or not cursor.get("drawn") or v.name != view_name):
        out.update(view=v.name, options=topoview.view_options(info.topology), select=v.name,
                   picker_help=faultconsole.picker_help(info))
        if cursor.get("drawn") and not rebuild:      # another view of the same system
            out.update(elements=v.elements,
                       layout={"name": "preset", "fit": True, "padding": 14, "view": f"{info.name}:{v.name}"})
        else:                                         # first drawing, or another system (see TS.canvas)
            out["canvas"] = faultconsole.canvas(info, v)
    out["cursor"] = dict(t.cursor, view=v.name, system=info.name, s=sigs, drawn=not first, pin=pin)
    return out


clientside_callback(
    dash.ClientsideFunction(namespace="twin", function_name="strips"),
    [Output(f"{P}-{name}-chart", "figure", allow_duplicate=True) for name in CHARTS],
    Input(f"{P}-strips", "data"),
    [State(f"{P}-{name}-chart", "figure") for name in CHARTS],
    prevent_initial_call=True,
)


topostyle.merge_live(P)


@dash.callback(
    Output(f"{P}-view", "data"),
    Output(f"{P}-cy", "elements", allow_duplicate=True),
    Output(f"{P}-cy", "layout"),
    Output(f"{P}-live", "data", allow_duplicate=True),
    Input(f"{P}-view-select", "value"),
    State(f"{P}-view", "data"),
    State("ctl-twin", "data"),
    prevent_initial_call=True,
)
def on_view(selected, current, choice):
    """Show the whole system, one node or one UB sub-plane in the picker."""
    snap = twin_for(choice)[0].snapshot
    t = snap.system.topology
    selected, current = guard.ident(selected), guard.ident(current)
    try:
        v = topoview.view(t, selected or topoview.AGG)
    except ValueError:
        v = topoview.view(t, topoview.AGG)
    if v.name == current:
        return no_update, no_update, no_update, no_update
    return v.name, v.elements, {"name": "preset", "fit": True, "padding": 14, "view": v.name}, topolive.live(v, snap)


# ---- picking a part ---------------------------------------------------------------------------

PICK = {"kind": Output(f"{P}-kind", "value"), "target": Output(f"{P}-target", "value"),
        "placeholder": Output(f"{P}-target", "placeholder"), "hint": Output(f"{P}-target-hint", "children"),
        "factor_style": Output(f"{P}-factor-wrap", "style"), "period_style": Output(f"{P}-period-wrap", "style"),
        "factor_title": Output(f"{P}-factor-wrap", "title"), "period_title": Output(f"{P}-period-wrap", "title")}


@dash.callback(
    output=PICK,
    inputs={"kind": Input(f"{P}-kind", "value"), "node": Input(f"{P}-cy", "tapNodeData"),
            "edge": Input(f"{P}-cy", "tapEdgeData"), "target": State(f"{P}-target", "value"),
            "choice": State("ctl-twin", "data")},
    prevent_initial_call=True,
)
def on_pick(kind, node, edge, target, choice) -> dict:
    """A new fault kind keeps the part if it fits (else a related part or the kind's example); a
    click on the drawing picks that part and, if needed, the fault kind that breaks it."""
    t = twin_for(choice)[0].snapshot.system.topology
    prop = ctx.triggered[0]["prop_id"] if ctx.triggered else ""
    kind = kind if isinstance(kind, str) and kind in KINDS else DEFAULT_KIND
    target = guard.ident(target) or ""
    out = dict.fromkeys(PICK, no_update)
    if prop.endswith("tapNodeData") or prop.endswith("tapEdgeData"):
        data = node if prop.endswith("tapNodeData") else edge
        if not isinstance(data, dict) or data.get("id") is None:   # a new drawing, not a click
            return out
        cid = guard.ident(data.get("id")) or ""
        picked = faultview.pick(t, cid, kind) if cid else None
        if picked is None:
            links = data.get("links") if type(data.get("links")) is int else _("several")
            what = (_("a bundle of %(n)s links: open a sub-plane to pick one optical link") % {"n": links}
                    if topoview.is_bundle(cid) else
                    _("%(part)s cannot be broken from here: pick a node, die, CPU, switch, NIC or optical link")
                    % {"part": repr(cid)})
            out["hint"] = _("Not a fault target — %(what)s.") % {"what": what}
            return out
        kind, target = picked
    else:
        target = faultview.related(t, kind, target)
    fs, ps = faultconsole.extra_styles(kind)
    ft, pt = faultconsole.field_titles(kind)
    return {"kind": kind, "target": target, "placeholder": faultview.example(kind),
            "hint": faultview.target_hint(t, kind, target), "factor_style": fs, "period_style": ps,
            "factor_title": ft, "period_title": pt}


@dash.callback(
    Output(f"{P}-target-list", "children"),
    Input(f"{P}-kind", "value"),
    Input(f"{P}-target", "value"),
    State("ctl-twin", "data"),
)
def on_suggest(kind, text, choice):
    """The searchable list of valid ids for the fault kind (filtered by what is typed)."""
    t = twin_for(choice)[0].snapshot.system.topology
    kind = kind if isinstance(kind, str) and kind in KINDS else DEFAULT_KIND
    return [html.Option(value=i) for i in faultview.suggest(t, kind, guard.ident(text) or "")]


# ---- actions ------------------------------------------------------------------------------------

answer.follow(f"{P}-msg", TICKET, Input(beat_id(P), "data"))      # the engine's answer to what was sent


def _clicked() -> bool:
    """True only for a real click: Dash also calls these callbacks (n_clicks = 0) when the page's
    components are inserted, prevent_initial_call notwithstanding."""
    return bool(ctx.triggered) and any(t.get("value") for t in ctx.triggered)


def _capital(msg) -> str:
    """A control's confirmation in the viewer's language, as a sentence."""
    text = eventtext.said(msg)
    return text[:1].upper() + text[1:]


def _err(exc) -> tuple:
    return _("Not applied: %(why)s") % {"why": explain(exc)}, "ctl-msg msg-error"


def _opt_num(text, name: str):
    """A number from an optional text field (None if empty); ControlError names the field if bad."""
    s = guard.text(text)
    if s is None and text is not None:
        raise session.ControlError(f"{name}: allowed a number")
    s = (s or "").strip()
    if not s:
        return None
    v = guard.number(s)
    if v is None:
        raise session.ControlError(f"{name} = {s[:40]!r}: not a finite number")
    return v


@dash.callback(
    *FL_MSG,
    Input(f"{P}-inject", "n_clicks"),
    Input(f"{P}-schedule", "n_clicks"),
    State(f"{P}-kind", "value"),
    State(f"{P}-target", "value"),
    State(f"{P}-at", "value"),
    State(f"{P}-dur", "value"),
    State(f"{P}-factor", "value"),
    State(f"{P}-period", "value"),
    *ACTOR,
    prevent_initial_call=True,
)
def on_fault(_inject, _schedule, kind, target, at, dur, factor, period, choice, token, viewer, secret):
    """Inject now or schedule: the fields read here, the fault checked once by `Twin.send`, and the
    line says what the engine answered (applied at t = ..., or why not)."""
    trig = ctx.triggered_id
    if trig not in (f"{P}-inject", f"{P}-schedule") or not _clicked():
        return no_update, no_update
    tw = twin_for(choice)[0]
    actor = guard.actor(viewer, token, secret)
    try:
        spec = {"kind": kind, "target": (guard.text(target) or "").strip()}
        d = _opt_num(dur, "duration_s")
        if d is not None:
            spec["duration_s"] = d
        extra = getattr(faultview.extra_field(kind), "name", None)
        if extra in ("factor", "period_s"):       # the console's two inputs for a kind's own number
            spec[extra] = _opt_num(factor if extra == "factor" else period, extra)
        if trig == f"{P}-schedule":
            try:
                spec["at_s"] = faultview.parse_at(guard.text(at), float(getattr(tw.snapshot, "sim_time", 0.0)))
            except ValueError as exc:
                raise session.ControlError(str(exc)) from None
    except session.ControlError as exc:
        return _err(exc)
    ticket = tw.send("fault", spec, **actor)
    return answer.sent(tw, ticket, lambda: faultview.fault_message(ticket.command.spec), TICKET)


@dash.callback(
    *FL_MSG,
    Input(f"{P}-policy-apply", "n_clicks"),
    State(f"{P}-detect", "value"),
    State(f"{P}-redundant", "value"),
    State(f"{P}-weights", "value"),
    *ACTOR,
    prevent_initial_call=True,
)
def on_policy(_apply, detect, redundant, weights, choice, token, viewer, secret):
    """Send a "policy" command: detection time, redundant experts, where weights come from."""
    if not _clicked():
        return no_update, no_update
    tw = twin_for(choice)[0]
    try:
        if guard.number(detect) is None:
            raise session.ControlError("detect after: allowed a number of seconds 0 to 86,400")
        if redundant not in ("on", "off") or weights not in ("ems", "obs"):
            raise session.ControlError("policy: redundant experts on or off; weights from ems or obs")
        pol = {"detect_s": guard.number(detect), "redundant_experts": redundant != "off", "weights_from": weights}
    except session.ControlError as exc:
        return _err(exc)
    ticket = tw.send("policy", pol, **guard.actor(viewer, token, secret))
    return answer.sent(tw, ticket, lambda: _("%(what)s (applies to faults from now on)") % {"what": _capital(ticket.said)},
                  TICKET)


@dash.callback(
    *FL_MSG,
    Output(f"{P}-random", "value"),
    Input(f"{P}-random", "value"),
    State(f"{P}-random-rate", "value"),
    *ACTOR,
    prevent_initial_call=True,
)
def on_random(value, rate, choice, token, viewer, secret):
    """The random-failures switch: on starts failures at the given failure-clock rate, off stops
    them. The tick sets the switch to the twin's state, which lands here as a no-op."""
    tw = twin_for(choice)[0]
    on = isinstance(value, list) and "on" in value
    if on == (tw.random is not None):      # the switch follows the twin: nothing to do
        return no_update, no_update, no_update
    try:
        h = guard.number(rate)
        if on and not (h is not None and 0 < h <= RANDOM_MAX):
            raise session.ControlError(f"random failures: rate = {str(rate)[:40]}: allowed 0 < x <= {RANDOM_MAX:g} "
                                 f"failure-clock hours per sim second (switch off to stop)")
    except session.ControlError as exc:
        return (*_err(exc), [] if on else ["on"])
    ticket = tw.send("random", {"hours_per_sim_s": h if on else 0}, **guard.actor(viewer, token, secret))
    line = answer.sent(tw, ticket, lambda: _capital(ticket.said), TICKET)
    return (*line, ([] if on else ["on"]) if ticket.refused else no_update)


@dash.callback(
    *FL_MSG,
    Input({"type": f"{P}-demo", "index": ALL}, "n_clicks"),
    *ACTOR,
    prevent_initial_call=True,
)
def on_demo(clicks, choice, token, viewer, secret):
    """Reset the viewed twin to a fault demo (its scenario, seed, policy and faults); the demo is
    picked by name among the catalog's, never a path."""
    trig = ctx.triggered_id
    if not isinstance(trig, dict) or not _clicked():
        return no_update, no_update
    tw = twin_for(choice)[0]
    try:
        if trig.get("index") not in {d["name"] for d in faultview.demos()}:
            raise session.ControlError("demo: allowed one of the demo buttons")
    except session.ControlError as exc:
        return _err(exc)
    ticket = tw.send("reset", {"faults": trig["index"]}, **guard.actor(viewer, token, secret))
    title = next((d["title"] for d in faultview.demos() if d["name"] == trig["index"]), trig["index"])
    return answer.sent(tw, ticket, lambda: faultview.demo_message(title, eventtext.said(ticket.said)), TICKET)


# Locked shared twin: the page's action buttons are disabled and say why (drawn in the browser
# from the page's beat, which says whether this tab may use the shared controls).
clientside_callback(
    """function (beat, ids) {
        var locked = !!(beat && beat.locked);
        var why = locked ? "The shared twin is locked by the instructor: enter the instructor token " +
            "under \\u201cScenario & twin\\u201d, or open a private sandbox to break things yourself." : "";
        return [locked, locked, locked, (ids || []).map(function () { return locked; }), why];
    }""",
    Output(f"{P}-inject", "disabled"),
    Output(f"{P}-schedule", "disabled"),
    Output(f"{P}-policy-apply", "disabled"),
    Output({"type": f"{P}-demo", "index": ALL}, "disabled"),
    Output(f"{P}-lock", "children"),
    Input(beat_id(P), "data"),
    State({"type": f"{P}-demo", "index": ALL}, "id"),
)


@dash.callback(Output(f"{P}-csv-dl", "data"), Input(f"{P}-csv", "n_clicks"), Input(f"{P}-json", "n_clicks"),
               State("ctl-twin", "data"), prevent_initial_call=True)
def download_csv(_csv, _json, choice):
    """Every fault report the viewed twin's run keeps (each frozen when service was restored; the
    table shows only the newest) as CSV or JSON, named after the run and the sim time."""
    if not _clicked():
        return no_update
    snap = twin_for(choice)[0].snapshot
    rows = faultreport.export_rows(snap)
    if ctx.triggered_id == f"{P}-json":
        return dcc.send_string(faultrows.json_text(rows), faultreport.file_name(snap, "json"))
    return dcc.send_string(faultrows.csv_text(rows), faultreport.file_name(snap, "csv"))


@dash.callback(
    Output(f"{P}-report-id", "data"),
    Output(f"{P}-report", "children"),
    Input({"type": faulttable.LINK, "index": ALL, "at": ALL}, "n_clicks"),
    *[Input(f"{P}-{name}-chart", "clickAnnotationData") for name in CHARTS],
    State("ctl-twin", "data"),
    State(f"{P}-whatif-job", "data"),
    prevent_initial_call=True,
)
def on_report(_links, *args):
    """Open a fault's incident report from the timeline, the table's # or a chart's label; close it."""
    *_notes, choice, whatif = args
    trig = ctx.triggered_id
    if isinstance(trig, dict):                     # a link (or the report's close button)
        if not _clicked():
            return no_update, no_update
        fid = faultreport.fault_id(trig.get("index"))
    else:                                          # a label on a chart
        fid = faultreport.fault_id(ctx.triggered[0]["value"] if ctx.triggered else None)
    if not fid:
        return None, None
    tw = twin_for(choice)[0]
    snap = tw.snapshot
    r = faultreport.with_whatif(faultreport.find(snap, fid), whatif, tw.params.faults)
    return fid, faultreport.panel(r, float(snap.sim_time)) if r else faultreport.missing(fid)


@dash.callback(
    *FL_MSG,
    Output(f"{P}-whatif-job", "data"),
    Output(f"{P}-whatif-tick", "disabled"),
    Input({"type": faultreport.WHATIF, "index": ALL}, "n_clicks"),
    State("ctl-twin", "data"),
    State("ctl-secret", "data"),
    prevent_initial_call=True,
)
def on_whatif(_clicks, choice, secret):
    """Queue the what-if of the demo the viewed twin replays, as a background job of this browser."""
    if not _clicked():
        return no_update, no_update, no_update, no_update
    tw = twin_for(choice)[0]
    snap, demo = tw.snapshot, tw.params.faults
    if not demo:
        return (_("Not run: a what-if replays a fault demo; load one from Demos (it resets the twin you view)"),
                "ctl-msg msg-error", no_update, no_update)
    sim = max(float(getattr(snap, "sim_time", 0.0)), 1.0)
    rate = float((getattr(snap, "kpis", None) or {}).get("arrived") or 0) / sim
    try:
        duration = float(load_fault_file(demo).get("duration_s") or sim)
        who, addr = guard.client(secret)
        job = jobs.pool().submit("whatif", incidentjob.whatif_job, (demo,), total=incidentjob.RUNS,
                                 cost_s=incidentjob.cost_s(duration, rate), client=who, addr=addr)
    except ValueError as exc:                    # jobs.JobRefused is a ValueError
        return _err(exc) + (no_update, no_update)
    return (_("The what-if is queued as a background job: the demo to its end, then without the fault and without "
              "its mitigation."), "ctl-msg msg-ok", {"job": job, "faults": demo}, False)


@dash.callback(
    *FL_MSG,
    Output(f"{P}-whatif-job", "data", allow_duplicate=True),
    Output(f"{P}-whatif-tick", "disabled", allow_duplicate=True),
    Output(f"{P}-report", "children", allow_duplicate=True),
    Input(f"{P}-whatif-tick", "n_intervals"),
    State(f"{P}-whatif-job", "data"),
    State(f"{P}-report-id", "data"),
    State("ctl-twin", "data"),
    State("ctl-secret", "data"),
    prevent_initial_call=True,
)
def on_whatif_tick(_n, store, report_id, choice, secret):
    """Follow the what-if job; when it is done, keep its result and show it in the open report."""
    store = guard.store(store)
    job = jobs.pool().view(store.get("job"), guard.client(secret)[0])
    if job is None:
        return no_update, no_update, no_update, True, no_update
    if job["state"] in ("queued", "running"):
        return (_("What-if: %(done)s of %(total)s runs (%(used)s of at most %(cap)s CPU-s).") % {
            "done": job["done"], "total": job["total"], "used": f"{job['cpu_s']:,.0f}",
            "cap": f"{job['ceiling_s']:,.0f}"}, "ctl-msg", no_update, False, no_update)
    if job["state"] != "done":
        return (_("What-if not measured: %(why)s") % {"why": explain(job["message"])}, "ctl-msg msg-error",
                no_update, True, no_update)
    store = {**store, "result": job["result"]}
    tw = twin_for(choice)[0]
    fid = faultreport.fault_id(report_id)
    r = faultreport.with_whatif(faultreport.find(tw.snapshot, fid), store, tw.params.faults) if fid else None
    return (_("What-if measured: it is in the fault's report."), "ctl-msg msg-ok", store, True,
            faultreport.panel(r, float(tw.snapshot.sim_time)) if r else no_update)


# an opened report scrolls into view (it may be opened from the charts above it or the timeline below)
clientside_callback(
    """function (children) {
        var el = document.getElementById("fl-report");
        if (children && el && el.scrollIntoView) { el.scrollIntoView({behavior: "smooth", block: "nearest"}); }
        return window.dash_clientside.no_update;
    }""",
    Output(f"{P}-report", "title"),
    Input(f"{P}-report", "children"),
    prevent_initial_call=True,
)
