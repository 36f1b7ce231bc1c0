"""Failures: a fault console (pick a part and a fault, inject now or schedule), the fault policy,
random failures and replayable demos; every fault marked on the KPI charts, measured in a table,
and failed parts drawn on the topology."""
from __future__ import annotations

import dash
import dash_cytoscape as cyto
from dash import ALL, Input, Output, State, clientside_callback, ctx, dcc, html, no_update

from twin import session as S
from twin.engine.faults import EXAMPLES, KINDS, RANDOM_MAX
from twin.ui import components as C
from twin.ui import faultview as FV
from twin.ui import figures as F
from twin.ui import guard as G
from twin.ui import theme as T
from twin.ui import topoview as TV
from twin.ui.live import Tick, status_payload, twin_for

dash.register_page(__name__, path="/failures", name="Failures", title="Failures · CloudMatrix Twin", order=6)

P = "fl"
TICK_MS = 1000
CHART_H = 230
DEFAULT_KIND = "l2"

CHARTS = {
    "tpot": F.StripSpec("Time per output token (ms)", "ms", (
        F.Series("tpot_p50_ms", "p50", T.PURPLE), F.Series("tpot_p99_ms", "p99", T.PINK, dash="dot"))),
    "ttft": F.StripSpec("Time to first token p50 (s)", "s", (
        F.Series("ttft_p50_ms", "p50", T.TEAL, scale=1e-3),)),
    "good": F.StripSpec("Goodput (output tokens/s meeting the SLOs)", "tok/s", (
        F.Series("goodput_tps", "goodput", T.GREEN, fill=True),
        F.Series("output_tps", "all output", T.ORANGE, dash="dot"))),
    "slo": F.StripSpec("SLO attainment (%)", "%", (
        F.Series("slo_attainment", "TTFT and TPOT met", T.BLUE, scale=100),), y_range=(0, 105)),
}

HELP = ("Click a part to pick it (the fault kind follows). The whole supernode shows nodes, UB sub-planes "
        "and RDMA switches; open a node for its dies, CPUs, L1 switches and NICs, or a sub-plane for its "
        "L2 switches and optical links. Failed parts are red and dashed.")


def _system(tw) -> str:
    return TV.system_of(getattr(tw.snapshot, "deployment", None))


def _initial(system: str, target: str | None, kind: str | None) -> tuple[str, str]:
    """Kind and target from the URL (?target=<id>&kind=<kind>), with sensible fallbacks."""
    target = (target or "").strip()
    if kind not in KINDS:
        picked = FV.pick(system, target) if target else None
        kind = picked[0] if picked else DEFAULT_KIND
        if picked:
            target = picked[1]
    if not target:
        target = EXAMPLES.get(kind, "")
    return kind, target


def _extra_styles(kind: str) -> tuple[dict, dict]:
    show = FV.EXTRA_FIELDS.get(kind)
    return ({} if show == "factor" else {"display": "none"}), ({} if show == "period_s" else {"display": "none"})


def _field(label: str, child, title: str = "", **kw) -> html.Div:
    return html.Div([html.Label(label, className="ctl-label"), child], className="field", title=title, **kw)


