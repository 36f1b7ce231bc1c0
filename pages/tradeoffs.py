"""Trade-offs: decode throughput vs TPOT, the SLO and the largest batch it allows, the live point."""
from __future__ import annotations

import dash
from dash import Input, Output, Patch, State, dcc, html, no_update

from twin.model.config import catalog
from twin.ui import components
from twin.ui import guard
from twin.ui import tradeoffs
from twin.ui import figures
from twin.ui import words
from twin.ui.polling import Tick, page_stores, page_tick, twin_for
from twin.ui import lang
from twin.ui.lang import N_, _

dash.register_page(__name__, path="/tradeoffs", name=N_("Trade-offs"), title=lang.title("Trade-offs"),
                   order=4, live=("to-cursor", "#to-answer"))

P = "to"
FIRST_SLO = 50          # the slider before the first tick sets the viewed deployment's own SLO


def layout(**_kwargs):
    """Drawn empty: the first tick draws the deployment the viewer's twin runs."""
    return html.Div([
        *page_stores(P),
        dcc.Store(id=f"{P}-dep"),
        components.page_header(_("Throughput vs latency"), _("A bigger decode batch gives more tokens per second per chip "
                                                    "but a slower token for each user. The curve comes from the "
                                                    "calibrated perf model; the stars, where drawn, are published "
                                                    "measurements of the system shown; the pink dot is the running twin.")),
        html.Div([
            components.panel(components.graph(f"{P}-fig", figures.empty_figure("", height=520), 520), _("Decode throughput vs TPOT"), "model",
                    extra=html.Span([components.tag("paper"), components.tag("sim"),
                                     html.Button(_("Download CSV"), id=f"{P}-csv", className="btn btn-small",
                                                 title=_("The curve, the largest batch within the SLO, the paper's "
                                                         "points and the live points, as CSV")),
                                     dcc.Download(id=f"{P}-csv-dl")])),
            html.Div([
                components.panel(html.Div([
                    html.Label(_("TPOT SLO") + f" ({tradeoffs.SLO_MIN}–{tradeoffs.SLO_MAX} ms)", className="ctl-label",
                               htmlFor=f"{P}-slo"),
                    dcc.Slider(id=f"{P}-slo", min=tradeoffs.SLO_MIN, max=tradeoffs.SLO_MAX, step=1, value=FIRST_SLO,
                               marks={v: f"{v}" for v in (5, 50, 100, 150)},
                               updatemode="drag", allow_direct_input=True,
                               tooltip={"placement": "bottom", "always_visible": False}),
                    html.Label(_("Context length (KV tokens per sequence)"), className="ctl-label",
                               htmlFor=f"{P}-kv"),
                    components.dropdown(id=f"{P}-kv", options=[{"label": f"{k // 1024}K" + (" (" + _("paper") + ")" if k == 4096 else ""),
                                                       "value": k} for k in tradeoffs.KV_CHOICES],
                               value=4096, clearable=False, className="dd"),
                    html.Div(id=f"{P}-answer", className="slo-box"),
                ], className="slo-box"), _("What does the SLO allow?"), "model"),
                components.panel(html.Div(id=f"{P}-live", className="stats"), _("Running twin now"), "sim"),
            ]),
        ], className="two-col"),
    ])


