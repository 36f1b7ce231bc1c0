"""Compare: why a supernode. The same DeepSeek-R1 decode on CloudMatrix384 and four GPU systems at
one TPOT SLO, side by side (perf model, twin.explore.compare): curves on the same axes, per-TFLOPS /
per-kW / cost bars, the EP sweep; each chart says what it shows, and the table downloads as CSV."""
from __future__ import annotations

from functools import lru_cache

import dash
import pandas as pd
from dash import Input, Output, dcc, html

from twin.explore.compare import compare
from twin.ui import components
from twin.ui import lang
from twin.ui import theme
from twin.ui.lang import N_, _

dash.register_page(__name__, path="/compare", name=N_("Compare"), title=lang.title("Compare"), order=8)

P = "cmp"
TPOT_SLO_MS = 50.0      # the paper's decode SLO (reference section 4)
PALETTE = (theme.BLUE, theme.ORANGE, theme.GREEN, theme.PURPLE, theme.TEAL, theme.YELLOW, theme.PINK, theme.RED)
# (field, label, which way is better) of the three bar panels
METRICS = (("tokens_per_s_per_tflops", N_("tokens/s per TFLOPS"), N_("higher is better")),
           ("tokens_per_s_per_kw", N_("tokens/s per kW"), N_("higher is better")),
           ("usd_per_million_tokens", N_("$ per million output tokens"), N_("lower is better")))


@lru_cache(maxsize=1)
def _compare() -> dict:
    return compare(TPOT_SLO_MS)


def _lines(series: dict, x: str, text, hover: str, x_title: str, **xaxis) -> dict:
    """One line per system on shared axes (decode tokens/s per chip on y)."""
    data = [{"type": "scatter", "mode": "lines+markers", "name": s, "x": [r[x] for r in rows],
             "y": [r["tokens_per_s_per_chip"] for r in rows], "marker": {"color": PALETTE[i % len(PALETTE)]},
             "text": [text(r) for r in rows], "hovertemplate": hover + "<extra>" + s + "</extra>"}
            for i, (s, rows) in enumerate(series.items())]
    lay = theme.base_layout(hovermode="closest", xaxis={"title": {"text": x_title}, "gridcolor": theme.GRID, **xaxis},
                        yaxis={"title": {"text": _("decode tokens/s per chip")}, "gridcolor": theme.GRID,
                               "rangemode": "tozero"})
    return {"data": data, "layout": lay}


def curves_figure(d: dict) -> dict:
    """Every system's decode curve (tokens/s per chip vs TPOT) on the same axes, with the SLO."""
    fig = _lines(d["curves"], "tpot_ms", lambda r: _("batch %(b)s per chip") % {"b": r["batch_per_chip"]},
                 "%{text}: TPOT %{x:.1f} " + lang.unit("ms") + ", %{y:.0f} " + _("tok/s per chip"), _("TPOT, ms"),
                 range=[0, 2 * d["tpot_slo_ms"]])
    fig["layout"]["shapes"] = [{"type": "line", "x0": d["tpot_slo_ms"], "x1": d["tpot_slo_ms"], "y0": 0, "y1": 1,
                                "yref": "paper", "line": {"color": theme.RED, "dash": "dash"}}]
    for i, s in enumerate(d["systems"]):     # each operating point with its band and label
        b = s["bands"]["tokens_per_s_per_chip"]
        fig["data"].append({"type": "scatter", "mode": "markers", "x": [s["tpot_ms"]],
                            "y": [s["tokens_per_s_per_chip"]], "showlegend": False,
                            "marker": {"color": PALETTE[i % len(PALETTE)], "size": 11, "symbol": "diamond"},
                            "error_y": error_bars([s["tokens_per_s_per_chip"]], [b]),
                            "text": [band_text(b)], "hovertemplate": "%{y:.0f} " + _("tok/s per chip")
                            + " (%{text})<extra>" + s["deployment"] + "</extra>"})
    return fig


def ep_figure(d: dict) -> dict:
    """Decode throughput per chip against EP degree, per system."""
    return _lines(d["ep_sweep"], "decode_ep",
                  lambda r: f"{r['fabric']}, " + _("batch %(b)s per chip") % {"b": r["batch_per_chip"]}
                  + f", TPOT {r['tpot_ms']:.1f} {lang.unit('ms')}",
                  "%{text}<br>EP%{x}: %{y:.0f} " + _("tok/s per chip"), _("decode EP degree"), type="log")


