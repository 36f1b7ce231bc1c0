"""Cloud: serve by day, train by night. A simulated day under each co-pool policy (twin.cloud), its
timeline (load, pool sizes, switches, utilisation), the cost and utilisation comparison, and the
policy and price/power assumptions as bounded controls.

A day runs in the callback (one run at a time, a few seconds for a short day); the runs are kept
server-side (the last few), so changing a price only re-prices them.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import dash
from dash import Input, Output, State, dcc, html, no_update

from twin.cloud.copool import POLICIES, Params, load_params, run_day
from twin.cloud.cost import Prices, day_report, load_prices
from twin.cloud.training import compare
from twin.config import CatalogError
from twin.ui import components as C
from twin.ui import guard as G
from twin.ui import theme as T
from twin.ui import lang as Lg
from twin.ui.lang import N_, _

dash.register_page(__name__, path="/cloud", name=N_("Cloud"), title=Lg.title("Cloud"), order=9)

P = "cl"
DAY_MIN_S, DAY_MAX_S, DAY_DEFAULT_S = 30, 600, 60   # simulated seconds standing for 24 h (input bounds)
MSG = (Output(f"{P}-msg", "children", allow_duplicate=True),      # the page's message line, written by
       Output(f"{P}-msg", "className", allow_duplicate=True))     # both the run and the re-pricing
KEEP_RUNS = 3                                        # days kept for re-pricing (memory bound)
_RUNS: OrderedDict = OrderedDict()
_LOCK = threading.Lock()
POLICY_COLOURS = {"copool": T.GREEN, "dedicated": T.ORANGE, "inference-only": T.BLUE}
# (field, label, step) of the knobs shown; bounds come from the pydantic models
KNOBS = (("lend_below", N_("lend below (share of capacity)"), 0.05),
         ("reclaim_above", N_("take back above"), 0.05), ("slo_target", N_("SLO target"), 0.001),
         ("train_from_h", N_("training window from (h)"), 1), ("train_to_h", N_("to (h)"), 1))
PRICES = (("capex_usd", N_("supernode price (USD)"), 100000), ("amortisation_years", N_("amortisation (years)"), 0.5),
          ("usd_per_kwh", N_("electricity (USD/kWh)"), 0.01), ("pue", "PUE", 0.05),
          ("idle_power_share", N_("idle power share"), 0.05))


def _bounds(model, name: str) -> dict:
    out = {}
    for m in model.model_fields[name].metadata:
        for attr, key in (("ge", "min"), ("gt", "min"), ("le", "max"), ("lt", "max")):
            if getattr(m, attr, None) is not None:
                out[key] = getattr(m, attr)
    return out


def _input(model, name: str, label: str, step: float) -> html.Div:
    f = model.model_fields[name]
    hint = f.description or "" if Lg.request_lang() == "en" else ""     # model descriptions are English only
    return html.Div([html.Label(_(label), className="ctl-label", htmlFor=f"{P}-{name}", title=hint),
                     dcc.Input(id=f"{P}-{name}", type="number", value=f.default, step=step, debounce=True,
                               className="num-input", **_bounds(model, name))], className="field")


def layout(**_kwargs):
    return html.Div([
        dcc.Store(id=f"{P}-run"),
        C.page_header(_("Serve by day, train by night"),
                      _("A day of diurnal chat traffic on the 384 NPUs, compressed as the diurnal scenario is. "
                        "Under the co-pool policy serving groups move to a training job when the load allows "
                        "(each move costs the switch time) and come back when it rises or the SLO slips; the "
                        "dedicated split keeps a fixed training cluster; inference-only trains nothing.")),
        html.Div([
            C.panel(html.Div([
                html.Label(_("Timeline of"), className="ctl-label", htmlFor=f"{P}-show"),
                dcc.Dropdown(id=f"{P}-show", options=list(POLICIES), value="copool", clearable=False, className="dd"),
                html.Div([_input(Params, *k) for k in KNOBS]),
                html.Div([html.Label(_("day length (%(lo)s-%(hi)s simulated s)") % {"lo": DAY_MIN_S, "hi": DAY_MAX_S},
                                     className="ctl-label",
                                     htmlFor=f"{P}-day"),
                          dcc.Input(id=f"{P}-day", type="number", value=DAY_DEFAULT_S, min=DAY_MIN_S,
                                    max=DAY_MAX_S, step=10, className="num-input")], className="field"),
                html.Button(_("Run the day"), id=f"{P}-go", n_clicks=0, className="btn"),
                html.H4(_("Price and power (assumptions)")),
                html.Div([_input(Prices, *k) for k in PRICES]),
                html.Div(id=f"{P}-msg", className="ctl-msg"),
            ]), _("Policy and assumptions"), "config"),
            html.Div([
                dcc.Loading(C.panel(C.graph(f"{P}-timeline", _empty(_("Run the day to see its timeline")), 420),
                                    _("The day"), "sim")),
                C.panel(html.Div(id=f"{P}-table"), _("Cost and utilisation per policy"), "sim"),
                C.panel(html.Div(_training()), _("Why communication caps training utilisation"), "model",
                        extra=C.tag("paper")),
            ]),
        ], style={"display": "grid", "gridTemplateColumns": "300px minmax(0, 1fr)", "gap": "12px"}),
    ])


def _pct(v) -> str:
    text = C.pct(v)
    return text if text == "–" else text + "%"


def _empty(message: str) -> dict:
    return {"data": [], "layout": T.base_layout(annotations=[{"text": message, "showarrow": False,
                                                             "font": {"color": T.MUTED}}],
                                                xaxis={"visible": False}, yaxis={"visible": False})}


def _training() -> list:
    t = compare()
    rows = [html.Tr([html.Th(_(x)) for x in (N_("system"), N_("chips"), N_("step s"), N_("exposed all-to-all s"), "MFU",
                                              N_("compute alone"))])]
    for r in t["systems"].values():
        rows.append(html.Tr([html.Td(r["system"]), html.Td(r["npus"]), html.Td(r.get("step_s", "–")),
                             html.Td(r.get("breakdown_s", {}).get("all_to_all_exposed", "–")),
                             html.Td(_pct(r.get("mfu"))), html.Td(_pct(r.get("mfu_compute_only")))]))
    c = t["claims"]
    return [html.Table(rows, className="tbl"),
            html.P(_("Claim (ref 6, product announcement; shown, not fitted): communication bottlenecks drop "
                     "large-scale training utilisation from %(before)s to %(after)s; many enterprise clusters "
                     "see ~%(ent)s.") % {"before": f"{c['large_scale_training_utilisation']['before']:.0%}",
                                         "after": f"{c['large_scale_training_utilisation']['after_communication']:.0%}",
                                         "ent": f"{c['enterprise_cluster_utilisation']['value']:.0%}"},
                   className="hint")]


def timeline_figure(pool) -> dict:
    """Stacked pool sizes (NPUs), the load against serving capacity, switch markers, utilisation."""
    tl = pool.timeline
    x = [6 + 24 * r["t"] / pool.eng.scenario.diurnal_period_s for r in tl]
    traces = [{"type": "scatter", "x": x, "y": [r[k] for r in tl], "name": _(name), "stackgroup": "npus",
               "line": {"width": 0.5, "color": col}, "yaxis": "y"}
              for k, name, col in (("prefill_npus", N_("prefill NPUs"), T.TEAL), ("decode_npus", N_("decode NPUs"), T.PURPLE),
                                   ("training_npus", N_("training NPUs"), T.GREEN),
                                   ("switching_npus", N_("switching"), T.RED))]
    traces += [{"type": "scatter", "x": x, "y": [r["arrival_rps"] for r in tl], "name": _("load (req/s)"),
                "line": {"color": T.YELLOW, "width": 2}, "yaxis": "y2"},
               {"type": "scatter", "x": x, "y": [r["serving_capacity_rps"] for r in tl],
                "name": _("serving capacity (req/s)"), "line": {"color": T.YELLOW, "dash": "dot"}, "yaxis": "y2"},
               {"type": "scatter", "x": x, "y": [(r["useful_prefill_npus"] + r["useful_decode_npus"]
                                                  + (r["training_npus"] if r["training_running"] else 0)) / 384
                                                 for r in tl],
                "name": _("supernode utilisation"), "line": {"color": T.PINK, "width": 1.5}, "yaxis": "y3"}]
    day = pool.eng.scenario.diurnal_period_s
    shapes = [{"type": "line", "x0": 6 + 24 * w["t"] / day, "x1": 6 + 24 * w["t"] / day, "y0": 0, "y1": 1,
               "yref": "paper", "line": {"color": T.GREEN if w["to"] == "training" else T.RED, "width": 1,
                                         "dash": "dot"}} for w in pool.switches[:200]]
    ticks = list(range(6, 31, 3))
    return {"data": traces, "layout": T.base_layout(
        shapes=shapes, margin={"r": 110, "b": 90},
        legend={"orientation": "h", "y": -0.2, "yanchor": "top", "x": 0, "xanchor": "left"},
        xaxis={"tickvals": ticks, "ticktext": [f"{h % 24:02d}:00" for h in ticks],
               "domain": [0, 0.86]},
        yaxis={"title": "NPUs", "range": [0, 390]},
        yaxis2={"title": "req/s", "overlaying": "y", "side": "right", "anchor": "x", "showgrid": False,
                "rangemode": "tozero"},
        yaxis3={"title": _("utilisation"), "overlaying": "y", "side": "right", "position": 0.97, "anchor": "free",
                "range": [0, 1], "showgrid": False},
        title={"text": _("%(policy)s: %(n)s switches (green: to training, red: back to serving)") % {
            "policy": pool.params.policy, "n": len(pool.switches)}})}


def comparison_table(reports: dict) -> html.Table:
    head = (N_("policy"), N_("supernode util"), N_("prefill"), N_("decode"), N_("training"), N_("training steps"),
            N_("switches"), N_("SLO attainment"), "TTFT p99 ms", N_("$ per M tokens"), N_("$ per step"), N_("kWh per day"))
    rows = [html.Tr([html.Th(_(h)) for h in head])]
    for name, r in reports.items():
        u = r["utilisation"]
        rows.append(html.Tr([html.Td(name, style={"color": POLICY_COLOURS[name]}),
                             *[html.Td(_pct(u[k])) for k in ("supernode", "prefill", "decode", "training")],
                             html.Td(f"{r['training_steps']:,.0f}"), html.Td(r["switches"]),
                             html.Td(_pct(r["inference"]["slo_attainment"])),
                             html.Td(C.fmt(r["inference"]["ttft_ms"]["p99"])),
                             html.Td(C.fmt(r["cost_per_million_tokens"])), html.Td(C.fmt(r["cost_per_training_step"])),
                             html.Td(f"{r['energy_kwh_per_day']:,.0f}")]))
    return html.Table(rows, className="tbl")


def _trigger():
    try:
        return dash.ctx.triggered_id
    except Exception:   # called as a function (tests): no callback context
        return None


def _values(fields, raw) -> dict:
    """The form's values as numbers (None = keep the default; the models check the ranges)."""
    out = {}
    for (name, *_), v in zip(fields, raw):
        x = G.number(v)
        if v not in (None, "") and x is None:
            raise CatalogError(f"{name} = {str(v)[:40]!r}: not a number")
        out[name] = x
    return out


