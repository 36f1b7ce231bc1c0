"""Topology: the supernode drawn live, with drill-down to a node or a UB sub-plane."""
from __future__ import annotations

from urllib.parse import quote

import dash
import dash_cytoscape as cyto
from dash import Input, Output, State, clientside_callback, ctx, dcc, html, no_update

from twin.ui import components as C
from twin.ui import faultview as FV
from twin.ui import guard as G
from twin.ui import theme as T
from twin.ui import topoview as TV
from twin.ui.live import Tick, twin_for

dash.register_page(__name__, path="/topology", name="Topology", title="Topology · CloudMatrix Twin", order=1)

P = "topo"
TICK_MS = 1000

HELP = {
    TV.AGG: ("The whole supernode: 48 nodes in 12 compute racks. Every node has an L1 UB switch chip "
             "for each of the 7 UB sub-planes, and each L1 connects optically to all 16 L2 chips of its "
             "sub-plane: that is why every NPU reaches every other at nearly the same bandwidth (a flat "
             "network), which MoE all-to-all traffic needs. RDMA (orange, below) and VPC (green, right) "
             "are the scale-out and datacenter planes. Click a node or a sub-plane to open it."),
    "node": ("One node: 8 NPUs (16 dies, two per package), 4 Kunpeng CPUs and 7 L1 UB switches. Each die "
             "has links to all 7 L1 chips; the L1 chips lead to the 7 sub-planes above. NICs below carry "
             "RDMA. Border colour = pool (teal prefill, purple decode). Click anything for its numbers."),
    "subplane": ("One UB sub-plane: its 16 L2 switch chips (inner ring) and the L1 chip of every node that "
                 "belongs to it (outer ring, labelled by node). Every line is one optical link: each node "
                 "reaches every L2 chip directly, so any two nodes are two switch hops apart. Click a link "
                 "or a chip."),
}


def _kind_of(view_name: str) -> str:
    if view_name == TV.AGG:
        return TV.AGG
    return "subplane" if view_name.startswith("sp") else "node"


def _legend() -> html.Div:
    sw = [html.Span([html.Span(className="swatch", style={"background": c}), txt])
          for c, txt in zip(T.UTIL_STOPS, ("idle", "<20 %", "20–40 %", "40–60 %", "60–80 %", ">80 %"))]
    return html.Div([html.Span("utilisation:")] + sw + [
        html.Span([html.Span(className="swatch", style={"background": "#ff4d4f"}), "down (dashed)"]),
        html.Span([html.Span(className="swatch", style={"background": T.TEAL}), "prefill"]),
        html.Span([html.Span(className="swatch", style={"background": T.PURPLE}), "decode"]),
    ], className="legend")


def layout(view: str | None = None, **_kwargs):
    tw, _ = twin_for(None)
    system = TV.system_of(getattr(tw.snapshot, "deployment", None))
    name = view or TV.AGG
    try:
        v = TV.view(system, name)
    except ValueError:
        name, v = TV.AGG, TV.view(system, TV.AGG)
    return html.Div([
        dcc.Interval(id=f"{P}-tick", interval=TICK_MS),
        dcc.Store(id=f"{P}-cursor"),
        dcc.Store(id=f"{P}-view", data=name),
        dcc.Store(id=f"{P}-sel"),
        dcc.Store(id=f"{P}-live"),
        C.page_header("Topology", "CloudMatrix384 as built: compute racks, the 7 UB sub-planes, RDMA and "
                      "VPC planes. Link colour and width follow live utilisation.", _legend()),
        html.Div([
            html.Button("◀ Whole supernode", id=f"{P}-back", className="btn", n_clicks=0),
            html.Span(id=f"{P}-crumbs", className="crumbs", children=_crumb(name)),
            html.Div(dcc.Dropdown(id=f"{P}-select", options=TV.view_options(system), value=name,
                                  clearable=False, className="dd dd-wide"), style={"marginLeft": "auto"}),
        ], className="topo-bar"),
        html.Div([
            html.Div(cyto.Cytoscape(
                id=f"{P}-cy", elements=v.elements, stylesheet=TV.stylesheet(),
                layout={"name": "preset", "fit": True, "padding": 24, "view": name},
                autoRefreshLayout=False, boxSelectionEnabled=False, minZoom=0.2, maxZoom=4,
                className="topo-cy", style={"width": "100%", "height": "640px"}),
                className="panel topo-wrap"),
            html.Div([
                C.panel([html.Div(html.Div("Click an element to see its live numbers.", className="hint"),
                                  id=f"{P}-stats", className="stats"),
                         dcc.Link("Break this part →", id=f"{P}-break", href="/failures", className="break-link",
                                  style={"display": "none"})], "Selected", "sim"),
                C.panel(html.P(HELP[_kind_of(name)], id=f"{P}-help", className="hint"), "How to read this view"),
            ]),
        ], className="two-col"),
    ])