def _console(system: str, kind: str, target: str) -> html.Div:
    fstyle, pstyle = _extra_styles(kind)
    return C.panel([
        html.Div([
            _field("Fault", dcc.Dropdown(id=f"{P}-kind", options=FV.kind_options(), value=kind, clearable=False,
                                         searchable=True, className="dd fl-kind")),
            _field("Part (topology id)", html.Div([
                dcc.Input(id=f"{P}-target", type="text", value=target, list=f"{P}-target-list",
                          className="text-input fl-target", autoComplete="off", spellCheck=False,
                          placeholder=EXAMPLES.get(kind, "")),
                html.Datalist(id=f"{P}-target-list"),
            ]), title="A topology id: dies nNN/npuP/dD, NPUs nNN/npuP, CPUs nNN/cpuC, nodes nNN, L1 nNN/l1-K, "
                      "L2 spK/l2-J, sub-planes spK, optical links nNN/l1-K--spK/l2-J, RDMA NICs nNN/rdmaP, "
                      "RDMA switches rdma/spine-0, VPC cards nNN/vpc"),
        ], className="fl-row"),
        html.Div(FV.target_hint(system, kind, target), id=f"{P}-target-hint", className="hint fl-hint"),
        html.Div([
            _field("At sim time (s)", dcc.Input(id=f"{P}-at", type="text", placeholder="e.g. 300 or +30",
                                                className="num-input", autoComplete="off"),
                   title="For Schedule: a sim time in seconds, or +N for N seconds from now"),
            _field("Duration (s, optional)", dcc.Input(id=f"{P}-dur", type="text", placeholder="until repaired",
                                                       className="num-input", autoComplete="off"),
                   title="How long the part stays broken; empty = until detected and repaired (policy)"),
            _field("Capacity kept (0–1)", dcc.Input(id=f"{P}-factor", type="text", placeholder="0.5",
                                                    className="num-input", autoComplete="off"),
                   title="optical_degrade: fraction of the link's capacity that remains (0 <= f < 1)",
                   id=f"{P}-factor-wrap", style=fstyle),
            _field("Flap period (s)", dcc.Input(id=f"{P}-period", type="text", placeholder="10",
                                                className="num-input", autoComplete="off"),
                   title="optical_flap: down and up once per period (0.1 to 3600 s)",
                   id=f"{P}-period-wrap", style=pstyle),
            html.Div([
                html.Button("Inject now", id=f"{P}-inject", className="btn btn-danger", n_clicks=0,
                            title="Break the part at the current sim time"),
                html.Button("Schedule", id=f"{P}-schedule", className="btn", n_clicks=0,
                            title="Break the part at the sim time given on the left"),
            ], className="field-row fl-buttons"),
        ], className="fl-row fl-row-end"),
        html.Div(id=f"{P}-msg", className="ctl-msg", role="status"),
        html.Div(id=f"{P}-lock", className="lock-note"),
    ], "Fault console", "config", className="fl-console")


def _policy(policy: dict) -> html.Div:
    return C.panel([
        html.Div([
            _field("Detect after (s)", dcc.Input(id=f"{P}-detect", type="number", value=policy.get("detect_s", 60),
                                                 className="num-input", debounce=True),
                   title="Seconds from a fault to its detection (0 to 86,400); ref 6: about one minute"),
            _field("Redundant experts", dcc.RadioItems(
                id=f"{P}-redundant", options=[{"label": "on", "value": "on"}, {"label": "off", "value": "off"}],
                value="on" if policy.get("redundant_experts", True) else "off", inline=True,
                className="radio-pills"),
                title="On: a redundant expert takes over a lost decode die in about a second. Off: the "
                      "decode instance restarts and reloads its weights"),
            _field("Weights from", dcc.RadioItems(
                id=f"{P}-weights", options=[{"label": "EMS cache", "value": "ems"},
                                            {"label": "object storage", "value": "obs"}],
                value=policy.get("weights_from", "ems"), inline=True, className="radio-pills"),
                title="Where a restarting instance loads the model: the EMS model cache (seconds) or "
                      "OBS object storage (minutes)"),
            html.Button("Apply policy", id=f"{P}-policy-apply", className="btn", n_clicks=0),
        ], className="fl-row fl-row-end"),
        html.Div(FV.policy_text(policy), id=f"{P}-policy-now", className="hint"),
        html.Div("A policy change applies to faults that start after it.", className="hint small"),
    ], "Fault policy", "config")


def _random(system: str, random_h) -> html.Div:
    return C.panel([
        html.Div([
            dcc.Checklist(id=f"{P}-random", options=[{"label": " Random failures", "value": "on"}],
                          value=[], className="switch"),
            _field("Failure-clock hours per sim second", dcc.Input(
                id=f"{P}-random-rate", type="number", value=random_h or 1, className="num-input", debounce=True),
                title=f"How fast the failure clock runs (0 < x <= {RANDOM_MAX:g}): at 1, a simulated second stands for "
                      "an hour of component MTBF (catalog assumptions)"),
        ], className="fl-row fl-row-end"),
        html.Div(FV.random_text(system, random_h), id=f"{P}-random-now", className="hint"),
    ], "Random failures", "model")


