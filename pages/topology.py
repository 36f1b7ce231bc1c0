"""Topology: the system the viewer's twin runs, drawn live, with drill-down to a node or a UB sub-plane.

Everything drawn comes from the snapshot: the system (`Snapshot.system`, with its failure-free
topology), live link utilisation and capacities, failed parts. The layout itself is system-free;
the first tick draws whichever system the viewer's twin runs (a CloudMatrix supernode or a GPU
cluster) and redraws it if a reset changes the system."""
from __future__ import annotations

from urllib.parse import urlencode

import dash
from dash import Input, Output, State, ctx, dcc, html, no_update

from twin.ui import components
from twin.ui import faultview
from twin.ui import guard
from twin.ui import theme
from twin.ui import topolive
from twin.ui import topostyle
from twin.ui import topoview
from twin.ui.polling import Tick, page_stores, page_tick, twin_for
from twin.ui import lang
from twin.ui.lang import N_, _

dash.register_page(__name__, path="/topology", name=N_("Topology"), title=lang.title("Topology"), order=1,
                   live=("topo-cursor", "#topo-crumbs"),
                   shots=(("topology", "/topology"), ("topology-node", "/topology?view=n05")))

P = "topo"
HINT = N_("Click an element to see its live numbers.")


def help_text(info, kind: str) -> str:
    """How to read a view, for the system on screen."""
    if info.supernode:
        return {
            topoview.AGG: _("The whole supernode: %(nodes)s nodes in %(racks)s compute racks. Every node has "
                      "an L1 UB switch chip for each of the %(subplanes)s UB sub-planes, and each L1 connects "
                      "optically to all %(l2)s L2 chips of its sub-plane: that is why every NPU "
                      "reaches every other at nearly the same bandwidth (a flat network), which MoE all-to-all "
                      "traffic needs. RDMA (orange, below) and VPC (green, right) are the scale-out and "
                      "datacenter planes. Click a node or a sub-plane to open it."),
            "node": _("One node: %(npus)s NPUs (%(dies)s dies each), "
                      "%(cpus)s Kunpeng CPUs and %(l1)s L1 UB switches. Each die has links "
                      "to every L1 chip; the L1 chips lead to the sub-planes above. NICs below carry RDMA. "
                      "Border colour = pool (teal prefill, purple decode). Click anything for its numbers."),
            "subplane": _("One UB sub-plane: its %(l2)s L2 switch chips (inner ring) and the L1 "
                          "chip of every node that belongs to it (outer ring, labelled by node). Every line is "
                          "one optical link: each node reaches every L2 chip directly, so any two nodes are two "
                          "switch hops apart. Click a link or a chip."),
        }[kind] % _help_args(info)
    return {
        topoview.AGG: _("The whole GPU cluster: %(nodes)s servers of %(npus)s GPUs. Inside a server the "
                  "GPUs share an NVSwitch (NVLink); between servers every byte crosses the RDMA fabric "
                  "(orange: a leaf switch per rack under a spine), so expert all-to-all pays the scale-out "
                  "bandwidth that a supernode's flat scale-up fabric avoids. VPC (green) reaches the datacenter. "
                  "Click a server to open it."),
        "node": _("One server: %(npus)s GPUs on one NVSwitch (NVLink), %(cpus)s host CPUs, "
                  "one RDMA NIC per GPU below. Border colour = pool (teal prefill, purple decode). Click "
                  "anything for its numbers."),
    }.get(kind, "") % _help_args(info)


def _help_args(info) -> dict:
    """The numbers the help texts name (a GPU cluster has no UB: its fields are absent)."""
    s = info.topology.system
    keys = {"nodes": "nodes", "racks": "compute_racks", "subplanes": "subplanes", "l2": "l2_per_subplane",
            "npus": "npus_per_node", "cpus": "cpus_per_node", "l1": "l1_per_node"}
    return {k: getattr(s, a, "") for k, a in keys.items()} | {"dies": info.topology.dies_per_package()}


def _legend() -> html.Div:
    return html.Div([topostyle.legend(), html.Div([
        html.Span([html.Span(className="swatch", style={"background": theme.TEAL}), _("prefill")]),
        html.Span([html.Span(className="swatch", style={"background": theme.PURPLE}), _("decode")]),
    ], className="legend")])