def _crumb(name: str) -> str:
    if name == TV.AGG:
        return "Supernode"
    if name.startswith("sp"):
        return f"Supernode › UB sub-plane {name[2:]}"
    return f"Supernode › node {name}"


def _sel_stats(system: str, snap, sel: dict) -> list[tuple[str, str]]:
    try:
        v = TV.view(system, sel.get("view") or TV.AGG)
    except ValueError:
        v = TV.view(system, TV.AGG)
    return TV.element_stats(v, snap, sel["kind"], sel["id"])


def _stats(rows) -> list:
    return [html.Div([html.Span(k, className="k"), html.Span(v, className="v")], className="row")
            for k, v in rows]


def _tapped(data) -> dict | None:
    """Tap data from cytoscape: a dict with a plain id (and kind), else nothing."""
    if not isinstance(data, dict) or G.ident(data.get("id")) is None:
        return None
    return {"id": data["id"], "kind": data.get("kind") if isinstance(data.get("kind"), str) else ""}


def _selection(sel) -> dict | None:
    """The page's own selection store, checked (kind, id, view) or nothing."""
    if not isinstance(sel, dict) or sel.get("kind") not in ("node", "edge") or G.ident(sel.get("id")) is None:
        return None
    return {"kind": sel["kind"], "id": sel["id"], "view": G.ident(sel.get("view")) or TV.AGG}


@dash.callback(
    Output(f"{P}-view", "data"),
    Output(f"{P}-cy", "elements", allow_duplicate=True),
    Output(f"{P}-cy", "layout"),
    Output(f"{P}-select", "value"),
    Output(f"{P}-crumbs", "children"),
    Output(f"{P}-help", "children"),
    Output(f"{P}-sel", "data"),
    Output(f"{P}-stats", "children", allow_duplicate=True),
    Input(f"{P}-cy", "tapNodeData"),
    Input(f"{P}-cy", "tapEdgeData"),
    Input(f"{P}-select", "value"),
    Input(f"{P}-back", "n_clicks"),
    State(f"{P}-view", "data"),
    State("ctl-twin", "data"),
    prevent_initial_call=True,
)
def navigate(node, edge, selected, _back, current, choice):
    """Drill down from the supernode (click a node or sub-plane), go back, or select an element."""
    trig = ctx.triggered_id
    prop = ctx.triggered[0]["prop_id"] if ctx.triggered else ""
    tw, _ = twin_for(choice)
    snap = tw.snapshot
    system = TV.system_of(getattr(snap, "deployment", None))
    node, edge, selected = _tapped(node), _tapped(edge), G.ident(selected)
    current = G.ident(current) or TV.AGG
    target, sel = current, None
    if trig == f"{P}-back":
        target = TV.AGG
    elif trig == f"{P}-select":
        target = selected or TV.AGG
    elif prop.endswith("tapNodeData") and node:
        if current == TV.AGG and node.get("kind") in ("node", "subplane"):
            target = node["id"]
        # the selection remembers the view it was made in: a drilled-into node keeps its
        # whole-node numbers (from the supernode view) while its parts are drawn
        sel = {"kind": "node", "id": node["id"], "view": current}
    elif prop.endswith("tapEdgeData") and edge:
        sel = {"kind": "edge", "id": edge["id"], "view": current}
    try:
        v = TV.view(system, target)
    except ValueError:
        target, v = TV.AGG, TV.view(system, TV.AGG)
    stats = _stats(_sel_stats(system, snap, sel)) if sel else \
        html.Div("Click an element to see its live numbers.", className="hint")
    if target == current:
        return no_update, no_update, no_update, no_update, no_update, no_update, sel, stats
    return (target, v.elements, {"name": "preset", "fit": True, "padding": 24, "view": target}, target,
            _crumb(target), HELP[_kind_of(target)], sel, stats)


