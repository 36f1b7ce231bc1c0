"""Cytoscape drawings: the canvas both topology pages use, the Topology page's stylesheet (colour by
utilisation) and the Failures picker's (utilisation drawn neutral), and the legend that says how to
read them.

Busy and failed cannot be confused: busy is a sequential blue -> lavender fill or line (theme.UTIL_STOPS,
no red in it), failed is red *and* a pattern. A wholly failed part is black with a red dashed outline
and a ✕ before its label; a group with some failed parts inside (a sub-plane with a lost L2 switch, a
node with a dead optical link, at any zoom level: `topolive.fault_counts`) gets a red double ring and
"✕n" after its label; a bundle of links with some down is a red dashed line. A part running slowly (a
gray failure, `Snapshot.health`), or a group with one inside, keeps its fill and gets an amber dotted
border and "×f" after its label, f the fraction of its speed kept; a failure drawn on it wins."""
from __future__ import annotations

import dash
import dash_cytoscape as cyto
from dash import Input, Output, State, clientside_callback, html

from twin.ui import theme
from twin.ui.lang import N_, _

_LAST = ("node.slow", "edge.part", "edge.down", "node.npart", "node.down", ":selected", "node:active")   # rules that must win
_INSIDE = (".k-node", ".k-subplane", ".k-die", ".k-cpu")     # kinds whose label sits on their fill
UTIL_LABELS = (N_("idle"), "<20 %", "20–40 %", "40–60 %", "60–80 %", ">80 %")   # one per UTIL_STOPS bucket
DARK_TEXT_FROM = 3         # buckets from u3 up are light fills: a label on them is drawn dark


def stylesheet() -> list[dict]:
    """Cytoscape stylesheet: colours from utilisation buckets (classes u0..u5), width from data(util)."""
    ramp = theme.UTIL_STOPS
    css = [
        {"selector": "node", "style": {
            "label": "data(label)", "font-size": 10, "color": theme.TEXT, "text-valign": "bottom",
            "text-margin-y": 3, "width": 16, "height": 16, "background-color": ramp[0],
            "border-width": 2, "border-color": "#5b6b80", "text-outline-width": 0}},
        {"selector": ".rack", "style": {
            "background-color": "#1b2738", "background-opacity": 0.6, "border-color": "#33465e",
            "border-width": 1, "label": "data(label)", "text-valign": "top", "text-halign": "center",
            "font-size": 13, "color": theme.MUTED, "shape": "round-rectangle", "padding": 10}},
        {"selector": ".k-node", "style": {"shape": "round-rectangle", "width": 58, "height": 30,
                                          "text-valign": "center", "text-margin-y": 0, "font-size": 14,
                                          "font-weight": "bold"}},
        {"selector": ".k-subplane", "style": {"shape": "round-rectangle", "width": 124, "height": 34,
                                              "text-valign": "center", "text-margin-y": 0, "font-size": 15,
                                              "border-color": theme.BLUE, "font-weight": "bold"}},
        {"selector": ".k-rdma_switch", "style": {"shape": "diamond", "border-color": theme.ORANGE,
                                                 "width": 26, "height": 26, "font-size": 13}},
        {"selector": ".k-vpc_switch, .k-storage", "style": {"shape": "hexagon", "border-color": theme.GREEN,
                                                           "width": 34, "height": 34, "font-size": 13}},
        {"selector": ".k-die", "style": {"shape": "round-rectangle", "width": 60, "height": 34,
                                         "font-size": 11, "text-valign": "center", "text-margin-y": 0}},
        {"selector": ".k-cpu", "style": {"shape": "round-rectangle", "width": 64, "height": 30, "font-size": 12,
                                         "text-valign": "center", "text-margin-y": 0, "border-color": "#adb5bd"}},
        {"selector": ".k-l1, .k-l2", "style": {"shape": "rectangle", "width": 34, "height": 18,
                                                "border-color": theme.BLUE, "font-size": 11}},
        {"selector": ".k-rdma_nic", "style": {"shape": "diamond", "border-color": theme.ORANGE,
                                              "width": 20, "height": 20, "font-size": 11}},
        {"selector": ".k-vpc_nic", "style": {"shape": "hexagon", "border-color": theme.GREEN}},
        {"selector": ".pool-prefill", "style": {"border-color": theme.TEAL, "border-width": 3}},
        {"selector": ".pool-decode", "style": {"border-color": theme.PURPLE, "border-width": 3}},
        {"selector": "edge", "style": {
            "curve-style": "haystack", "haystack-radius": 0, "line-color": ramp[0], "opacity": 0.75,
            "width": "mapData(util, 0, 1, 1, 6)"}},
        {"selector": "edge.p-ub", "style": {"opacity": 0.55}},
        {"selector": "edge.u0", "style": {"line-color": "#34455c", "opacity": 0.35}},
    ]
    for i, c in enumerate(ramp[1:], start=1):
        css.append({"selector": f"node.u{i}", "style": {"background-color": c}})
        css.append({"selector": f"edge.u{i}", "style": {"line-color": c, "opacity": 0.85}})
        if i >= DARK_TEXT_FROM:
            css.append({"selector": ", ".join(f"{k}.u{i}" for k in _INSIDE), "style": {"color": theme.BG}})
    return css + failed_rules()