def run_days(day_s: float, knobs: dict) -> str:
    """Run the day under every policy; returns the key its pools are kept under."""
    key = repr((day_s, sorted(knobs.items())))
    if key not in _RUNS:
        pools = {}
        for name in POLICIES:
            _, pools[name] = run_day("copool-day", load_params(**knobs, policy=name),
                                     duration_s=day_s, diurnal_period_s=day_s)
        _RUNS[key] = pools
        while len(_RUNS) > KEEP_RUNS:
            _RUNS.popitem(last=False)
    _RUNS.move_to_end(key)
    return key


@dash.callback(
    Output(f"{P}-run", "data"),
    *MSG,
    Input(f"{P}-go", "n_clicks"),
    State(f"{P}-day", "value"),
    *[State(f"{P}-{k[0]}", "value") for k in KNOBS],
    prevent_initial_call=True,
)
def on_run(_n, day, *knobs):
    try:
        d = G.number(day)
        if d is None or not DAY_MIN_S <= d <= DAY_MAX_S:
            raise CatalogError(f"day length = {str(day)[:40]!r}: allowed {DAY_MIN_S} to {DAY_MAX_S} simulated seconds")
        values = {k: v for k, v in _values(KNOBS, knobs).items() if v is not None}
        load_params(**values)
        if not _LOCK.acquire(blocking=False):
            return no_update, _("Another day is being simulated; try again in a few seconds."), "ctl-msg msg-error"
        try:
            key = run_days(d, values)
        finally:
            _LOCK.release()
    except (CatalogError, ValueError) as exc:
        return no_update, _("Not run: %(why)s") % {"why": exc}, "ctl-msg msg-error"
    return {"key": key}, _("Simulated a %(d)s s day under %(n)s policies.") % {"d": f"{d:g}", "n": len(POLICIES)}, "ctl-msg msg-ok"


@dash.callback(
    output=[Output(f"{P}-timeline", "figure"), Output(f"{P}-table", "children"), *MSG],
    inputs={"run": Input(f"{P}-run", "data"), "show": Input(f"{P}-show", "value"),
            "prices": [Input(f"{P}-{k[0]}", "value") for k in PRICES]},
    prevent_initial_call=True,
)
def on_show(run, show, prices):
    """Draw the chosen policy's day and price every policy (again when a price changes)."""
    key = G.store(run).get("key")
    pools = _RUNS.get(key) if isinstance(key, str) else None
    if pools is None:
        return no_update, html.P(_("Run the day to compare the policies."), className="hint"), no_update, no_update
    try:
        pr = load_prices(**_values(PRICES, prices))
    except CatalogError as exc:
        return no_update, no_update, _("Not re-priced: %(why)s") % {"why": exc}, "ctl-msg msg-error"
    policy = show if show in pools else "copool"
    reports = {name: day_report(pool, pr) for name, pool in pools.items()}
    priced = _trigger() in {f"{P}-{k[0]}" for k in PRICES}
    msg = (_("Re-priced the simulated day."), "ctl-msg msg-ok") if priced else (no_update, no_update)
    return timeline_figure(pools[policy]), comparison_table(reports), *msg