@dash.callback(
    Output(f"{P}-live", "data"),
    Output(f"{P}-stats", "children"),
    Output(f"{P}-cursor", "data"),
    Output("shell-status", "data", allow_duplicate=True),
    Output(f"{P}-cy", "elements", allow_duplicate=True),
    Output(f"{P}-cy", "layout", allow_duplicate=True),
    Output(f"{P}-view", "data", allow_duplicate=True),
    Output(f"{P}-select", "options"),
    Input(f"{P}-tick", "n_intervals"),
    State("ctl-twin", "data"),
    State(f"{P}-cursor", "data"),
    State(f"{P}-view", "data"),
    State(f"{P}-sel", "data"),
    State(f"{P}-select", "options"),
    prevent_initial_call="initial_duplicate",
)
def tick(_n, choice, cursor, view_name, sel, options):
    """Compact live data for the current view (merged into the drawing in the browser).

    If the twin now runs a deployment on another system (after a reset), the drawing is rebuilt."""
    t = Tick.read(cursor, choice)
    view_name = G.ident(view_name) or TV.AGG
    cursor, sel = G.store(cursor), _selection(sel)
    system = TV.system_of(getattr(t.snap, "deployment", None))
    rebuild = cursor.get("system") not in (None, system)
    if not t.changed and cursor.get("view") == view_name and not rebuild:
        return (no_update,) * 3 + (t.status,) + (no_update,) * 4
    try:
        v = TV.view(system, view_name)
    except ValueError:
        v = TV.view(system, TV.AGG)
    live = t.twin.memo(f"topo:{system}:{v.name}", lambda s: TV.live(v, s))
    stats = _stats(_sel_stats(system, t.snap, sel)) if sel else no_update
    cur = dict(t.cursor, view=v.name, system=system)
    if rebuild or v.name != view_name:
        return (live, stats, cur, t.status, v.elements,
                {"name": "preset", "fit": True, "padding": 24, "view": f"{system}:{v.name}"},
                v.name, TV.view_options(system))
    return live, stats, cur, t.status, no_update, no_update, no_update, no_update


clientside_callback(
    dash.ClientsideFunction(namespace="twin", function_name="topo"),
    Output(f"{P}-cy", "elements"),
    Input(f"{P}-live", "data"),
    State(f"{P}-cy", "elements"),
    State(f"{P}-view", "data"),
    prevent_initial_call=True,
)


@dash.callback(
    Output(f"{P}-break", "href"),
    Output(f"{P}-break", "style"),
    Input(f"{P}-sel", "data"),
    State("ctl-twin", "data"),
)
def break_link(sel, choice):
    """Show the link "Break this part →" (to the Failures page) when the selection can be failed."""
    tw, _ = twin_for(choice)
    sel = _selection(sel)
    picked = FV.pick(TV.system_of(getattr(tw.snapshot, "deployment", None)), sel["id"] if sel else "")
    if not picked:
        return no_update, {"display": "none"}
    return f"/failures?target={quote(picked[1], safe='/')}", {}
