"""Traffic: bandwidth per fabric over time, the node-to-node traffic matrix, the busiest links.

Fabrics are named as the running system names them (from the snapshot): UB, RDMA and VPC on a
CloudMatrix supernode; NVLink inside a server and RDMA between servers on a GPU cluster."""
from __future__ import annotations

import dash
from dash import Output, html

from twin.ui import components
from twin.ui import figures
from twin.ui import theme
from twin.ui import topolive
from twin.ui import topoview
from twin.ui.polling import Tick, page_stores, page_tick
from twin.ui import lang
from twin.ui.lang import N_, _

dash.register_page(__name__, path="/traffic", name=N_("Traffic"), title=lang.title("Traffic"),
                   order=2, live=("tr-cursor", "#tr-now"))

P = "tr"
STRIPS = ("scaleup", "rdma", "vpc")


def strip_specs(info) -> dict[str, figures.StripSpec]:
    """The three strip charts, named as the header names the fabrics (`Snapshot.fabric_gbps`): on a
    supernode the engine's scale-up bucket ("ub_gbps") is the UB plane; on a GPU cluster it is split
    where the node matrix splits it, NVLink inside a server and RDMA between servers ("ub_across_gbps"),
    the latter stacked under the KV transfers so the RDMA chart's top is the header's RDMA figure."""
    if info.supernode:
        up = figures.StripSpec(N_("UB plane (GB/s)"), "GB/s", (figures.Series("ub_gbps", "UB", theme.BLUE, fill=True),))
        rdma = figures.StripSpec(N_("RDMA plane (GB/s)"), "GB/s",
                                 (figures.Series("rdma_gbps", "RDMA", theme.ORANGE, fill=True),))
    else:
        up = figures.StripSpec(N_("NVLink: expert all-to-all inside a server (GB/s)"), "GB/s",
                               (figures.Series("ub_gbps", "NVLink", theme.BLUE, fill=True, minus="ub_across_gbps"),))
        rdma = figures.StripSpec(N_("RDMA: all-to-all between servers and KV transfers (GB/s)"), "GB/s",
                                 (figures.Series("ub_across_gbps", N_("all-to-all"), theme.BLUE, stack=True),
                                  figures.Series("rdma_gbps", N_("KV transfers"), theme.ORANGE, stack=True)))
    return {"scaleup": up, "rdma": rdma,
            "vpc": figures.StripSpec(N_("VPC plane (GB/s)"), "GB/s", (figures.Series("vpc_gbps", "VPC", theme.GREEN, fill=True),))}


def explain(info) -> str:
    if info.supernode:
        return _("Where the bytes go. UB carries the MoE expert all-to-all (dispatch and combine) and EMS "
                 "cache loads; RDMA carries KV transfers from prefill to decode; VPC reaches the datacenter "
                 "network and storage.")
    return _("Where the bytes go on a GPU cluster. The MoE expert all-to-all stays on NVLink inside a "
             "server and crosses servers over RDMA (InfiniBand), which also carries KV transfers; VPC "
             "reaches the datacenter network and storage.")


def matrix_title(info) -> str:
    if topoview.by_rack(info.topology):
        return _("Rack-to-rack traffic (GB/s), summed over the nodes of each rack")
    if info.supernode:
        return _("Node-to-node UB traffic (GB/s): expert all-to-all and EMS cache loads")
    return _("Server-to-server traffic (GB/s): diagonal over NVLink, the rest over RDMA")


def layout(**_kwargs):
    return html.Div([
        *page_stores(P),
        components.page_header(_("Traffic"), html.Span(id=f"{P}-explain"), html.Div(id=f"{P}-now", className="scenario-line")),
        html.Div([html.Div(components.graph(f"{P}-{k}", figures.empty_figure(""), 210), className="chart") for k in STRIPS],
                 className="chart-grid"),
        html.Div([
            components.panel(components.graph(f"{P}-matrix", figures.empty_matrix(470), 470),
                    html.Span(_("Node-to-node traffic (GB/s)"), id=f"{P}-matrix-title"), "sim"),
            components.panel(html.Div(id=f"{P}-links"), _("Busiest links now"), "sim"),
        ], className="two-col"),
    ])


def _links_table(rows: list[dict]) -> html.Table | html.Div:
    if not rows:
        return html.Div(_("no traffic yet"), className="hint")
    head = html.Tr([html.Th(_("link")), html.Th(_("plane")), html.Th(_("busy"), className="num"),
                    html.Th("GB/s", className="num")])
    body = [html.Tr([
        html.Td(r["link"], title=f"{r['kind']} · {_(r['medium'])}"),
        html.Td(_(r["plane"]) + (" · " + _("opt") if r["medium"] == "optical" else "")),
        html.Td(html.Div([html.Div(html.Span(style={"width": f"{min(r['util'], 1) * 100:.0f}%"}), className="bar"),
                          html.Span(f"{r['util'] * 100:.0f}%")], style={"display": "flex", "gap": "6px",
                                                                          "alignItems": "center",
                                                                          "justifyContent": "flex-end"}),
                className="num"),
        html.Td(components.fmt(r["gbps"]), className="num"),
    ]) for r in rows]
    return html.Table([html.Thead(head), html.Tbody(body)], className="tbl")


def _cells(info, snap) -> tuple[list, list, list]:
    """The node matrix's cells, their hover text and its labels (language-free: shared by viewers)."""
    matrix, labels = topoview.node_matrix(info.topology, snap.node_traffic)
    return (*figures.heatmap_z(matrix), labels)


@page_tick(P, {
    "figs": [Output(f"{P}-{k}", "figure") for k in STRIPS],
    "exts": [Output(f"{P}-{k}", "extendData") for k in STRIPS],
    "matrix": Output(f"{P}-matrix", "figure"),
    "links": Output(f"{P}-links", "children"),
    "now": Output(f"{P}-now", "children"),
    "explain": Output(f"{P}-explain", "children"),
    "matrix_title": Output(f"{P}-matrix-title", "children"),
})
def tick(t: Tick) -> dict:
    """Strip charts grow by extendData; the matrix is redrawn (its cells shared by every viewer); top links as a table."""
    if not t.changed:
        return {}
    snap, info = t.snap, t.system
    specs = strip_specs(info)
    figs, exts = zip(*(t.strip(specs[k], height=210) for k in STRIPS))
    out = {"figs": list(figs), "exts": list(exts)}
    # whole, not a Patch: patching a figure the browser has not drawn yet (the layout's placeholder,
    # or a page just left) fails there ("Cannot patch undefined"); the cells are 94% of it anyway
    out["matrix"] = figures.heatmap_from_z(*t.twin.memo("traffic:cells", lambda s: _cells(info, s)), "")
    if t.mode == "full":
        out["explain"], out["matrix_title"] = explain(info), matrix_title(info)
    out["links"] = _links_table(t.twin.memo("traffic:top", lambda s: topolive.busiest_links(s, 12)))
    out["now"] = " · ".join(f"{name} {components.fmt(gbps)} GB/s" for name, gbps in snap.fabric_gbps().items())
    return out