def _demos() -> html.Div:
    items = []
    for d in FV.demos():
        at = ", ".join(f"{a:g}" for a in d["at_s"])
        meta = f"{d['scenario']} · seed {d['seed']} · fault at {at} s"
        items.append(html.Div([
            html.Button(d["title"], id={"type": f"{P}-demo", "index": d["name"]}, className="btn demo-btn",
                        n_clicks=0, title=f"{d['description']} ({d['name']}: {meta}, {d['duration_s']:g} s run)"),
            html.Div(meta, className="demo-meta"),
        ], className="demo"))
    return C.panel([
        html.Div(items, className="demos"),
        html.Div("A demo resets the twin you view to its scenario, seed, policy and faults, so it replays "
                 "exactly. Hover a button for the story; at 20× a fault at 120 s comes in 6 s.",
                 className="hint small"),
    ], "Demos", "config")


def _legend() -> html.Div:
    return html.Div([
        html.Span([html.Span(className="swatch", style={"background": T.RED, "opacity": 0.5}), "fault until recovered"]),
        html.Span([html.Span(className="swatch swatch-line", style={"background": T.RED}), "struck"]),
        html.Span([html.Span(className="swatch swatch-dash", style={"borderColor": T.YELLOW}), "detected"]),
    ], className="legend")


def _picker(system: str) -> html.Div:
    """The topology picker; its elements arrive with the second tick (drawing them takes the browser
    about a second, which would otherwise hold back the page's first numbers)."""
    return C.panel([
        html.Div([
            dcc.Dropdown(id=f"{P}-view-select", options=TV.view_options(system), value=TV.AGG,
                         clearable=False, className="dd dd-wide"),
            html.Span(HELP, className="hint small"),
        ], className="fl-topo-bar"),
        cyto.Cytoscape(
            id=f"{P}-cy", elements=[], stylesheet=FV.stylesheet(),
            layout={"name": "preset", "fit": True, "padding": 14, "view": TV.AGG},
            autoRefreshLayout=False, boxSelectionEnabled=False, minZoom=0.2, maxZoom=4,
            className="topo-cy fl-cy", style={"width": "100%", "height": "420px"}),
        html.Div(id=f"{P}-failed", className="fl-failed"),
    ], "Pick a part · failed parts in red", "sim")


def layout(target: str | None = None, kind: str | None = None, **_kwargs):
    tw, _ = twin_for(None)
    system = _system(tw)
    kind, target = _initial(system, target, kind)
    return html.Div([
        dcc.Interval(id=f"{P}-tick", interval=TICK_MS),
        dcc.Store(id=f"{P}-cursor"),
        dcc.Store(id=f"{P}-view", data=TV.AGG),
        dcc.Store(id=f"{P}-live"),
        dcc.Store(id=f"{P}-strips"),
        C.page_header("Failures", "Break any part of the supernode while it serves and watch what follows: "
                      "detection, rerouting or recovery, requests requeued (never lost), and what it costs in "
                      "latency and goodput. Compare policies, replay the demos.",
                      html.Div(id=f"{P}-demo-line", className="scenario-line")),
        html.Div(id=f"{P}-banner", className="banner", role="alert"),
        html.Div([
            html.Div([_console(system, kind, target), _demos()], className="fl-stack"),
            _picker(system),
        ], className="two-even fl-block"),
        C.panel(html.Div(id=f"{P}-table"), "Faults: detection, recovery and cost", "sim", extra=_legend(),
                className="fl-block"),
        html.Div([html.Div(C.graph(f"{P}-{name}-chart", F.empty_figure(spec.title), CHART_H), className="chart")
                  for name, spec in CHARTS.items()], className="chart-grid grid-2 fl-block"),
        html.Div([
            _policy(tw.policy),
            _random(system, tw.random),
            C.panel(html.Div(id=f"{P}-events", className="events"), "Fault timeline", "sim"),
        ], className="fl-three fl-block"),
    ])


# ---- live updates -----------------------------------------------------------------------------

def _window_start(hist: dict) -> float | None:
    ts = (hist or {}).get("t") or []
    if not ts:
        return None
    return float(ts[max(0, len(ts) - F.HISTORY_POINTS)])


def _cursor(cur) -> dict:
    """This page's cursor fields from the browser, each of the right type (else dropped: a redraw)."""
    cur = G.store(cur)
    out = {k: cur[k] for k in ("system", "view") if G.ident(cur.get(k))}
    if isinstance(cur.get("drawn"), bool):
        out["drawn"] = cur["drawn"]
    if isinstance(cur.get("s"), dict):
        out["s"] = {k: v for k, v in cur["s"].items() if type(v) is int}
    return out


