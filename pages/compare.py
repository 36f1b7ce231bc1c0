"""Compare: why a supernode. The same DeepSeek-R1 decode on CloudMatrix384 and four GPU systems at
one TPOT SLO, side by side (perf model, twin.explore.compare): curves on the same axes, per-TFLOPS /
per-kW / cost bars, the EP sweep; each chart says what it shows, and the table downloads as CSV."""
from __future__ import annotations

from functools import lru_cache

import dash
import pandas as pd
from dash import Input, Output, dcc, html

from twin.explore.compare import compare
from twin.ui import components as C
from twin.ui import lang as Lg
from twin.ui import theme as T
from twin.ui.lang import N_, _

dash.register_page(__name__, path="/compare", name=N_("Compare"), title=Lg.title("Compare"), order=8)

P = "cmp"
TPOT_SLO_MS = 50.0      # the paper's decode SLO (reference section 4)
PALETTE = (T.BLUE, T.ORANGE, T.GREEN, T.PURPLE, T.TEAL, T.YELLOW, T.PINK, T.RED)
METRICS = (("tokens_per_s_per_tflops", N_("tokens/s per TFLOPS")), ("tokens_per_s_per_kw", N_("tokens/s per kW")),
           ("usd_per_million_tokens", N_("$ per million output tokens")))


@lru_cache(maxsize=1)
def _compare() -> dict:
    return compare(TPOT_SLO_MS)


def _lines(series: dict, x: str, text, hover: str, x_title: str, **xaxis) -> dict:
    """One line per system on shared axes (decode tokens/s per chip on y)."""
    data = [{"type": "scatter", "mode": "lines+markers", "name": s, "x": [r[x] for r in rows],
             "y": [r["tokens_per_s_per_chip"] for r in rows], "marker": {"color": PALETTE[i % len(PALETTE)]},
             "text": [text(r) for r in rows], "hovertemplate": hover + "<extra>" + s + "</extra>"}
            for i, (s, rows) in enumerate(series.items())]
    lay = T.base_layout(hovermode="closest", xaxis={"title": {"text": x_title}, "gridcolor": T.GRID, **xaxis},
                        yaxis={"title": {"text": _("decode tokens/s per chip")}, "gridcolor": T.GRID,
                               "rangemode": "tozero"})
    return {"data": data, "layout": lay}


def curves_figure(d: dict) -> dict:
    """Every system's decode curve (tokens/s per chip vs TPOT) on the same axes, with the SLO."""
    fig = _lines(d["curves"], "tpot_ms", lambda r: _("batch %(b)s per chip") % {"b": r["batch_per_chip"]},
                 "%{text}: TPOT %{x:.1f} ms, %{y:.0f} " + _("tok/s per chip"), _("TPOT, ms"), range=[0, 2 * d["tpot_slo_ms"]])
    fig["layout"]["shapes"] = [{"type": "line", "x0": d["tpot_slo_ms"], "x1": d["tpot_slo_ms"], "y0": 0, "y1": 1,
                                "yref": "paper", "line": {"color": T.RED, "dash": "dash"}}]
    return fig


def ep_figure(d: dict) -> dict:
    """Decode throughput per chip against EP degree, per system."""
    return _lines(d["ep_sweep"], "decode_ep",
                  lambda r: f"{r['fabric']}, " + _("batch %(b)s per chip") % {"b": r["batch_per_chip"]}
                  + f", TPOT {r['tpot_ms']:.1f} ms",
                  "%{text}<br>EP%{x}: %{y:.0f} " + _("tok/s per chip"), _("decode EP degree"), type="log")


def bars_figure(d: dict) -> dict:
    """Per-TFLOPS, per-kW and $ per million tokens, one subplot each."""
    names = [s["deployment"] for s in d["systems"]]
    bars = []
    lay = T.base_layout(hovermode="closest", showlegend=False, margin={"l": 50, "r": 10, "t": 40, "b": 110})
    for i, (m, label) in enumerate(METRICS, 1):
        n = "" if i == 1 else str(i)             # Plotly names the first axes x and y
        bars.append({"type": "bar", "name": _(label), "x": names, "y": [s[m] for s in d["systems"]],
                     "xaxis": f"x{n}", "yaxis": f"y{n}", "marker": {"color": PALETTE[i - 1]}})
        lay[f"xaxis{n}"] = {"domain": [(i - 1) / 3 + 0.04, i / 3 - 0.02], "anchor": f"y{n}", "tickangle": -35,
                            "gridcolor": T.GRID}
        lay[f"yaxis{n}"] = {"anchor": f"x{n}", "gridcolor": T.GRID, "rangemode": "tozero",
                            "title": {"text": _(label), "font": {"size": 11}}}
    return {"data": bars, "layout": lay}


