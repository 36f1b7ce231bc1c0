"""Traffic: bandwidth per plane over time, the node-to-node traffic matrix, the busiest links."""
from __future__ import annotations

import dash
from dash import Input, Output, Patch, State, dcc, html, no_update

from twin.ui import components as C
from twin.ui import figures as F
from twin.ui import theme as T
from twin.ui import topoview as TV
from twin.ui.live import Tick

dash.register_page(__name__, path="/traffic", name="Traffic", title="Traffic · CloudMatrix Twin", order=2)

P = "tr"
TICK_MS = 1000

PLANES = {
    "ub": F.StripSpec("UB plane (GB/s)", "GB/s", (F.Series("ub_gbps", "UB", T.BLUE, fill=True),)),
    "rdma": F.StripSpec("RDMA plane (GB/s)", "GB/s", (F.Series("rdma_gbps", "RDMA", T.ORANGE, fill=True),)),
    "vpc": F.StripSpec("VPC plane (GB/s)", "GB/s", (F.Series("vpc_gbps", "VPC", T.GREEN, fill=True),)),
}


def layout(**_kwargs):
    return html.Div([
        dcc.Interval(id=f"{P}-tick", interval=TICK_MS),
        dcc.Store(id=f"{P}-cursor"),
        C.page_header("Traffic", "Where the bytes go. UB carries the MoE expert all-to-all (dispatch and "
                      "combine) and EMS cache loads; RDMA carries KV transfers from prefill to decode; VPC "
                      "reaches the datacenter network and storage.",
                      html.Div(id=f"{P}-now", className="scenario-line")),
        html.Div([html.Div(C.graph(f"{P}-{k}", F.empty_figure(spec.title), 210), className="chart")
                  for k, spec in PLANES.items()], className="chart-grid"),
        html.Div([
            C.panel(C.graph(f"{P}-matrix", F.empty_figure("", height=470), 470),
                    "Node-to-node UB traffic (GB/s): expert all-to-all and EMS cache loads", "sim"),
            C.panel(html.Div(id=f"{P}-links"), "Busiest links now", "sim"),
        ], className="two-col"),
    ])


def _links_table(rows: list[dict]) -> html.Table | html.Div:
    if not rows:
        return html.Div("no traffic yet", className="hint")
    head = html.Tr([html.Th("link"), html.Th("plane"), html.Th("busy", className="num"),
                    html.Th("GB/s", className="num")])
    body = [html.Tr([
        html.Td(r["link"], title=f"{r['kind']} · {r['medium']}"),
        html.Td(f"{r['plane']}{' · opt' if r['medium'] == 'optical' else ''}"),
        html.Td(html.Div([html.Div(html.Span(style={"width": f"{min(r['util'], 1) * 100:.0f}%"}), className="bar"),
                          html.Span(f"{r['util'] * 100:.0f}%")], style={"display": "flex", "gap": "6px",
                                                                          "alignItems": "center",
                                                                          "justifyContent": "flex-end"}),
                className="num"),
        html.Td(C.fmt(r["gbps"]), className="num"),
    ]) for r in rows]
    return html.Table([html.Thead(head), html.Tbody(body)], className="tbl")


@dash.callback(
    [Output(f"{P}-{k}", "figure") for k in PLANES]
    + [Output(f"{P}-{k}", "extendData") for k in PLANES]
    + [Output(f"{P}-matrix", "figure"), Output(f"{P}-links", "children"), Output(f"{P}-now", "children"),
       Output(f"{P}-cursor", "data"), Output("shell-status", "data", allow_duplicate=True)],
    Input(f"{P}-tick", "n_intervals"),
    State("ctl-twin", "data"),
    State(f"{P}-cursor", "data"),
    prevent_initial_call="initial_duplicate",
)
def tick(_n, choice, cursor):
    """Plane strip charts grow by extendData; the matrix is patched (z only); top links as a table."""
    t = Tick.read(cursor, choice)
    n = len(PLANES)
    if not t.changed:
        return [no_update] * (2 * n + 4) + [t.status]
    snap = t.snap
    figs, exts = zip(*(t.strip(spec, height=210) for spec in PLANES.values()))
    system = TV.system_of(getattr(snap, "deployment", None))
    matrix = getattr(snap, "node_traffic", None)
    if t.mode == "full":
        mfig = F.heatmap_figure(matrix, TV.node_labels(system), "")
    else:
        mfig = Patch()
        mfig["data"][0]["z"] = t.twin.memo("traffic:z", lambda s: F.heatmap_z(s.node_traffic))
    links = t.twin.memo(f"traffic:top:{system}", lambda s: TV.busiest_links(s, system, 12))
    pg = getattr(snap, "plane_gbps", {}) or {}
    now = " · ".join(f"{name} {C.fmt(pg.get(key))} GB/s" for key, name in (("ub", "UB"), ("rdma", "RDMA"),
                                                                            ("vpc", "VPC")))
    return list(figs) + list(exts) + [mfig, _links_table(links), now, t.cursor, t.status]