def _banner(snap) -> tuple:
    if getattr(snap, "partitioned", False):
        return ([html.B("Partitioned. "), getattr(snap, "message", "") or "part of the system is cut off"],
                "banner banner-bad")
    return "", "banner"


def _demo_line(tw, snap) -> str:
    name = FV.demo_name(tw.params.faults)
    base = f"{getattr(snap, 'scenario', '')} · seed {getattr(snap, 'seed', '')}"
    return f"Demo {name}: {base}" if name else base


def _charts(t: Tick, panels: dict, changed) -> tuple[list, object]:
    """The four KPI charts: whole figures (with fault marks) on a first draw, else one compact
    update for all four (the new times once, the new values per series, the fault marks only when
    they moved) that the browser merges in (assets/twin.js `strips`, which also keeps each chart
    to its last HISTORY_POINTS points, so the charts are never resent whole)."""
    hist = getattr(t.snap, "history", None) or {}
    if t.mode == "none":
        return [no_update] * len(CHARTS), no_update
    sig, (shapes, notes) = panels["marks"]
    if t.mode == "full":
        changed("marks", sig, force=True)
        figs = []
        for spec in CHARTS.values():
            fig = F.strip_figure(spec, hist, height=CHART_H)
            fig["layout"]["shapes"], fig["layout"]["annotations"] = shapes, notes
            figs.append(fig)
        return figs, no_update
    ext = [F.extend(spec, hist, t.since_t) for spec in CHARTS.values()]
    new_marks = changed("marks", sig)
    if ext[0] is None and not new_marks:
        return [no_update] * len(CHARTS), no_update
    upd = {"v": t.cursor["v"], "keep": F.HISTORY_POINTS, "x": ext[0][0]["x"][0] if ext[0] else [],
           "y": [e[0]["y"] if e else [] for e in ext]}
    if new_marks:
        upd["shapes"], upd["notes"] = shapes, notes
    return [no_update] * len(CHARTS), upd


def _panels(system: str, snap) -> dict:
    """What the tick draws from one snapshot, as (signature, content) per part: built once per
    snapshot version for every viewer of the twin (Twin.memo); each viewer's cursor keeps the
    signatures it has, so a part is sent only when it changed."""
    now = float(getattr(snap, "sim_time", 0.0))
    reports = list(getattr(snap, "faults", ()) or ())
    failed = list(getattr(snap, "failed", ()) or ())
    hist = getattr(snap, "history", None)
    rows = FV.rows(reports, hist, now)
    summary = getattr(snap, "fault_summary", None) or {}
    evs = [e for e in (getattr(snap, "events", ()) or ()) if e.get("kind") in FV.TIMELINE_KINDS][-14:]
    marks = FV.marks(reports, now, _window_start(hist))
    banner = [getattr(snap, "partitioned", False), getattr(snap, "message", "")]
    return {"rows": (FV.crc([rows, summary.get("injected")]), FV.table(rows, now, summary)),
            "events": (FV.crc(evs), FV.timeline(evs)),
            "failed": (FV.crc([failed, [r["target"] for r in reports]]), FV.failed_list(system, failed, reports)),
            "banner": (FV.crc(banner), _banner(snap)),
            "marks": (FV.crc(marks), marks)}