def bars_figure(d: dict) -> dict:
    """Per-TFLOPS, per-kW and $ per million tokens: three stacked panels of horizontal bars, each
    titled with its figure and which way is better; system names sit on the y axes, which grow
    to fit them (automargin), so no name is cut and no axis title runs into the next panel."""
    names = [s["deployment"] for s in d["systems"]]
    bars, notes = [], []
    lay = theme.base_layout(hovermode="closest", showlegend=False, margin={"l": 10, "r": 16, "t": 24, "b": 24})
    gap, rows = 0.12, len(METRICS)
    height = (1 - gap * (rows - 1)) / rows
    for i, (m, label, better) in enumerate(METRICS, 1):
        n = "" if i == 1 else str(i)             # Plotly names the first axes x and y
        top = 1 - (i - 1) * (height + gap)
        bands = [s["bands"][m] for s in d["systems"]]
        bars.append({"type": "bar", "orientation": "h", "name": _(label), "y": names, "x": [s[m] for s in d["systems"]],
                     "xaxis": f"x{n}", "yaxis": f"y{n}", "marker": {"color": PALETTE[i - 1]},
                     "error_x": error_bars([s[m] for s in d["systems"]], bands),
                     "text": [f"{components.fmt(s[m])} {band_text(b)}" for s, b in zip(d["systems"], bands)],
                     "textposition": "auto",
                     "hovertemplate": "%{y}: %{text}<extra>" + _(label) + "</extra>"})
        lay[f"xaxis{n}"] = {"anchor": f"y{n}", "gridcolor": theme.GRID, "rangemode": "tozero", "automargin": True}
        lay[f"yaxis{n}"] = {"anchor": f"x{n}", "domain": [top - height, top], "automargin": True,
                            "autorange": "reversed", "gridcolor": theme.GRID}
        notes.append({"text": f"<b>{_(label)}</b> ({_(better)})", "x": 0, "xref": "paper", "xanchor": "left",
                      "y": top, "yref": "paper", "yanchor": "bottom", "showarrow": False, "font": {"size": 12}})
    lay["annotations"] = notes
    return {"data": bars, "layout": lay}


def error_bars(values: list, bands: list[dict]) -> dict:
    """Plotly error bars of +-band_pct% around each figure (leave-one-source-out cross-validation)."""
    return {"type": "data", "visible": True, "color": theme.TEXT,
            "array": [(v or 0) * (b["band_pct"] or 0) / 100 for v, b in zip(values, bands)]}


def band_text(b: dict) -> str:
    """"±3.2% · validation": a figure's band and its label, in the viewer's language."""
    pct = "" if b["band_pct"] is None else f"±{b['band_pct']:g}% · "
    return pct + _(b["label"])


def what_it_supports(d: dict) -> str:
    """One sentence on what the numbers support and which inputs decide it, from the data: the
    cheapest system per million tokens on the TCO basis against the runner-up, the cost per
    chip-hour each rests on (with the kind of source of its capex) and the runner-up's cost that
    would tie, the cheapest on the rental basis, and who leads per chip and per kW."""
    rows = d["systems"]
    a, b = sorted(rows, key=lambda s: s["usd_per_million_tokens"])[:2]
    rent = min(rows, key=lambda s: s["usd_per_million_tokens_rental"])
    kind = lambda s: (_("an assumption") if "assumption" in s["tco_sources"]["capex_usd_per_chip"].lower()
                      else _("cited"))
    return _("On one cost basis (TCO: capex over the service life plus power at one boundary x PUE) %(a)s costs "
             "least per million output tokens ($%(va)s against $%(vb)s on %(b)s); that rests on the capex and life "
             "behind each chip-hour (%(a)s $%(pa)s, capex %(ka)s; %(b)s $%(pb)s, capex %(kb)s: at $%(tie)s %(b)s "
             "would tie) as much as on throughput, where %(fast)s leads per chip and %(kw)s per kW; on rental "
             "prices %(r)s is cheapest.") % {
        "a": a["deployment"], "b": b["deployment"], "va": components.fmt(a["usd_per_million_tokens"]),
        "vb": components.fmt(b["usd_per_million_tokens"]), "pa": f"{a['usd_per_chip_hour']:.2f}", "ka": kind(a),
        "pb": f"{b['usd_per_chip_hour']:.2f}", "kb": kind(b),
        "tie": f"{b['usd_per_chip_hour'] * a['usd_per_million_tokens'] / b['usd_per_million_tokens']:.2f}",
        "fast": max(rows, key=lambda s: s["tokens_per_s_per_chip"])["deployment"],
        "kw": max(rows, key=lambda s: s["tokens_per_s_per_kw"])["deployment"], "r": rent["deployment"]}


def workload_line(d: dict) -> str:
    """The workload every figure is for, from the comparison's own record of it."""
    w = d["workload"]
    return _("Workload: %(model)s decode, %(p)s-token prompt + %(o)s output tokens (mean KV %(kv)s tokens), TPOT "
             "SLO %(slo)s ms.") % {"model": w["model"], "p": f"{w['prompt']:,}", "o": f"{w['output']:,}",
                                   "kv": f"{w['kv_len']:,.0f}", "slo": f"{d['tpot_slo_ms']:g}"}


