"""Compare: why a supernode. The same DeepSeek-R1 decode on CloudMatrix384 and four GPU systems at
one TPOT SLO, side by side (perf model, twin.explore.compare): curves on the same axes, per-TFLOPS /
per-kW / cost bars, the EP sweep; each chart says what it shows, and the table downloads as CSV.
Below, variants beside the CloudMatrix384 baseline (twin.explore.whatif): the what-ifs' engine figures
are measured by a job of the job pool, never in a request thread."""
from __future__ import annotations

from functools import lru_cache

import dash
import pandas as pd
from dash import Input, Output, State, dcc, html, no_update

from twin.explore import whatif
from twin.explore.compare import compare
from twin.live import jobs
from twin.ui import components
from twin.ui import guard
from twin.ui import lang
from twin.ui import theme
from twin.ui.errors import explain
from twin.ui.lang import N_, _

dash.register_page(__name__, path="/compare", name=N_("Compare"), title=lang.title("Compare"), order=8, menu="more")

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


def names(d: dict) -> dict[str, str]:
    """Deployment id -> what the page calls its system: the catalog's name (CloudMatrix384, H800
    cluster, ...), with the deployment added where two rows share a system."""
    base = {s["deployment"]: _(s["name"]) if s.get("name") else s["system"] for s in d["systems"]}
    dup = {n for n in base.values() if list(base.values()).count(n) > 1}
    return {dep: f"{n} ({dep})" if n in dup else n for dep, n in base.items()}


def _lines(series: dict, x: str, text, hover: str, x_title: str, label: dict, **xaxis) -> dict:
    """One line per system on shared axes (decode tokens/s per chip on y), named by `label`."""
    data = [{"type": "scatter", "mode": "lines+markers", "name": label.get(s, s), "x": [r[x] for r in rows],
             "y": [r["tokens_per_s_per_chip"] for r in rows], "marker": {"color": PALETTE[i % len(PALETTE)]},
             "text": [text(r) for r in rows], "hovertemplate": hover + "<extra>" + label.get(s, s) + "</extra>"}
            for i, (s, rows) in enumerate(series.items())]
    lay = theme.base_layout(hovermode="closest", xaxis={"title": {"text": x_title}, "gridcolor": theme.GRID, **xaxis},
                        yaxis={"title": {"text": _("decode tokens/s per chip")}, "gridcolor": theme.GRID,
                               "rangemode": "tozero"})
    return {"data": data, "layout": lay}


def curves_figure(d: dict) -> dict:
    """Every system's decode curve (tokens/s per chip vs TPOT) on the same axes, with the SLO."""
    fig = _lines(d["curves"], "tpot_ms", lambda r: _("batch %(b)s per chip") % {"b": r["batch_per_chip"]},
                 "%{text}: TPOT %{x:.1f} " + lang.unit("ms") + ", %{y:.0f} " + _("tok/s per chip"), _("TPOT, ms"),
                 names(d), range=[0, 2 * d["tpot_slo_ms"]])
    fig["layout"]["shapes"] = [{"type": "line", "x0": d["tpot_slo_ms"], "x1": d["tpot_slo_ms"], "y0": 0, "y1": 1,
                                "yref": "paper", "line": {"color": theme.RED, "dash": "dash"}}]
    for i, s in enumerate(d["systems"]):     # each operating point with its band and label
        b = s["bands"]["tokens_per_s_per_chip"]
        fig["data"].append({"type": "scatter", "mode": "markers", "x": [s["tpot_ms"]],
                            "y": [s["tokens_per_s_per_chip"]], "showlegend": False,
                            "marker": {"color": PALETTE[i % len(PALETTE)], "size": 11, "symbol": "diamond"},
                            "error_y": error_bars([s["tokens_per_s_per_chip"]], [b]),
                            "text": [band_text(b)], "hovertemplate": "%{y:.0f} " + _("tok/s per chip")
                            + " (%{text})<extra>" + names(d)[s["deployment"]] + "</extra>"})
    return fig


EP_TICKS = (8, 16, 32, 64, 128, 320)   # labelled degrees on the log axis (320: the paper's), the rest on hover


def ep_figure(d: dict) -> dict:
    """Decode throughput per chip against EP degree, per system."""
    return _lines(d["ep_sweep"], "decode_ep",
                  lambda r: f"{r['fabric']}, " + _("batch %(b)s per chip") % {"b": r["batch_per_chip"]}
                  + f", TPOT {r['tpot_ms']:.1f} {lang.unit('ms')}",
                  "%{text}<br>EP%{x}: %{y:.0f} " + _("tok/s per chip"), _("decode EP degree"), names(d), type="log",
                  tickvals=EP_TICKS, minor={"showgrid": False})