@dash.callback(
    [Output(f"{P}-{name}-chart", "figure") for name in CHARTS]
    + [Output(f"{P}-strips", "data"), Output(f"{P}-table", "children"), Output(f"{P}-events", "children"), Output(f"{P}-failed", "children"),
       Output(f"{P}-banner", "children"), Output(f"{P}-banner", "className"),
       Output(f"{P}-policy-now", "children"), Output(f"{P}-detect", "value"), Output(f"{P}-redundant", "value"),
       Output(f"{P}-weights", "value"), Output(f"{P}-random-now", "children"),
       Output(f"{P}-random", "value", allow_duplicate=True), Output(f"{P}-random-rate", "value"),
       Output(f"{P}-demo-line", "children"),
       Output(f"{P}-live", "data"), Output(f"{P}-cy", "elements", allow_duplicate=True),
       Output(f"{P}-cy", "layout", allow_duplicate=True), Output(f"{P}-view", "data", allow_duplicate=True),
       Output(f"{P}-view-select", "options"),
       Output(f"{P}-cursor", "data"), Output("shell-status", "data", allow_duplicate=True)],
    Input(f"{P}-tick", "n_intervals"),
    State("ctl-twin", "data"),
    State(f"{P}-cursor", "data"),
    State(f"{P}-view", "data"),
    prevent_initial_call="initial_duplicate",
)
def tick(_n, choice, cursor, view_name):
    """One poll: nothing when the snapshot is unchanged; else one compact update for the charts
    (new points, and the fault marks when they moved), and each panel only when its content changed."""
    t = Tick.read(cursor, choice)
    cursor = _cursor(cursor)
    tw, snap = t.twin, t.snap
    view_name = G.ident(view_name) or TV.AGG
    system = _system(tw)
    rebuild = cursor.get("system") not in (None, system)
    full = t.mode == "full"
    sigs = {} if full else dict(cursor.get("s") or {})

    def changed(name: str, sig: int, force: bool = False) -> bool:
        if not (full or force) and sigs.get(name) == sig:
            return False
        sigs[name] = sig
        return True

    # cheap parts that change without a new snapshot (a policy set on a paused twin); the policy
    # and random-failure fields follow the viewed twin (another viewer or a demo may change them)
    pol = [no_update] * 4
    if changed("pol", FV.crc(tw.policy)):
        pp = tw.policy
        pol = [FV.policy_text(pp), pp.get("detect_s", no_update),
               ("on" if pp.get("redundant_experts") else "off") if pp else no_update, pp.get("weights_from", no_update)]
    rnd = [no_update] * 3
    if changed("rnd", FV.crc(tw.random)):
        on = tw.random is not None
        rnd = [FV.random_text(system, tw.random), ["on"] if on else [], tw.random if on else no_update]
    demo = _demo_line(tw, snap) if changed("demo", FV.crc([tw.params.faults, getattr(snap, "scenario", ""),
                                                           getattr(snap, "seed", "")])) else no_update
    n_c = len(CHARTS)
    if not t.changed and cursor.get("view") == view_name and not rebuild and cursor.get("drawn"):
        cur = dict(cursor, **t.cursor, s=sigs)
        return [no_update] * (n_c + 6) + pol + rnd + [demo] + [no_update] * 5 + [cur, t.status]

    panels = tw.memo(f"fl-panels:{system}", lambda s_: _panels(system, s_))
    figs, strips = _charts(t, panels, changed)

    def send(name: str):
        sig, content = panels[name]
        return content if t.changed and changed(name, sig) else no_update
    tbl, events, fl, banner = send("rows"), send("events"), send("failed"), send("banner")
    banner_txt, banner_cls = (no_update, no_update) if banner is no_update else banner

    try:
        v = TV.view(system, view_name)
    except ValueError:
        v = TV.view(system, TV.AGG)
    live = tw.memo(f"fl-topo:{system}:{v.name}",
                   lambda s: dict(TV.live(v, s), npart=FV.partial_nodes(v, getattr(s, "failed", ()))))
    first = not cursor                          # the very first tick: numbers first, drawing next
    draw = not first and not cursor.get("drawn")
    cur = dict(t.cursor, view=v.name, system=system, s=sigs, drawn=not first)
    if rebuild or draw or v.name != view_name:
        topo = [v.elements, {"name": "preset", "fit": True, "padding": 14, "view": f"{system}:{v.name}"},
                v.name, TV.view_options(system)]
    else:
        topo = [no_update] * 4
    return (figs + [strips, tbl, events, fl, banner_txt, banner_cls] + pol + rnd + [demo, live] + topo
            + [cur, t.status])


clientside_callback(
    dash.ClientsideFunction(namespace="twin", function_name="strips"),
    [Output(f"{P}-{name}-chart", "figure", allow_duplicate=True) for name in CHARTS],
    Input(f"{P}-strips", "data"),
    [State(f"{P}-{name}-chart", "figure") for name in CHARTS],
    prevent_initial_call=True,
)


clientside_callback(
    dash.ClientsideFunction(namespace="twin", function_name="topo"),
    Output(f"{P}-cy", "elements"),
    Input(f"{P}-live", "data"),
    State(f"{P}-cy", "elements"),
    State(f"{P}-view", "data"),
    prevent_initial_call=True,
)