def failed_rules() -> list[dict]:
    """The rules that draw faults (and the selection) over any fill: last in a stylesheet, so they win."""
    return [
        {"selector": "node.slow", "style": {"border-color": theme.SLOW, "border-style": "dotted", "border-width": 4,
                                            "label": "data(flabel)"}},
        {"selector": "edge.part", "style": {"line-color": theme.FAILED, "line-style": "dashed", "opacity": 0.9}},
        {"selector": "edge.down", "style": {"line-color": theme.FAILED, "line-style": "dashed",
                                            "opacity": 1, "width": 3}},
        {"selector": "node.npart", "style": {"border-color": theme.FAILED, "border-style": "double",
                                             "border-width": 5, "label": "data(flabel)"}},
        {"selector": "node.down", "style": {"background-color": theme.FAILED_FILL, "border-color": theme.FAILED,
                                            "border-style": "dashed", "border-width": 3, "color": theme.TEXT,
                                            "label": "data(flabel)"}},
        {"selector": ":selected", "style": {"overlay-color": theme.YELLOW, "overlay-opacity": 0.25,
                                            "overlay-padding": 4}},
        {"selector": "node:active", "style": {"overlay-opacity": 0.2}},
    ]


def picker_stylesheet() -> list[dict]:
    """The topology stylesheet with utilisation drawn neutral (the picker is for finding parts to
    break, and what has failed): faults are drawn as on the Topology page."""
    base = theme.UTIL_STOPS[0]
    css = [r for r in stylesheet() if r["selector"] not in _LAST]
    for i in range(1, len(theme.UTIL_STOPS)):
        css.append({"selector": f"node.u{i}", "style": {"background-color": base, "color": theme.TEXT}})
        css.append({"selector": f"edge.u{i}", "style": {"line-color": "#4a5d78", "opacity": 0.6}})
    return css + failed_rules()


def legend(busy: bool = True) -> html.Div:
    """How to read a drawing: the busy scale (if drawn), the three fault marks and the slow mark, as the
    page says them."""
    items = [html.Span(_("busy:"))] + [
        html.Span([html.Span(className="swatch", style={"background": c}), _(t)])
        for c, t in zip(theme.UTIL_STOPS, UTIL_LABELS)] if busy else []
    return html.Div(items + [
        html.Span([html.Span("✕", className="swatch swatch-failed"), _("failed (black, red dashed)")]),
        html.Span([html.Span("✕n", className="swatch swatch-ring"), _("n failed parts inside (red ring)")]),
        html.Span([html.Span(className="swatch swatch-dash-h"), _("links down (red dashed)")]),
        html.Span([html.Span("×f", className="swatch swatch-slow"),
                   _("running slow, f of its speed kept (amber dotted)")]),
    ], className="legend topo-legend")


def canvas(cid: str, stylesheet_: list[dict], *, padding: int, height: int, class_name: str,
           elements: list | None = None, view: str = "") -> cyto.Cytoscape:
    """A topology drawing with preset positions. A page replaces the whole component when the system
    it draws changes (cytoscape cannot move an existing element to another rack), and only its
    elements when the view changes within one system."""
    return cyto.Cytoscape(
        id=cid, elements=elements or [], stylesheet=stylesheet_,
        layout={"name": "preset", "fit": True, "padding": padding, "view": view},
        autoRefreshLayout=False, boxSelectionEnabled=False, minZoom=0.2, maxZoom=4,
        className=class_name, style={"width": "100%", "height": f"{height}px"})


def merge_live(prefix: str) -> None:
    """Register the browser-side merge of a page's compact live data (`{prefix}-live`, see
    `twin.ui.topolive`) into its drawing (`{prefix}-cy`), for the view in `{prefix}-view`."""
    clientside_callback(
        dash.ClientsideFunction(namespace="twin", function_name="topo"),
        Output(f"{prefix}-cy", "elements"),
        Input(f"{prefix}-live", "data"),
        State(f"{prefix}-cy", "elements"),
        State(f"{prefix}-view", "data"),
        prevent_initial_call=True,
    )