def inputs_table(d: dict) -> html.Div:
    """The power and price per chip behind the per-kW and $ figures, each with its source."""
    rows = [html.Tr([html.Td(s["deployment"]), html.Td(s["chip"]), html.Td(s["precision"]),
                     html.Td(f"{s['chip_power_kw']:g}", className="num"),
                     html.Td(s["chip_power_source"], className="i18n-skip"),      # citations, as written
                     html.Td(f"{s['usd_per_chip_hour']:.2f}", className="num"),
                     html.Td(s["usd_per_chip_hour_source"], className="i18n-skip")])
            for s in d["systems"]]
    head = [_("system"), _("chip"), _("precision"), _("kW per chip"), _("source"), _("$ per chip-hour"), _("source")]
    return html.Div(html.Table([html.Thead(html.Tr([html.Th(h) for h in head])), html.Tbody(rows)], className="tbl",
                               id=f"{P}-inputs"), className="tbl-wrap")


def table(d: dict) -> html.Table:
    head = [_("system"), _("batch/chip"), _("tok/s per chip"), _("band"), _("TPOT ms"), _("all-to-all share"),
            _("$ / M tokens")]
    rows = [html.Tr([html.Td(s["deployment"]), html.Td(s["batch_per_chip"], className="num"),
                     html.Td(f"{s['tokens_per_s_per_chip']:,.0f}", className="num"),
                     html.Td(band_text(s["bands"]["tokens_per_s_per_chip"])),
                     html.Td(components.fmt(s["tpot_ms"]), className="num"),
                     html.Td(f"{s['alltoall_share']:.0%}", className="num"),
                     html.Td(components.fmt(s["usd_per_million_tokens"]), className="num")]) for s in d["systems"]]
    return html.Div(html.Table([html.Thead(html.Tr([html.Th(h) for h in head])), html.Tbody(rows)], className="tbl",
                               id=f"{P}-table"), className="tbl-wrap")


def layout(**_kwargs):
    d = _compare()
    slo = {"slo": f"{d['tpot_slo_ms']:g}"}
    return html.Div([
        components.page_header(_("Why a supernode"),
                      _("The same DeepSeek-R1 decode on CloudMatrix384 and four GPU systems at one TPOT SLO, from "
                        "the perf model: what each chip, TFLOPS, kW and dollar delivers, and where the all-to-all "
                        "hits the inter-node bandwidth wall. Sweeps and capacity searches: Explorer.")),
        components.panel([
            html.P(workload_line(d), id=f"{P}-workload"),
            html.P(what_it_supports(d), id=f"{P}-supports", className="supports"),
            table(d),
            html.Button(_("Download CSV"), id=f"{P}-csv", className="btn-small"), dcc.Download(id=f"{P}-csv-dl"),
            html.P(_("DeepSeek-R1 decode at each system's operating point: the largest batch per chip whose TPOT "
                     "meets %(slo)s ms and whose KV fits. The all-to-all share is dispatch + combine over operator "
                     "time: on UB it stays near a fifth, on Hopper clusters it is about half.") % slo, className="hint"),
        ], _("Why a supernode: the same model on five systems"), "model"),
        components.panel([
            components.graph(f"{P}-curves", curves_figure(d), 360),
            html.P(_("The same decode, batch by batch, on the same axes: each curve climbs until its KV cache is "
                     "full; the dashed line is the %(slo)s ms TPOT SLO, where the table's operating points sit.") % slo,
                   className="hint"),
        ], _("Decode throughput per chip against TPOT"), "model", info_text=_(
            "Decode tokens/s per chip against TPOT, batch by batch, for each system, computed by the perf "
            "model from hardware, kernel tables and deployment. CloudMatrix384 is calibrated on the paper's "
            "decode rows; the GPU systems are predictions, checked against their published throughputs on "
            "the Validation page (validation rows).")),
        html.Div([
            components.panel([components.graph(f"{P}-bars", bars_figure(d), 520),
                     html.P(_("Per dense TFLOPS of the serving precision, per kW and per dollar, from the power and "
                              "price per chip below (systems.toml, each with its source or marked as an "
                              "assumption)."), className="hint"),
                     inputs_table(d)], _("Per TFLOPS, per kW, per dollar"), "model", info_text=_(
                "Each system's decode throughput at its operating point (perf model) divided by dense TFLOPS, "
                "by kW and turned into dollars per million output tokens; power and prices are per-chip figures "
                "from systems.toml, each cited or marked as an assumption.")),
            components.panel([components.graph(f"{P}-ep", ep_figure(d), 340),
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