def layout(view: str | None = None, **_kwargs):
    """System-free: the first tick draws the viewer's system (and `view`, if that system has it)."""
    return html.Div([
        *page_stores(P),
        dcc.Store(id=f"{P}-view", data=guard.ident(view) or topoview.AGG),
        dcc.Store(id=f"{P}-sel"),
        dcc.Store(id=f"{P}-live"),
        components.page_header(_("Topology"), html.Span(id=f"{P}-caption"), _legend()),
        html.Div([
            html.Button(_("◀ Whole system"), id=f"{P}-back", className="btn", n_clicks=0),
            html.Span(id=f"{P}-crumbs", className="crumbs"),
            html.Div(components.dropdown(id=f"{P}-select", options=[], value=None, clearable=False,
                                  className="dd dd-wide"), style={"marginLeft": "auto"}),
        ], className="topo-bar"),
        html.Div([
            html.Div(_canvas(), id=f"{P}-cy-wrap", className="panel topo-wrap"),
            html.Div([
                components.panel([html.Div(html.Div(_(HINT), className="hint"), id=f"{P}-stats", className="stats"),
                         dcc.Link(_("Break this part →"), id=f"{P}-break", href="/failures", className="break-link",
                                  style={"display": "none"})], _("Selected"), "sim"),
                components.panel(html.P(id=f"{P}-help", className="hint"), _("How to read this view")),
            ]),
        ], className="two-col"),
    ])


def _canvas(info=None, v: topoview.View | None = None):
    """The drawing: empty until the first tick, then the view `v` of the system `info`."""
    return topostyle.canvas(f"{P}-cy", topostyle.stylesheet(), padding=24, height=640, class_name="topo-cy",
                     elements=v.elements if v else [], view=f"{info.name}:{v.name}" if v else "")


def caption(info) -> str:
    return lang.system_title(info) + _(". Fill, link colour and width follow how busy a part is (blue, lighter when busier); failed parts are "
                                       "black with a red dashed outline and a ✕, and a group with failed parts inside "
                                       "has a red ring and their count, at every zoom level.")


def _view(info, name: str | None) -> topoview.View:
    """The view `name` of the system on screen, or the whole system if it has no such view."""
    try:
        return topoview.view(info.topology, guard.ident(name) or topoview.AGG)
    except ValueError:
        return topoview.view(info.topology, topoview.AGG)


def _stats(rows) -> list:
    return [html.Div([html.Span(_(k), className="k"), html.Span(v, className="v")], className="row")
            for k, v in rows]


def _sel_stats(info, snap, sel: dict) -> list:
    return _stats(topolive.element_stats(_view(info, sel.get("view")), snap, sel["kind"], sel["id"]))


def _tapped(data) -> dict | None:
    """Tap data from cytoscape: a dict with a plain id (and kind), else nothing."""
    if not isinstance(data, dict) or guard.ident(data.get("id")) is None:
        return None
    return {"id": data["id"], "kind": data.get("kind") if isinstance(data.get("kind"), str) else ""}


def _selection(sel) -> dict | None:
    """The page's own selection store, checked (kind, id, view) or nothing."""
    if not isinstance(sel, dict) or sel.get("kind") not in ("node", "edge") or guard.ident(sel.get("id")) is None:
        return None
    return {"kind": sel["kind"], "id": sel["id"], "view": guard.ident(sel.get("view")) or topoview.AGG}


def _drawing(info, v: topoview.View) -> dict:
    """Everything that changes when another view (or another system) is drawn."""
    return {"view": v.name, "elements": v.elements, "select": v.name, "options": topoview.view_options(info.topology),
            "layout": {"name": "preset", "fit": True, "padding": 24, "view": f"{info.name}:{v.name}"},
            "crumbs": topoview.crumb(info.topology, v.name), "help": help_text(info, topoview.view_kind(v.name))}


DRAWING = {
    "view": Output(f"{P}-view", "data", allow_duplicate=True),
    "elements": Output(f"{P}-cy", "elements", allow_duplicate=True),
    "layout": Output(f"{P}-cy", "layout", allow_duplicate=True),
    "select": Output(f"{P}-select", "value", allow_duplicate=True),
    "options": Output(f"{P}-select", "options", allow_duplicate=True),
    "crumbs": Output(f"{P}-crumbs", "children", allow_duplicate=True),
    "help": Output(f"{P}-help", "children", allow_duplicate=True),
}


