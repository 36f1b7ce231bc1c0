"""Trade-offs: decode throughput vs TPOT, the SLO and the largest batch it allows, the live point."""
from __future__ import annotations

import dash
from dash import Input, Output, Patch, State, dcc, html, no_update

from twin.config import catalog
from twin.ui import components as C
from twin.ui import guard as G
from twin.ui import tradeoffs as TO
from twin.ui.live import Tick, twin_for

dash.register_page(__name__, path="/tradeoffs", name="Trade-offs", title="Trade-offs · CloudMatrix Twin",
                   order=4)

P = "to"
TICK_MS = 1000


def layout(**_kwargs):
    tw, _ = twin_for(None)
    dep = getattr(tw.snapshot, "deployment", None) or "cloudmatrix-infer-paper"
    slo = TO.default_slo(dep)
    return html.Div([
        dcc.Interval(id=f"{P}-tick", interval=TICK_MS),
        dcc.Store(id=f"{P}-cursor"),
        dcc.Store(id=f"{P}-dep", data=dep),
        C.page_header("Throughput vs latency", "A bigger decode batch gives more tokens per second per NPU "
                      "but a slower token for each user. The curve comes from the calibrated perf model; "
                      "the stars are the paper's measurements; the pink dot is the running twin."),
        html.Div([
            C.panel(C.graph(f"{P}-fig", TO.figure(dep, 4096, slo), 520), "Decode throughput vs TPOT", "model",
                    extra=html.Span([C.tag("paper"), C.tag("sim")])),
            html.Div([
                C.panel(html.Div([
                    html.Label(f"TPOT SLO ({TO.SLO_MIN}–{TO.SLO_MAX} ms)", className="ctl-label",
                               htmlFor=f"{P}-slo"),
                    dcc.Slider(id=f"{P}-slo", min=TO.SLO_MIN, max=TO.SLO_MAX, step=1, value=slo,
                               marks={v: f"{v}" for v in (5, 50, 100, 150)},
                               updatemode="drag", allow_direct_input=True,
                               tooltip={"placement": "bottom", "always_visible": False}),
                    html.Label("Context length (KV tokens per sequence)", className="ctl-label",
                               htmlFor=f"{P}-kv"),
                    dcc.Dropdown(id=f"{P}-kv", options=[{"label": f"{k // 1024}K" + (" (paper)" if k == 4096 else ""),
                                                         "value": k} for k in TO.KV_CHOICES],
                                 value=4096, clearable=False, className="dd"),
                    html.Div(id=f"{P}-answer", className="slo-box"),
                ], className="slo-box"), "What does the SLO allow?", "model"),
                C.panel(html.Div(id=f"{P}-live", className="stats"), "Running twin now", "sim"),
            ]),
        ], className="two-col"),
    ])


def _answer(dep: str, slo: float, kv: int) -> list:
    best = TO.best_for_slo(dep, float(slo), int(kv))
    if not best["batch_per_npu"]:
        return [html.Div(f"No batch meets {slo:g} ms at {kv // 1024}K context on {dep}.", className="msg-error")]
    return [
        html.Div([html.Span("largest batch per NPU", className="k"),
                  html.Div(f"{best['batch_per_npu']}", className="big")]),
        html.Div([html.Span("throughput", className="k"),
                  html.Div(f"{best['tokens_per_s_per_npu']:,.0f} tok/s per NPU", className="big")]),
        html.Div(f"TPOT at that batch: {best['tpot_ms']:.1f} ms · KV cache fits up to "
                 f"{best['kv_limit_batch_per_npu']} per NPU · deployment {dep}", className="hint"),
    ]


def _dep(v) -> str:
    """A deployment the catalog knows (the page's own store may have been tampered with)."""
    return v if isinstance(v, str) and v in catalog().deployments else "cloudmatrix-infer-paper"


def _kv(v) -> int:
    """One of the offered context lengths (4K if the value is anything else)."""
    return v if type(v) is int and v in TO.KV_CHOICES else 4096


@dash.callback(
    Output(f"{P}-fig", "figure"),
    Output(f"{P}-answer", "children"),
    Input(f"{P}-slo", "value"),
    Input(f"{P}-kv", "value"),
    State(f"{P}-dep", "data"),
)
def on_slo(slo, kv, dep):
    """Move the SLO line and the best-batch marker; recompute the curve for another context length."""
    dep = _dep(dep)
    slo = G.number(slo)
    if slo is None or not TO.SLO_MIN <= slo <= TO.SLO_MAX:
        return no_update, [html.Div(f"TPOT SLO: allowed {TO.SLO_MIN} to {TO.SLO_MAX} ms", className="msg-error")]
    kv = _kv(kv)
    return TO.figure(dep, kv, slo), _answer(dep, slo, kv)


@dash.callback(
    Output(f"{P}-fig", "figure", allow_duplicate=True),
    Output(f"{P}-answer", "children", allow_duplicate=True),
    Output(f"{P}-live", "children"),
    Output(f"{P}-dep", "data"),
    Output(f"{P}-cursor", "data"),
    Output("shell-status", "data", allow_duplicate=True),
    Input(f"{P}-tick", "n_intervals"),
    State("ctl-twin", "data"),
    State(f"{P}-cursor", "data"),
    State(f"{P}-dep", "data"),
    State(f"{P}-slo", "value"),
    State(f"{P}-kv", "value"),
    prevent_initial_call="initial_duplicate",
)
def tick(_n, choice, cursor, dep, slo, kv):
    """Move the live operating point (Patch of two traces); redraw if the deployment changed."""
    t = Tick.read(cursor, choice)
    if not t.changed:
        return no_update, no_update, no_update, no_update, no_update, t.status
    dep = _dep(dep) if dep is not None else None
    snap = t.snap
    trail = TO.trail_from(getattr(snap, "history", None))
    new_dep = getattr(snap, "deployment", None) or dep
    k = getattr(snap, "kpis", {}) or {}
    live = [html.Div([html.Span(a, className="k"), html.Span(b, className="v")], className="row") for a, b in (
        ("TPOT p50 / p99", f"{C.fmt(k.get('tpot_p50_ms'))} / {C.fmt(k.get('tpot_p99_ms'))} ms"),
        ("decode tokens/s per NPU", C.fmt(k.get("output_tps_per_npu"))),
        ("decode batch per NPU", C.fmt(k.get("decode_batch_per_npu"))),
        ("decode pool busy", f"{C.pct(k.get('util_decode'))} %"),
        ("deployment", new_dep),
    )] + [html.Div("The live point mixes every request length of the workload, so it sits near, not on, "
                   "the curve drawn for one context length.", className="hint")]
    slo_v = G.number(slo)
    slo_v = slo_v if slo_v is not None and TO.SLO_MIN <= slo_v <= TO.SLO_MAX else TO.default_slo(new_dep)
    kv = _kv(kv)
    if new_dep != dep:
        return (TO.figure(new_dep, kv, slo_v, trail), _answer(new_dep, slo_v, kv), live, new_dep,
                t.cursor, t.status)
    fig = Patch()
    fig["data"][TO.T_TRAIL]["x"] = trail[0]
    fig["data"][TO.T_TRAIL]["y"] = trail[1]
    fig["data"][TO.T_LIVE]["x"] = trail[0][-1:]
    fig["data"][TO.T_LIVE]["y"] = trail[1][-1:]
    return fig, no_update, live, no_update, t.cursor, t.status