@dash.callback(
    Output(f"{P}-view", "data"),
    Output(f"{P}-cy", "elements", allow_duplicate=True),
    Output(f"{P}-cy", "layout"),
    Input(f"{P}-view-select", "value"),
    State(f"{P}-view", "data"),
    State("ctl-twin", "data"),
    prevent_initial_call=True,
)
def on_view(selected, current, choice):
    """Show the whole supernode, one node or one UB sub-plane in the picker."""
    tw, _ = twin_for(choice)
    system = _system(tw)
    selected, current = G.ident(selected), G.ident(current)
    try:
        v = TV.view(system, selected or TV.AGG)
    except ValueError:
        v = TV.view(system, TV.AGG)
    if v.name == current:
        return no_update, no_update, no_update
    return v.name, v.elements, {"name": "preset", "fit": True, "padding": 14, "view": v.name}


# ---- picking a part ---------------------------------------------------------------------------

@dash.callback(
    Output(f"{P}-kind", "value"),
    Output(f"{P}-target", "value"),
    Output(f"{P}-target", "placeholder"),
    Output(f"{P}-target-hint", "children"),
    Output(f"{P}-factor-wrap", "style"),
    Output(f"{P}-period-wrap", "style"),
    Input(f"{P}-kind", "value"),
    Input(f"{P}-cy", "tapNodeData"),
    Input(f"{P}-cy", "tapEdgeData"),
    State(f"{P}-target", "value"),
    State("ctl-twin", "data"),
    prevent_initial_call=True,
)
def on_pick(kind, node, edge, target, choice):
    """A new fault kind keeps the part if it fits (else a related part or the kind's example); a
    click on the drawing picks that part and, if needed, the fault kind that breaks it."""
    tw, _ = twin_for(choice)
    system = _system(tw)
    prop = ctx.triggered[0]["prop_id"] if ctx.triggered else ""
    kind = kind if isinstance(kind, str) and kind in KINDS else DEFAULT_KIND
    target = G.ident(target) or ""
    if prop.endswith("tapNodeData") or prop.endswith("tapEdgeData"):
        data = node if prop.endswith("tapNodeData") else edge
        data = data if isinstance(data, dict) else {}
        cid = G.ident(data.get("id")) or ""
        picked = FV.pick(system, cid, kind) if cid else None
        if picked is None:
            links = data.get("links") if type(data.get("links")) is int else "several"
            what = (f"a bundle of {links} links: open a sub-plane to pick one optical "
                    "link" if "==" in cid else
                    f"{cid!r} cannot be broken from here: pick a node, die, CPU, switch, NIC or optical link")
            fs, ps = _extra_styles(kind)
            return no_update, no_update, no_update, f"Not a fault target — {what}.", fs, ps
        kind, target = picked
    else:
        target = FV.related(system, kind, target)
    fs, ps = _extra_styles(kind)
    return kind, target, EXAMPLES.get(kind, ""), FV.target_hint(system, kind, target), fs, ps


@dash.callback(
    Output(f"{P}-target-list", "children"),
    Input(f"{P}-kind", "value"),
    Input(f"{P}-target", "value"),
    State("ctl-twin", "data"),
)
def on_suggest(kind, text, choice):
    """The searchable list of valid ids for the fault kind (filtered by what is typed)."""
    tw, _ = twin_for(choice)
    system = _system(tw)
    kind = kind if isinstance(kind, str) and kind in KINDS else DEFAULT_KIND
    return [html.Option(value=i) for i in FV.suggest(system, kind, G.ident(text) or "")]


# ---- actions ------------------------------------------------------------------------------------

def _clicked() -> bool:
    """True only for a real click: Dash also calls these callbacks (n_clicks = 0) when the page's
    components are inserted, prevent_initial_call notwithstanding."""
    return bool(ctx.triggered) and any(t.get("value") for t in ctx.triggered)


def _ok(tw, msg: str, note: str = "") -> tuple:
    where = "shared twin" if tw.shared else "your sandbox"
    return f"{msg} — applied to the {where}", "ctl-msg msg-ok", status_payload(tw, note)


def _err(tw, exc, note: str = "") -> tuple:
    return f"Not applied: {exc}", "ctl-msg msg-error", status_payload(tw, note)