@dash.callback(
    output={**DRAWING, "sel": Output(f"{P}-sel", "data"), "live": Output(f"{P}-live", "data", allow_duplicate=True),
            "stats": Output(f"{P}-stats", "children", allow_duplicate=True)},
    inputs={"node": Input(f"{P}-cy", "tapNodeData"), "edge": Input(f"{P}-cy", "tapEdgeData"),
            "selected": Input(f"{P}-select", "value"), "back": Input(f"{P}-back", "n_clicks"),
            "current": State(f"{P}-view", "data"), "choice": State("ctl-twin", "data")},
    prevent_initial_call=True,
)
def navigate(node, edge, selected, back, current, choice):
    """Drill down from the whole system (click a node or sub-plane), go back, or select an element."""
    trig = ctx.triggered_id
    prop = ctx.triggered[0]["prop_id"] if ctx.triggered else ""
    snap = twin_for(choice)[0].snapshot
    info = snap.system
    node, edge, selected = _tapped(node), _tapped(edge), guard.ident(selected)
    current = guard.ident(current) or topoview.AGG
    target, sel = current, None
    if trig == f"{P}-back":
        target = topoview.AGG
    elif trig == f"{P}-select":
        target = selected or topoview.AGG
    elif prop.endswith("tapNodeData") and node:
        if current == topoview.AGG and node.get("kind") in ("node", "subplane"):
            target = node["id"]
        # the selection remembers the view it was made in: a drilled-into node keeps its
        # whole-node numbers (from the supernode view) while its parts are drawn
        sel = {"kind": "node", "id": node["id"], "view": current}
    elif prop.endswith("tapEdgeData") and edge:
        sel = {"kind": "edge", "id": edge["id"], "view": current}
    v = _view(info, target)
    out = {"sel": sel, "stats": _sel_stats(info, snap, sel) if sel else html.Div(_(HINT), className="hint")}
    if v.name != current:
        out.update(_drawing(info, v), live=topolive.live(v, snap))
    return {**dict.fromkeys(DRAWING, no_update), "live": no_update, **out}


@page_tick(P, {**DRAWING, "live": Output(f"{P}-live", "data"), "stats": Output(f"{P}-stats", "children"),
               "caption": Output(f"{P}-caption", "children"), "canvas": Output(f"{P}-cy-wrap", "children")},
           {"view_name": State(f"{P}-view", "data"), "sel": State(f"{P}-sel", "data")}, initial_duplicate=True)
def tick(t: Tick, view_name, sel) -> dict:
    """Compact live data for the current view (merged into the drawing in the browser). The first
    tick draws the system; a reset onto another system redraws it."""
    info = t.system
    drawn = t.prior.get("system")
    requested = guard.ident(view_name) or topoview.AGG
    if not t.changed and drawn == info.name:
        return {}
    v = _view(info, requested)
    sel = _selection(sel)
    out = {"live": t.twin.memo(f"topo:{v.name}", lambda s: topolive.live(v, s)),
           "stats": _sel_stats(info, t.snap, sel) if sel else no_update,
           "cursor": dict(t.cursor, view=v.name, system=info.name)}
    if drawn != info.name:           # another system: a new drawing (see TS.canvas)
        out.update(_drawing(info, v), caption=caption(info), canvas=_canvas(info, v))
        out["elements"] = out["layout"] = no_update
    elif v.name != requested:
        out.update(_drawing(info, v))
    return out


topostyle.merge_live(P)


@dash.callback(
    Output(f"{P}-break", "href"),
    Output(f"{P}-break", "style"),
    Input(f"{P}-sel", "data"),
    State("ctl-twin", "data"),
)
def break_link(sel, choice):
    """Show the link "Break this part →" (to the Failures page) when the selection can be failed."""
    info = twin_for(choice)[0].snapshot.system
    sel = _selection(sel)
    picked = faultview.pick(info.topology, sel["id"]) if sel else None
    if not picked:
        return no_update, {"display": "none"}
    kind, target = picked
    return f"/failures?{urlencode({'target': target, 'kind': kind}, safe='/')}", {}