def table(d: dict) -> html.Table:
    head = [_("system"), _("batch/chip"), _("tok/s per chip"), _("TPOT ms"), _("all-to-all share"), _("$ / M tokens")]
    rows = [html.Tr([html.Td(s["deployment"]), html.Td(s["batch_per_chip"], className="num"),
                     html.Td(f"{s['tokens_per_s_per_chip']:,.0f}", className="num"),
                     html.Td(C.fmt(s["tpot_ms"]), className="num"),
                     html.Td(f"{s['alltoall_share']:.0%}", className="num"),
                     html.Td(C.fmt(s["usd_per_million_tokens"]), className="num")]) for s in d["systems"]]
    return html.Table([html.Thead(html.Tr([html.Th(h) for h in head])), html.Tbody(rows)], className="tbl",
                      id=f"{P}-table")


def layout(**_kwargs):
    d = _compare()
    slo = {"slo": f"{d['tpot_slo_ms']:g}"}
    return html.Div([
        C.page_header(_("Why a supernode"),
                      _("The same DeepSeek-R1 decode on CloudMatrix384 and four GPU systems at one TPOT SLO, from "
                        "the perf model: what each chip, TFLOPS, kW and dollar delivers, and where the all-to-all "
                        "hits the inter-node bandwidth wall. Sweeps and capacity searches: Explorer.")),
        C.panel([
            table(d),
            html.Button(_("Download CSV"), id=f"{P}-csv", className="btn-small"), dcc.Download(id=f"{P}-csv-dl"),
            html.P(_("DeepSeek-R1 decode at each system's operating point: the largest batch per chip whose TPOT "
                     "meets %(slo)s ms and whose KV fits. The all-to-all share is dispatch + combine over operator "
                     "time: on UB it stays near a fifth, on Hopper clusters it is about half.") % slo, className="hint"),
        ], _("Why a supernode: the same model on five systems"), "model"),
        C.panel([
            C.graph(f"{P}-curves", curves_figure(d), 360),
            html.P(_("The same decode, batch by batch, on the same axes: each curve climbs until its KV cache is "
                     "full; the dashed line is the %(slo)s ms TPOT SLO, where the table's operating points sit.") % slo,
                   className="hint"),
        ], _("Decode throughput per chip against TPOT"), "model", info_text=_(
            "Decode tokens/s per chip against TPOT, batch by batch, for each system, computed by the perf "
            "model from hardware, kernel tables and deployment. CloudMatrix384 is calibrated on the paper's "
            "decode rows; the GPU systems are predictions, checked against their published throughputs on "
            "the Validation page (validation rows).")),
        html.Div([
            C.panel([C.graph(f"{P}-bars", bars_figure(d), 340),
                     html.P(_("Per dense TFLOPS of the serving precision, per kW and per dollar (power and price per "
                              "chip from systems.toml, each with its source or marked as an assumption)."),
                            className="hint")], _("Per TFLOPS, per kW, per dollar"), "model", info_text=_(
                "Each system's decode throughput at its operating point (perf model) divided by dense TFLOPS, "
                "by kW and turned into dollars per million output tokens; power and prices are per-chip figures "
                "from systems.toml, each cited or marked as an assumption.")),
            C.panel([C.graph(f"{P}-ep", ep_figure(d), 340),
                     html.P(_("Decode throughput per chip against EP degree at the deployed batch: where the "
                              "all-to-all leaves NVLink for RDMA the curve flattens or falls; on the supernode UB "
                              "carries every degree."), className="hint")], _("The EP sweep"), "model", info_text=_(
                "Decode tokens/s per chip against the expert-parallel degree at each system's deployed batch, "
                "computed by the perf model; the hover names the fabric the all-to-all crosses.")),
        ], className="two-even"),
    ])


@dash.callback(Output(f"{P}-csv-dl", "data"), Input(f"{P}-csv", "n_clicks"), prevent_initial_call=True)
def on_csv(_n):
    """The comparison table as CSV (the same rows as `python -m twin compare --json`'s systems)."""
    return dcc.send_data_frame(pd.DataFrame(_compare()["systems"]).to_csv, "compare.csv", index=False)