def _opt_num(text, name: str):
    """A number from an optional text field (None if empty); ControlError names the field if bad."""
    s = G.text(text)
    if s is None and text is not None:
        raise S.ControlError(f"{name}: allowed a number")
    s = (s or "").strip()
    if not s:
        return None
    v = G.number(s)
    if v is None:
        raise S.ControlError(f"{name} = {s[:40]!r}: not a finite number")
    return v


def _actor(viewer, token, secret) -> dict:
    """who / token / client of an action, from checked browser values."""
    token = G.token(token)
    return dict(who=FV.who(G.viewer(viewer), token), token=G.tok(token), client=G.client(secret)[0])


@dash.callback(
    Output(f"{P}-msg", "children"),
    Output(f"{P}-msg", "className"),
    Output("shell-status", "data", allow_duplicate=True),
    Input(f"{P}-inject", "n_clicks"),
    Input(f"{P}-schedule", "n_clicks"),
    State(f"{P}-kind", "value"),
    State(f"{P}-target", "value"),
    State(f"{P}-at", "value"),
    State(f"{P}-dur", "value"),
    State(f"{P}-factor", "value"),
    State(f"{P}-period", "value"),
    State("ctl-twin", "data"),
    State("ctl-token", "data"),
    State("ctl-viewer", "data"),
    State("ctl-secret", "data"),
    prevent_initial_call=True,
)
def on_fault(_inject, _schedule, kind, target, at, dur, factor, period, choice, token, viewer, secret):
    """Inject now or schedule: validated first (the twin is untouched if the fault is refused)."""
    trig = ctx.triggered_id
    if trig not in (f"{P}-inject", f"{P}-schedule") or not _clicked():
        return no_update, no_update, no_update
    tw, note = twin_for(choice)
    actor = _actor(viewer, token, secret)
    try:
        tw.require(actor["token"], actor["client"])
        if not isinstance(kind, str) or kind not in KINDS:
            raise S.ControlError(f"fault kind: allowed {', '.join(KINDS)}")
        spec = {"kind": kind, "target": (G.text(target) or "").strip()}
        d = _opt_num(dur, "duration_s")
        if d is not None:
            spec["duration_s"] = d
        extra = FV.EXTRA_FIELDS.get(kind)
        if extra == "factor":
            spec["factor"] = _opt_num(factor, "factor")
        elif extra == "period_s":
            spec["period_s"] = _opt_num(period, "period_s")
        if trig == f"{P}-schedule":
            try:
                spec["at_s"] = FV.parse_at(G.text(at), float(getattr(tw.snapshot, "sim_time", 0.0)))
            except ValueError as exc:
                raise S.ControlError(str(exc)) from None
        spec = tw.check_fault(spec)
        tw.control("fault", spec, **actor)
    except S.ControlError as exc:
        return _err(tw, exc, note)
    what = f"{FV.KIND_LABEL.get(spec['kind'], spec['kind'])}: {spec['target']}"
    when = f"scheduled at t = {spec['at_s']:,.1f} s" if "at_s" in spec else "injected now"
    dur = f" for {spec['duration_s']:g} s" if "duration_s" in spec else ""
    return _ok(tw, f"{what} {when}{dur}; watch the table below", note)


@dash.callback(
    Output(f"{P}-msg", "children", allow_duplicate=True),
    Output(f"{P}-msg", "className", allow_duplicate=True),
    Output("shell-status", "data", allow_duplicate=True),
    Input(f"{P}-policy-apply", "n_clicks"),
    State(f"{P}-detect", "value"),
    State(f"{P}-redundant", "value"),
    State(f"{P}-weights", "value"),
    State("ctl-twin", "data"),
    State("ctl-token", "data"),
    State("ctl-viewer", "data"),
    State("ctl-secret", "data"),
    prevent_initial_call=True,
)
def on_policy(_apply, detect, redundant, weights, choice, token, viewer, secret):
    """Send a "policy" command: detection time, redundant experts, where weights come from."""
    if not _clicked():
        return no_update, no_update, no_update
    tw, note = twin_for(choice)
    try:
        if G.number(detect) is None:
            raise S.ControlError("detect after: allowed a number of seconds 0 to 86,400")
        if redundant not in ("on", "off") or weights not in ("ems", "obs"):
            raise S.ControlError("policy: redundant experts on or off; weights from ems or obs")
        pol = {"detect_s": G.number(detect), "redundant_experts": redundant != "off", "weights_from": weights}
        msg = tw.control("policy", pol, **_actor(viewer, token, secret))
    except S.ControlError as exc:
        return _err(tw, exc, note)
    return _ok(tw, msg[0].upper() + msg[1:] + " (applies to faults from now on)", note)