def bars_figure(d: dict) -> dict:
    """Per-TFLOPS, per-kW and $ per million tokens: three stacked panels of horizontal bars, each
    titled with its figure and which way is better; system names sit on the y axes, which grow
    to fit them (automargin), so no name is cut and no axis title runs into the next panel. Each bar's
    label sits inside it from its base, clear of the error bar drawn at its end."""
    label = names(d)
    ys = [label[s["deployment"]] for s in d["systems"]]
    bars, notes = [], []
    lay = theme.base_layout(hovermode="closest", showlegend=False, margin={"l": 10, "r": 16, "t": 24, "b": 24})
    gap, rows = 0.12, len(METRICS)
    height = (1 - gap * (rows - 1)) / rows
    for i, (m, metric, better) in enumerate(METRICS, 1):
        n = "" if i == 1 else str(i)             # Plotly names the first axes x and y
        top = 1 - (i - 1) * (height + gap)
        bands = [s["bands"][m] for s in d["systems"]]
        bars.append({"type": "bar", "orientation": "h", "name": _(metric), "y": ys, "x": [s[m] for s in d["systems"]],
                     "xaxis": f"x{n}", "yaxis": f"y{n}", "marker": {"color": PALETTE[i - 1]},
                     "error_x": error_bars([s[m] for s in d["systems"]], bands),
                     "text": [f"{components.fmt(s[m])} {band_text(b)}" for s, b in zip(d["systems"], bands)],
                     "textposition": "inside", "insidetextanchor": "start", "textangle": 0,
                     "hovertemplate": "%{y}: %{text}<extra>" + _(metric) + "</extra>"})
        lay[f"xaxis{n}"] = {"anchor": f"y{n}", "gridcolor": theme.GRID, "rangemode": "tozero", "automargin": True}
        lay[f"yaxis{n}"] = {"anchor": f"x{n}", "domain": [top - height, top], "automargin": True,
                            "autorange": "reversed", "gridcolor": theme.GRID}
        notes.append({"text": f"<b>{_(metric)}</b> ({_(better)})", "x": 0, "xref": "paper", "xanchor": "left",
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
    label = names(d)
    fast = label[max(rows, key=lambda s: s["tokens_per_s_per_chip"])["deployment"]]
    kw = label[max(rows, key=lambda s: s["tokens_per_s_per_kw"])["deployment"]]
    leads = (_("%(fast)s leads both per chip and per kW") if fast == kw
             else _("%(fast)s leads per chip and %(kw)s per kW")) % {"fast": fast, "kw": kw}
    return _("On one cost basis (TCO: capex over the service life, power at one boundary x PUE, and operations) %(a)s costs "
             "least per million output tokens ($%(va)s against $%(vb)s on %(b)s); that rests on the capex and life "
             "behind each chip-hour (%(a)s $%(pa)s, capex %(ka)s; %(b)s $%(pb)s, capex %(kb)s: at $%(tie)s %(b)s "
             "would tie) as much as on throughput, where %(leads)s; on rental prices %(r)s is cheapest.") % {
        "a": label[a["deployment"]], "b": label[b["deployment"]], "va": components.fmt(a["usd_per_million_tokens"]),
        "vb": components.fmt(b["usd_per_million_tokens"]), "pa": f"{a['usd_per_chip_hour']:.2f}", "ka": kind(a),
        "pb": f"{b['usd_per_chip_hour']:.2f}", "kb": kind(b),
        "tie": f"{b['usd_per_chip_hour'] * a['usd_per_million_tokens'] / b['usd_per_million_tokens']:.2f}",
        "leads": leads, "r": label[rent["deployment"]]}


def workload_line(d: dict) -> str:
    """The workload every figure is for, from the comparison's own record of it."""
    w = d["workload"]
    return _("Workload: %(model)s decode, %(p)s-token prompt + %(o)s output tokens (mean KV %(kv)s tokens), TPOT "
             "SLO %(slo)s ms.") % {"model": w["model"], "p": f"{w['prompt']:,}", "o": f"{w['output']:,}",
                                   "kv": f"{w['kv_len']:,.0f}", "slo": f"{d['tpot_slo_ms']:g}"}


def _sources(s: dict) -> html.Details:
    """How a system's kW and $ per chip-hour are made, in the viewer's language, with the citations
    behind each part (quoted as written in tco.toml) folded under it."""
    t, src = s["tco_parts"], s["tco_sources"]
    power = _("IT %(it)s kW + network %(net)s kW, x PUE %(pue)s") % {
        "it": f"{t['it_kw_per_chip']:g}", "net": f"{t['network_kw_per_chip']:g}", "pue": f"{t['pue']:g}"}
    price = _("capex $%(capex)s per chip over %(life)s years + energy at $%(kwh)s/kWh") % {
        "capex": f"{t['capex_usd_per_chip']:,}", "life": f"{t['life_years']:g}", "kwh": f"{t['usd_per_kwh']:g}"}
    cites = [(_("IT power"), src["it_kw_per_chip"]), (_("network power"), src["network_kw_per_chip"]),
             ("PUE", src["pue"]), (_("capex"), src["capex_usd_per_chip"]), (_("service life"), src["life_years"]),
             (_("electricity price"), src["usd_per_kwh"])]
    return html.Details([html.Summary(f"{power} · {price}"),
                         html.Ul([html.Li([html.B(k + ": "), html.Span(v, className="i18n-skip")]) for k, v in cites],
                                 className="cite-list")], className="cost-sources")


def inputs_table(d: dict) -> html.Div:
    """The power and price per chip behind the per-kW and $ figures: one row a system, then how they
    are made (translated) with their citations (quoted) on a full-width row under it."""
    label, rows = names(d), []
    for s in d["systems"]:
        rows.append(html.Tr([html.Td(label[s["deployment"]]), html.Td(f"{s['chip']} · {s['precision']}"),
                             html.Td(f"{s['chip_power_kw']:g}", className="num"),
                             html.Td(f"{s['usd_per_chip_hour']:.2f}", className="num")]))
        rows.append(html.Tr(html.Td(_sources(s), colSpan=4), className="sub-row"))
    head = [_("system"), _("chip"), _("kW per chip"), _("$ per chip-hour")]
    return html.Div(html.Table([html.Thead(html.Tr([html.Th(h) for h in head])), html.Tbody(rows)], className="tbl",
                               id=f"{P}-inputs"), className="tbl-wrap")


def table(d: dict) -> html.Table:
    head = [_("system"), _("batch/chip"), _("tok/s per chip"), _("band"), _("TPOT ms"), _("all-to-all share"),
            _("$ / M tokens")]
    label = names(d)
    rows = [html.Tr([html.Td(label[s["deployment"]], title=s["deployment"]), html.Td(s["batch_per_chip"], className="num"),
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
        beside_panel(),
    ])


@dash.callback(Output(f"{P}-csv-dl", "data"), Input(f"{P}-csv", "n_clicks"), prevent_initial_call=True)
def on_csv(_n):
    """The comparison table as CSV (the same rows as `python -m twin compare --json`'s systems)."""
    return dcc.send_data_frame(pd.DataFrame(_compare()["systems"]).to_csv, "compare.csv", index=False)


# ---- variants beside the baseline ---------------------------------------------------------------------
TICK_MS = 1000
CHANGES = {"cloudmatrix-infer-paper": N_("the paper's deployment: KV over RDMA, EMS on 32 nodes"),
           "cloudmatrix-unified": N_("one scale-out plane over UB: KV from prefill to decode rides UB, no RDMA or "
                                     "VPC plane"),
           "cloudmatrix-cpu-pool": N_("CPUs pooled for EMS: the cache uses all 48 nodes and nine tenths of their DRAM"),
           "atlas-950-infer": N_("the paper's serving shape on an Atlas 950 SuperPoD (8,192 Ascend 950DT, "
                                 "announced)")}
KINDS = {"baseline": N_("baseline"), "what-if": N_("what-if"), "prediction": N_("prediction")}
TCO_LEFT_OUT = {"prediction": N_("no TCO: the price and power of announced hardware are not public, so its "
                                 "per-kW and per-dollar figures are left out rather than guessed"),
                "what-if": N_("no TCO: what the variant saves (NICs, cards) or costs is not priced in the sources")}


def beside_panel() -> html.Div:
    return components.panel([
        dcc.Interval(id=f"{P}-tick", interval=TICK_MS, disabled=True),
        dcc.Store(id=f"{P}-job", storage_type="session"),
        html.Div([components.dropdown(id=f"{P}-with", multi=True, value=[], placeholder=_("Add a variant"),
                               options=[{"label": f"{v} ({_(KINDS[whatif.label(v)])})", "value": v}
                                        for v in whatif.VARIANTS], style={"minWidth": "min(28rem, 90vw)"}),
                  html.Button(_("Measure on the engine"), id=f"{P}-measure", className="btn-small"),
                  html.Span(id=f"{P}-progress", className="hint")], className="ctl-row"),
        html.P(id=f"{P}-msg", className="ctl-msg"),
        html.Div(id=f"{P}-beside"),
        html.P(id=f"{P}-beside-supports", className="supports"),
        html.P([_("The step-time model sees chips, parallelism and fabrics, not the path KV takes between pools nor "
                 "the size of the EMS pool: for a what-if its figures equal the baseline's, so what differs is "
                 "measured on the engine, the baseline and the variant on the same scenario and seed, in a job of "
                 "its own, and kept for the next viewer. The same run on the command line:"), " ",
               html.Code(whatif.COMMAND.format(name="NAME"))], className="hint"),
    ], _("Beside the baseline"), "sim", info_text=_(
        "The paper's directions for later as what-ifs (one scale-out plane over UB; CPUs pooled for EMS) and the "
        "Atlas 950 SuperPoD (a prediction) beside the paper's CloudMatrix384 deployment: step-time model figures "
        "for each, and engine-measured figures where the model cannot tell a variant from the baseline."))


def check_variants(values) -> tuple[str, ...]:
    """The dropdown's names, each one of whatif.VARIANTS (a tampered value gets a message)."""
    if values is None:
        return ()
    if not isinstance(values, list) or len(values) > len(whatif.VARIANTS) or \
            any(guard.ident(v) not in whatif.VARIANTS for v in values):
        raise ValueError(_("Variants: allowed %(names)s") % {"names": ", ".join(whatif.VARIANTS)})
    return whatif.parse_variants(values)


def _ms(v) -> str:
    return "-" if v is None else components.fmt(v)


def beside_table(b: dict) -> html.Div:
    """Each row: kind, what it changes, step-time figures (and whether they equal the baseline's), and
    the engine's figures for the rows the model cannot tell apart."""
    head = [_("system"), _("kind"), _("what changes"), _("tok/s per chip"), _("TPOT ms"), _("step as baseline"),
            _("TTFT p50 ms"), _("TTFT p99 ms"), _("TPOT p50 ms"), _("token hit ratio"), _("KV transfer ms"),
            _("completed")]
    rows = []
    for r in b["rows"]:
        sm, e = r["step_model"], r["engine"]
        if e:
            eng = [html.Td(_ms(e[k]), className="num") for k in ("ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50")] + [
                html.Td(f"{e['token_hit_ratio']:.2%}", className="num"),
                html.Td(_ms(e["kv_transfer_ms_mean"]), className="num"), html.Td(f"{e['completed']:,}", className="num")]
        else:
            why = _("not measured yet") if r["engine_run"] else _("no engine run: the step-time model already differs")
            eng = [html.Td(why, colSpan=6, className="hint")]
        rows.append(html.Tr([html.Td(r["deployment"]), html.Td(_(KINDS[r["label"]])), html.Td(_(CHANGES[r["deployment"]])),
                             html.Td(f"{sm['tokens_per_s_per_chip']:,.0f}", className="num"),
                             html.Td(components.fmt(sm["tpot_ms"]), className="num"),
                             html.Td(_("yes") if r["step_equals_baseline"] else _("no")), *eng]))
    notes = [html.P(f"{r['deployment']}: {_(TCO_LEFT_OUT[r['label']])}", className="hint")
             for r in b["rows"] if r["tco_left_out"]]
    return html.Div([html.Div(html.Table([html.Thead(html.Tr([html.Th(h) for h in head])), html.Tbody(rows)],
                                         className="tbl", id=f"{P}-beside-table"), className="tbl-wrap"), *notes])


def _change(a, b) -> float:
    return abs(a - b) / b if a is not None and b else 0.0


def beside_supports(b: dict) -> str:
    """One sentence on what the measured rows support: per what-if, its KV transfer time and token hit
    ratio against the baseline's, and how far latency moved; the predictions' label."""
    base = b["rows"][0]["engine"]
    measured = [r for r in b["rows"][1:] if r["engine"]]
    pred = [r["deployment"] for r in b["rows"] if r["label"] == "prediction"]
    tail = (" " + _("%(names)s: a prediction from the step-time model only.") % {"names": ", ".join(pred)}) if pred else ""
    if not measured or not base:
        pending = [r["deployment"] for r in b["rows"][1:] if r["engine_run"]]
        if not pending:
            return tail.strip()
        return _("The step-time model cannot tell %(names)s from the baseline: press Measure on the engine to see "
                 "what differs.") % {"names": ", ".join(pending)} + tail
    clauses = "; ".join(_("%(name)s moves KV in %(kv)s ms against %(kv0)s and hits %(hit)s of tokens in EMS against "
                          "%(hit0)s") % {"name": r["deployment"], "kv": _ms(r["engine"]["kv_transfer_ms_mean"]),
                                         "kv0": _ms(base["kv_transfer_ms_mean"]),
                                         "hit": f"{r['engine']['token_hit_ratio']:.2%}",
                                         "hit0": f"{base['token_hit_ratio']:.2%}"} for r in measured)
    moved = max(_change(r["engine"][k], base[k]) for r in measured for k in ("ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50"))
    run = b["run"]
    verdict = (_("so on this workload they change how KV moves and is cached more than how fast requests are served")
               if moved <= 0.1 else _("so on this workload they change how fast requests are served"))
    return _("On one run (%(sc)s scenario, seed %(seed)s, %(dur)s simulated s) %(clauses)s; TTFT and TPOT move by at "
             "most %(pct)s against the baseline, %(verdict)s.") % {
        "sc": run["scenario"], "seed": run["seed"], "dur": f"{run['duration_s']:g}", "clauses": clauses,
        "pct": f"{moved:.0%}", "verdict": verdict} + tail


def beside_view(values, job: dict | None) -> tuple:
    """(table, sentence, progress text, tick disabled) of the chosen variants; engine rows from the cache."""
    try:
        variants = check_variants(values)
    except ValueError as exc:
        return html.P(str(exc), className="ctl-msg msg-error"), "", "", True
    if not variants:
        return html.P(_("Choose one or more variants to put beside CloudMatrix384."), className="hint"), "", "", True
    b = whatif.beside(variants, TPOT_SLO_MS, whatif.cached(whatif.needs_engine(variants, TPOT_SLO_MS)))
    running = job is not None and job["state"] in ("queued", "running")
    progress = (_("%(done)s of %(total)s engine runs") % {"done": job["done"], "total": job["total"]} if running else
                _("Measuring failed: %(why)s") % {"why": explain(job["message"])} if job and job["state"] == "error"
                else "")
    return beside_table(b), beside_supports(b), progress, not running


def start_measure(values, viewer: str, addr: str | None = None) -> str | None:
    """Queue the engine runs the chosen variants need (None when every one is measured already)."""
    names = whatif.needs_engine(check_variants(values), TPOT_SLO_MS)
    todo = tuple(n for n in names if n not in whatif.cached(names))
    if not todo:
        return None
    return jobs.pool().submit("compare", whatif.measure_job, (todo,), total=len(todo), cost_s=whatif.cost_s(todo),
                              client=viewer, addr=addr)


@dash.callback(
    Output(f"{P}-beside", "children"), Output(f"{P}-beside-supports", "children"), Output(f"{P}-progress", "children"),
    Output(f"{P}-tick", "disabled"),
    Input(f"{P}-with", "value"), Input(f"{P}-tick", "n_intervals"), Input(f"{P}-job", "data"),
    State("ctl-secret", "data"),
)
def on_beside(values, _n, job_id, secret):
    return beside_view(values, jobs.pool().view(guard.ident(job_id), guard.client(secret)[0]) if job_id else None)


@dash.callback(
    Output(f"{P}-job", "data"), Output(f"{P}-msg", "children"), Output(f"{P}-msg", "className"),
    Input(f"{P}-measure", "n_clicks"), State(f"{P}-with", "value"), State("ctl-secret", "data"),
    prevent_initial_call=True,
)
def on_measure(_n, values, secret):
    try:
        job = start_measure(values, *guard.client(secret))
    except ValueError as exc:       # jobs.JobRefused is a ValueError
        return no_update, " ".join(explain(exc).split())[:300], "ctl-msg msg-error"
    if job is None:
        return no_update, _("Every chosen what-if is measured already (the table shows it)."), "ctl-msg msg-ok"
    return job, _("Engine runs queued; they run in a process of their own, and the live twin keeps its pace."), \
        "ctl-msg msg-ok"