def _answer(dep: str, slo: float, kv: int) -> list:
    best, w = tradeoffs.best_for_slo(dep, float(slo), int(kv)), words.words(dep)
    if not best["batch_per_npu"]:
        return [html.Div(_("No batch meets %(slo)s ms at %(kv)sK context on %(dep)s.") % {
            "slo": f"{slo:g}", "kv": kv // 1024, "dep": dep}, className="msg-error")]
    return [
        html.Div([html.Span(_("largest batch per %(chip)s") % w, className="k"),
                  html.Div(f"{best['batch_per_npu']}", className="big")]),
        html.Div([html.Span(_("throughput"), className="k"),
                  html.Div(_("%(tps)s tok/s per %(chip)s") % {"tps": f"{best['tokens_per_s_per_npu']:,.0f}", **w},
                           className="big")]),
        html.Div(_("TPOT at that batch: %(tpot)s ms · KV cache fits up to %(kv)s per %(chip)s · deployment %(dep)s") % {
            "tpot": f"{best['tpot_ms']:.1f}", "kv": best["kv_limit_batch_per_npu"], "dep": dep, **w}, className="hint"),
    ]


def _dep(v) -> str | None:
    """A deployment the catalog knows, or None (not drawn yet, or the store was tampered with)."""
    return v if isinstance(v, str) and v in catalog().deployments else None


def _kv(v) -> int:
    """One of the offered context lengths (4K if the value is anything else)."""
    return v if type(v) is int and v in tradeoffs.KV_CHOICES else 4096


@dash.callback(
    Output(f"{P}-fig", "figure"),
    Output(f"{P}-answer", "children"),
    inputs={"slo": Input(f"{P}-slo", "value"), "kv": Input(f"{P}-kv", "value"), "dep": State(f"{P}-dep", "data"),
            "choice": State("ctl-twin", "data")},
)
def on_slo(slo, kv, dep, choice=None):
    """Move the SLO line and the best-batch marker; recompute the curve for another context length,
    with the running twin's points on it (a paused twin sends no tick to put them back: the live point
    a lesson's answer refers to used to vanish when the slider or this first draw came after the tick)."""
    dep = _dep(dep)
    if dep is None:               # the first tick has not drawn the viewer's deployment yet
        return no_update, no_update
    slo = guard.number(slo)
    if slo is None or not tradeoffs.SLO_MIN <= slo <= tradeoffs.SLO_MAX:
        return no_update, [html.Div(_("TPOT SLO: allowed %(lo)s to %(hi)s ms") % {"lo": tradeoffs.SLO_MIN, "hi": tradeoffs.SLO_MAX},
                                   className="msg-error")]
    kv = _kv(kv)
    return tradeoffs.figure(dep, kv, slo, _trail(choice, dep)), _answer(dep, slo, kv)


def _trail(choice, dep: str) -> tuple[list, list]:
    """The viewed twin's recent points if it runs `dep` (else none: another deployment's curve)."""
    snap = twin_for(choice)[0].snapshot
    if snap is None or snap.deployment != dep:
        return [], []
    return tradeoffs.trail_from(getattr(snap, "history", None))


@dash.callback(Output(f"{P}-csv-dl", "data"), Input(f"{P}-csv", "n_clicks"),
               State(f"{P}-dep", "data"), State(f"{P}-slo", "value"), State(f"{P}-kv", "value"),
               State("ctl-twin", "data"), prevent_initial_call=True)
def download_csv(_clicks, dep, slo, kv, choice):
    """What the chart shows for the viewed twin (curve, SLO point, paper, live points) as CSV."""
    snap = twin_for(choice)[0].snapshot
    dep = _dep(dep) or (snap.deployment if snap is not None else None)
    if dep is None:
        return no_update
    slo = guard.number(slo)
    slo = slo if slo is not None and tradeoffs.SLO_MIN <= slo <= tradeoffs.SLO_MAX else tradeoffs.default_slo(dep)
    return dcc.send_string(tradeoffs.csv_text(dep, _kv(kv), slo, _trail(choice, dep)), f"tradeoffs-{dep}.csv")


@page_tick(P, {
    "fig": Output(f"{P}-fig", "figure", allow_duplicate=True),
    "answer": Output(f"{P}-answer", "children", allow_duplicate=True),
    "live": Output(f"{P}-live", "children"),
    "dep": Output(f"{P}-dep", "data"),
    "slo": Output(f"{P}-slo", "value"),
}, {"dep": State(f"{P}-dep", "data"), "slo": State(f"{P}-slo", "value"), "kv": State(f"{P}-kv", "value")},
    initial_duplicate=True)
def tick(t: Tick, dep, slo, kv) -> dict:
    """Move the live operating point (Patch of two traces); redraw for the deployment the twin runs."""
    if not t.changed and _dep(dep) is not None:
        return {}
    dep, snap = _dep(dep), t.snap
    trail = tradeoffs.trail_from(getattr(snap, "history", None))
    new_dep = snap.deployment
    k = getattr(snap, "kpis", {}) or {}
    live = [html.Div([html.Span(_(a), className="k"), html.Span(b, className="v")], className="row") for a, b in (
        (N_("TPOT p50 / p99"), f"{components.fmt(k.get('tpot_p50_ms'))} / {components.fmt(k.get('tpot_p99_ms'))} ms"),
        (N_("decode tokens/s per chip"), components.fmt(k.get("output_tps_per_npu"))),
        (N_("decode batch per chip"), components.fmt(k.get("decode_batch_per_npu"))),
        (N_("decode useful work"), _("%(pct)s %% of the model's %(cap)s tok/s at batch %(batch)s") % {
            "pct": components.pct(k.get("decode_useful")), "cap": components.fmt(k.get("decode_op_tps_per_npu")),
            "batch": components.fmt(tradeoffs.operating_batch(new_dep))}),
        (N_("decode pool busy (a step runs, any batch)"), f"{components.pct(k.get('util_decode'))} %"),
        (N_("deployment"), new_dep),
        (N_("system"), lang.system_title(snap.system)),
    )] + [html.Div(_("The live point mixes every request length of the workload, so it sits near, not on, "
                     "the curve drawn for one context length."), className="hint")]
    kv = _kv(kv)
    if new_dep != dep:
        slo_v = tradeoffs.default_slo(new_dep)
        return {"fig": tradeoffs.figure(new_dep, kv, slo_v, trail), "answer": _answer(new_dep, slo_v, kv), "live": live,
                "dep": new_dep, "slo": slo_v if slo_v != guard.number(slo) else no_update}   # unchanged: no redraw
    fig = Patch()
    fig["data"][tradeoffs.T_TRAIL]["x"] = trail[0]
    fig["data"][tradeoffs.T_TRAIL]["y"] = trail[1]
    fig["data"][tradeoffs.T_LIVE]["x"] = trail[0][-1:]
    fig["data"][tradeoffs.T_LIVE]["y"] = trail[1][-1:]
    return {"fig": fig, "live": live}