@dash.callback(
    Output(f"{P}-msg", "children", allow_duplicate=True),
    Output(f"{P}-msg", "className", allow_duplicate=True),
    Output("shell-status", "data", allow_duplicate=True),
    Output(f"{P}-random", "value"),
    Input(f"{P}-random", "value"),
    State(f"{P}-random-rate", "value"),
    State("ctl-twin", "data"),
    State("ctl-token", "data"),
    State("ctl-viewer", "data"),
    State("ctl-secret", "data"),
    prevent_initial_call=True,
)
def on_random(value, rate, choice, token, viewer, secret):
    """The random-failures switch: on starts failures at the given failure-clock rate, off stops
    them. The tick sets the switch to the twin's state, which lands here as a no-op."""
    tw, note = twin_for(choice)
    on = isinstance(value, list) and "on" in value
    if on == (tw.random is not None):      # the switch follows the twin: nothing to do
        return no_update, no_update, no_update, no_update
    try:
        h = G.number(rate)
        if on and not (h is not None and 0 < h <= RANDOM_MAX):
            raise S.ControlError(f"random failures: rate = {str(rate)[:40]}: allowed 0 < x <= {RANDOM_MAX:g} "
                                 f"failure-clock hours per sim second (switch off to stop)")
        msg = tw.control("random", {"hours_per_sim_s": h if on else 0}, **_actor(viewer, token, secret))
    except S.ControlError as exc:
        return (*_err(tw, exc, note), [] if on else ["on"])
    return (*_ok(tw, msg[0].upper() + msg[1:], note), no_update)


@dash.callback(
    Output(f"{P}-msg", "children", allow_duplicate=True),
    Output(f"{P}-msg", "className", allow_duplicate=True),
    Output("shell-status", "data", allow_duplicate=True),
    Input({"type": f"{P}-demo", "index": ALL}, "n_clicks"),
    State("ctl-twin", "data"),
    State("ctl-token", "data"),
    State("ctl-viewer", "data"),
    State("ctl-secret", "data"),
    prevent_initial_call=True,
)
def on_demo(clicks, choice, token, viewer, secret):
    """Reset the viewed twin to a fault demo (its scenario, seed, policy and faults); the demo is
    picked by name among the catalog's, never a path."""
    trig = ctx.triggered_id
    if not isinstance(trig, dict) or not _clicked():
        return no_update, no_update, no_update
    tw, note = twin_for(choice)
    try:
        if trig.get("index") not in {d["name"] for d in FV.demos()}:
            raise S.ControlError("demo: allowed one of the demo buttons")
        msg = tw.control("reset", {"faults": trig["index"]}, **_actor(viewer, token, secret))
    except S.ControlError as exc:
        return _err(tw, exc, note)
    title = next((d["title"] for d in FV.demos() if d["name"] == trig["index"]), trig["index"])
    return _ok(tw, f"Demo \u201c{title}\u201d loaded ({msg})", note)


# Locked shared twin: the page's action buttons are disabled and say why (drawn in the browser
# from the status every tick already returns).
clientside_callback(
    """function (st, token, ids) {
        var locked = !!(st && st.locked && st.shared && !(token && token.ok));
        var why = locked ? "The shared twin is locked by the instructor: enter the instructor token " +
            "under \\u201cScenario & twin\\u201d, or open a private sandbox to break things yourself." : "";
        return [locked, locked, locked, (ids || []).map(function () { return locked; }), why];
    }""",
    Output(f"{P}-inject", "disabled"),
    Output(f"{P}-schedule", "disabled"),
    Output(f"{P}-policy-apply", "disabled"),
    Output({"type": f"{P}-demo", "index": ALL}, "disabled"),
    Output(f"{P}-lock", "children"),
    Input("shell-status", "data"),
    Input("ctl-token", "data"),
    State({"type": f"{P}-demo", "index": ALL}, "id"),
)
