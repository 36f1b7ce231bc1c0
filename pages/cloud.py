"""Cloud: serve by day, train by night, live on the twin you view. Loading the copool-day scenario
(the button here, the run controls or `?scenario=copool-day`) runs the co-pool scheduler inside the
twin's engine; this page draws the day from the twin's snapshot on the shell's beat (twin.ui.polling:
nothing when the version is unchanged) and sends the policy knobs through the twin's action path
(`copool`: checked, rate-limited, logged on the shared twin).

The three-policy comparison is a job of the web process's job pool (twin.live.jobs: its own low-priority
process, queued, cancellable); its result is the days' usage, which this page prices again whenever
a price changes. The job's id is kept in the tab's session, so the table is there when you return.
"""
from __future__ import annotations

import dash
from dash import Input, Output, State, dcc, html, no_update

from twin.live import jobs
from twin.live import session
from twin.cloud import live
from twin.cloud.copool import POLICIES, Params, load_params
from twin.cloud.cost import SEEDS, Prices, comparison, comparison_cost_s, interval, load_prices, priced, verdict
from twin.cloud.training import compare
from twin.model.config import CatalogError
from twin.ui import answer
from twin.ui import components
from twin.ui import eventtext
from twin.ui import guard
from twin.ui import theme
from twin.ui import lang
from twin.ui.errors import explain
from twin.ui.lang import N_, _
from twin.ui.polling import Tick, beat_id, page_stores, page_tick, twin_for

dash.register_page(__name__, path="/cloud", name=N_("Cloud"), title=lang.title("Cloud"), order=9,
                   menu="more", shots=(("cloud", "/cloud?scenario=copool-day"),))

P = "cl"
DAY_MIN_S, DAY_MAX_S, DAY_DEFAULT_S = 30, 600, 600  # simulated seconds standing for 24 h; the default is
# the shortest day whose co-pool vs dedicated verdict is settled on both figures over 3 seeds (README,
# "Does the verdict hold?": shorter days favour the dedicated split, 180-420 s are not settled)
TICKET = f"{P}-ticket"
MSG = (Output(f"{P}-msg", "children", allow_duplicate=True),      # the page's message line, written by
       Output(f"{P}-msg", "className", allow_duplicate=True))     # both the run and the re-pricing
JOB_TICK_MS = 1000                                   # how often a queued or running comparison is read
POLICY_COLOURS = {"copool": theme.GREEN, "dedicated": theme.ORANGE, "inference-only": theme.BLUE}
ACTOR = (State("ctl-twin", "data"), State("ctl-token", "data"), State("ctl-viewer", "data"),
         State("ctl-secret", "data"))
# (field, label, step, hover help) of the knobs shown; bounds come from the pydantic models
KNOBS = (("lend_below", N_("lend below (share of capacity)"), 0.05,
          N_("Lend a group to training only while the load stays below this share of the serving capacity left "
             "after lending (0 to 1).")),
         ("reclaim_above", N_("take back above"), 0.05,
          N_("Take a group back from training when the load rises above this share of serving capacity "
             "(0 to 1.5).")),
         ("slo_target", N_("SLO target"), 0.001,
          N_("Take a group back when the SLO attainment of the last window falls below this; lend only at or "
             "above it (0 to 1).")),
         ("train_from_h", N_("training window from (h)"), 1,
          N_("Clock hour the training window opens (0 to 24). 0 to 24 means always: the load decides.")),
         ("train_to_h", N_("to (h)"), 1,
          N_("Clock hour the training window closes (0 to 24); from 20 to 8 trains only at night.")),
         ("cooldown_h", N_("cooldown (h)"), 0.5,
          N_("Hours of the day clock without lending after a take-back, so groups do not flap (0 to 24; "
             "assumption).")),
         ("dedicated_prefill_groups", N_("dedicated split: prefill groups"), 1,
          N_("Under the dedicated policy, how many 16-NPU prefill groups train all day (0 to 16: two always "
             "serve).")),
         ("dedicated_decode_groups", N_("dedicated split: decode groups"), 1,
          N_("Under the dedicated policy, how many 32-NPU decode groups train all day (0 to 2: one always "
             "serves).")))
POLICY_NAMES = {"copool": N_("co-pool"), "dedicated": N_("dedicated split"), "inference-only": N_("inference only")}
POLICY_HELP = N_("copool: lend idle serving groups to training and take them back as load rises; dedicated: a "
                 "fixed split trains all day; inference-only: no training.")
PRICES = (("capex_usd", N_("supernode price (USD)"), 100000,
           N_("Price of one supernode (ref 6: about US$8 million, before machine room, power and cooling).")),
          ("amortisation_years", N_("amortisation (years)"), 0.5,
           N_("Years the price is spread over (assumption: 4).")),
          ("usd_per_kwh", N_("electricity (USD/kWh)"), 0.01, N_("Price of a kilowatt-hour (assumption: 0.10).")),
          ("pue", "PUE", 0.05, N_("Power usage effectiveness: machine-room power over IT power (assumption: "
                                  "1.3).")),
          ("idle_power_share", N_("idle power share"), 0.05,
           N_("Share of its busy power an idle NPU draws (assumption: 0.5).")))
DAY_HELP = N_("Simulated seconds that stand for 24 hours in the comparison runs (longer is closer to the "
              "600 s day, slower).")


def _bounds(model, name: str) -> dict:
    out = {}
    for m in model.model_fields[name].metadata:
        for attr, key in (("ge", "min"), ("gt", "min"), ("le", "max"), ("lt", "max")):
            if getattr(m, attr, None) is not None:
                out[key] = getattr(m, attr)
    return out


def _input(model, name: str, label: str, step: float, hint: str) -> html.Div:
    f = model.model_fields[name]
    return html.Div([html.Label(_(label), className="ctl-label", htmlFor=f"{P}-{name}"),
                     dcc.Input(id=f"{P}-{name}", type="number", value=f.default, step=step, debounce=True,
                               className="num-input", **_bounds(model, name))], className="field", title=_(hint))


def layout(**_kwargs):
    return html.Div([
        *page_stores(P),
        dcc.Store(id=TICKET),             # a sent action the engine has not answered yet (twin.ui.answer)
        dcc.Store(id=f"{P}-run", storage_type="session"),          # {"job": id} of this tab's comparison
        dcc.Interval(id=f"{P}-job-tick", interval=JOB_TICK_MS, disabled=True),
        components.page_header(_("Serve by day, train by night"),
                      _("A day of diurnal chat traffic on the 384 NPUs, compressed as the diurnal scenario is, live "
                        "on the twin you view. Under the co-pool policy serving groups move to a training job when "
                        "the load allows (each move drains the group, then costs the switch time) and come back when "
                        "it rises or the SLO slips; the dedicated split keeps a fixed training cluster; "
                        "inference-only trains nothing.")),
        html.Div([
            components.panel(html.Div([
                html.Div(id=f"{P}-live", className="hint"),
                html.Button(_("Load the co-pool day"), id=f"{P}-load", n_clicks=0, className="btn",
                            title=_("Restart the viewed twin on scenario copool-day (the co-pool scheduler runs "
                                    "inside it)")),
                html.Div([html.Label(_("Policy"), className="ctl-label", htmlFor=f"{P}-policy"),
                          components.dropdown(id=f"{P}-policy", options=[{"label": f"{_(POLICY_NAMES[k])} ({k})", "value": k} for k in POLICIES],
                                     value="copool", clearable=False,
                                     className="dd")], className="field", title=_(POLICY_HELP)),
                html.Div([_input(Params, *k) for k in KNOBS]),
                html.Button(_("Apply to the twin"), id=f"{P}-apply", n_clicks=0, className="btn",
                            title=_("Send the policy and knobs to the viewed twin (logged on the shared twin)")),
                html.Div(id=f"{P}-msg", className="ctl-msg"),
                html.H4(_("Compare the three policies")),
                html.Div([html.Label(_("day length (%(lo)s-%(hi)s simulated s)") % {"lo": DAY_MIN_S, "hi": DAY_MAX_S},
                                     className="ctl-label", htmlFor=f"{P}-day"),
                          dcc.Input(id=f"{P}-day", type="number", value=DAY_DEFAULT_S, min=DAY_MIN_S,
                                    max=DAY_MAX_S, step=10, className="num-input")],
                         className="field", title=_(DAY_HELP)),
                html.Button(_("Run the comparison"), id=f"{P}-go", n_clicks=0, className="btn",
                            title=_("A short day under each policy in a background job, with the knobs above")),
                html.Button(_("Cancel"), id=f"{P}-cancel", n_clicks=0, className="btn"),
                html.Div(id=f"{P}-job-msg", className="hint", role="status"),
                html.H4(_("Price and power (assumptions)")),
                html.Div([_input(Prices, *k) for k in PRICES]),
            ]), _("Policy and assumptions"), "config"),
            html.Div([
                components.panel(components.graph(f"{P}-timeline", _empty(_("Load the co-pool day to see its timeline")), 420),
                        _("The day, live"), "sim"),
                components.panel(html.Div(id=f"{P}-table", children=html.P(
                    _("Run the comparison to see the three policies side by side."), className="hint")),
                        _("Cost and utilisation per policy"), "sim"),
                components.panel(html.Div(_training()), _("Why communication caps training utilisation"), "model",
                        extra=components.tag("paper")),
            ]),
        ], className="cloud-grid"),
    ])


def _pct(v) -> str:
    text = components.pct(v)
    return text if text == "–" else text + "%"


def _empty(message: str) -> dict:
    return {"data": [], "layout": theme.base_layout(annotations=[{"text": message, "showarrow": False,
                                                             "font": {"color": theme.MUTED}}],
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


def timeline_figure(view: dict) -> dict:
    """The day in two panels over the day clock (`view`: a snapshot's `cloud`, or CoPool.view()).
    Top: stacked pool sizes (NPUs) with every switch as one marker (one trace, not a line each, so
    dozens of moves stay readable). Bottom: the load against serving capacity (req/s, left) and the
    supernode's utilisation (right): two axes per panel at most."""
    tl, day, h0 = view["timeline"], view["period_s"], view["params"]["day_start_h"]
    clock = lambda t: h0 + 24 * t / day
    x = [clock(r["t"]) for r in tl]
    npus = sum(view["npus"].values()) or 384
    traces = [{"type": "scatter", "x": x, "y": [r[k] for r in tl], "name": _(name), "stackgroup": "npus",
               "line": {"width": 0.5, "color": col}, "yaxis": "y"}
              for k, name, col in (("prefill_npus", N_("prefill NPUs"), theme.TEAL), ("decode_npus", N_("decode NPUs"), theme.PURPLE),
                                   ("training_npus", N_("training NPUs"), theme.GREEN),
                                   ("switching_npus", N_("switching"), theme.RED))]
    moves = [w for w in view["switches"] if not x or w["t"] >= tl[0]["t"]]
    to_training = [w["to"] == "training" for w in moves]
    traces.append({"type": "scatter", "mode": "markers", "name": _("switches (▼ to training, ▲ back)"),
                   "x": [clock(w["t"]) for w in moves], "y": [npus * 1.04] * len(moves), "yaxis": "y",
                   "marker": {"symbol": ["triangle-down" if t else "triangle-up" for t in to_training], "size": 9,
                              "color": [theme.GREEN if t else theme.RED for t in to_training]},
                   "text": [f"{w['group']} → {w['to']}: {w['reason']}" for w in moves],
                   "hovertemplate": "%{text}<extra></extra>"})
    traces += [{"type": "scatter", "x": x, "y": [r["arrival_rps"] for r in tl], "name": _("load (req/s)"),
                "line": {"color": theme.YELLOW, "width": 2}, "xaxis": "x2", "yaxis": "y2"},
               {"type": "scatter", "x": x, "y": [r["serving_capacity_rps"] for r in tl],
                "name": _("serving capacity (req/s)"), "line": {"color": theme.YELLOW, "dash": "dot"},
                "xaxis": "x2", "yaxis": "y2"},
               {"type": "scatter", "x": x, "y": [(r["useful_prefill_npus"] + r["useful_decode_npus"]
                                                  + (r["training_npus"] if r["training_running"] else 0)) / npus
                                                 for r in tl],
                "name": _("supernode utilisation"), "line": {"color": theme.PINK, "width": 1.5}, "xaxis": "x2",
                "yaxis": "y3"}]
    lo, hi = (int(x[0]) // 3 * 3, int(x[-1]) + 3) if x else (6, 30)
    ticks = list(range(lo, hi + 1, 3))
    hours = {"tickvals": ticks, "ticktext": [f"{h % 24:02d}:00" for h in ticks], "range": [lo, hi]}
    return {"data": traces, "layout": theme.base_layout(
        margin={"l": 56, "r": 56, "t": 40, "b": 40}, hovermode="closest",
        legend={"orientation": "h", "y": -0.12, "yanchor": "top", "x": 0, "xanchor": "left"},
        xaxis={**hours, "anchor": "y", "showticklabels": False, "matches": "x2"},
        xaxis2={**hours, "anchor": "y2"},
        yaxis={"title": {"text": "NPUs"}, "range": [0, npus * 1.1], "domain": [0.5, 1]},
        yaxis2={"title": {"text": "req/s"}, "rangemode": "tozero", "domain": [0, 0.42], "anchor": "x2"},
        yaxis3={"title": {"text": _("utilisation")}, "overlaying": "y2", "side": "right", "anchor": "x2",
                "range": [0, 1], "tickformat": ".0%", "showgrid": False},
        title={"text": _("%(policy)s: %(what)s") % {"policy": view["params"]["policy"], "what": switches_text(view)}})}


def switches_text(view: dict) -> str:
    """How many switches the day has made, saying how many a change of policy made at once (a
    dedicated split itself never switches: the comparison's row says 0)."""
    k = view.get("policy_moves") or 0
    return (_("%(n)s switches, %(k)s of them when the policy was changed") if k else _("%(n)s switches")) % {
        "n": view["moves"], "k": k}


def live_line(view: dict | None, scenario: str) -> str:
    """One line on what the viewed twin's day is doing (or that it runs no co-pool day)."""
    if not view:
        return _("The viewed twin runs scenario %(s)s, not a co-pool day: load the co-pool day to watch it "
                 "here.") % {"s": scenario}
    f, n = live.day_figures(view), view["npus"]
    hh = view["clock_h"]
    parts = [_("%(clock)s on the day clock") % {"clock": f"{int(hh):02d}:{int(hh % 1 * 60):02d}"},
             _("policy %(p)s") % {"p": view["params"]["policy"]},
             _("%(t)s NPUs training, %(s)s switching, %(d)s draining") % {
                 "t": f"{n['training']:g}", "s": f"{n['switching']:g}", "d": f"{n['draining']:g}"},
             switches_text(view), _("%(k)s training steps") % {"k": f"{view['steps']:,.0f}"}]
    if f:
        parts.append(_("supernode utilisation %(u)s over the last %(h)s h") % {
            "u": _pct(f["supernode_util"]), "h": f"{f['hours']:.1f}"})
    if 0 < n["training"] < view["min_npus"]:
        parts.append(_("below the job's %(m)s-NPU minimum: training waits") % {"m": view["min_npus"]})
    return " · ".join(parts)


@page_tick(P, {"fig": Output(f"{P}-timeline", "figure"), "live": Output(f"{P}-live", "children"),
               "load": Output(f"{P}-load", "style"),
               "form": [Output(f"{P}-policy", "value"), *[Output(f"{P}-{k[0]}", "value") for k in KNOBS]]})
def tick(t: Tick) -> dict:
    """The day from the snapshot (only when it changed); the form follows the twin on a new run."""
    if not t.changed:
        return {}
    view = getattr(t.snap, "cloud", None)
    out = {"live": live_line(view, getattr(t.snap, "scenario", "?")),
           "load": {"display": "none"} if view else {},
           "fig": timeline_figure(view) if view else _empty(_("Load the co-pool day to see its timeline"))}
    if view and t.mode == "full":
        out["form"] = [view["params"]["policy"], *[view["params"][k[0]] for k in KNOBS]]
    return out


answer.follow(f"{P}-msg", TICKET, Input(beat_id(P), "data"))      # the engine's answer to what was sent


@dash.callback(*MSG, Input(f"{P}-load", "n_clicks"), *ACTOR, prevent_initial_call=True)
def on_load(_n, choice, token, viewer, secret):
    """Restart the viewed twin on the co-pool day (the same reset as the run controls)."""
    tw, _note = twin_for(choice)
    ticket = tw.send("reset", {"scenario": live.SCENARIOS[0]}, **guard.actor(viewer, token, secret))
    return answer.sent(tw, ticket, lambda: eventtext.said(ticket.said), TICKET)


@dash.callback(*MSG, Input(f"{P}-apply", "n_clicks"), State(f"{P}-policy", "value"),
               *[State(f"{P}-{k[0]}", "value") for k in KNOBS], *ACTOR, prevent_initial_call=True)
def on_apply(_n, policy, *rest):
    """Send the policy and knobs to the viewed twin as one co-pool change."""
    knobs, (choice, token, viewer, secret) = rest[:len(KNOBS)], rest[len(KNOBS):]
    tw, _note = twin_for(choice)
    try:
        fields = {k: int(v) if Params.model_fields[k].annotation is int and v == int(v) else v
                  for k, v in _values(KNOBS, knobs).items() if v is not None}
        if policy not in POLICIES:
            raise CatalogError(f"policy = {str(policy)[:40]!r}: allowed {', '.join(POLICIES)}")
    except (session.ControlError, CatalogError) as exc:
        return _("Not applied: %(why)s") % {"why": explain(exc)}, "ctl-msg msg-error"
    ticket = tw.send("copool", {"policy": policy, **fields}, **guard.actor(viewer, token, secret))
    return answer.sent(tw, ticket, lambda: eventtext.said(ticket.said), TICKET)


def _cell(values: list, fmt) -> str:
    """A figure across seeds: its mean and the half-width of its 95% interval ("68.2% ± 0.9")."""
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    i = interval(values)
    half = (i["hi"] - i["mean"]) if i["hi"] is not None else 0.0
    return fmt(i["mean"]) + (f" ± {fmt(half)}" if fmt(half) != fmt(0.0) else "")


def comparison_table(reports: dict) -> html.Table:
    """One row per policy; each cell is the mean over the seeds ± the half-width of its 95% interval
    (`reports`: {policy: [priced day per seed]})."""
    head = (N_("policy"), N_("supernode util"), N_("prefill"), N_("decode"), N_("training"), N_("training steps"),
            N_("switches"), N_("SLO attainment"), "TTFT p99 ms", N_("$ per M tokens"), N_("$ per step"), N_("kWh per day"))
    pct = lambda v: _pct(v)
    num = lambda v: f"{v:,.0f}"
    usd = lambda v: components.fmt(round(v, 3))
    cols = [(lambda r, k=k: r["utilisation"][k], pct) for k in ("supernode", "prefill", "decode", "training")] + [
        (lambda r: r["training_steps"], num), (lambda r: r["switches"], num),
        (lambda r: r["inference"]["slo_attainment"], pct), (lambda r: r["inference"]["ttft_ms"]["p99"], num),
        (lambda r: r["cost_per_million_tokens"], usd), (lambda r: r["cost_per_training_step"], usd),
        (lambda r: r["energy_kwh_per_day"], num)]
    rows = [html.Tr([html.Th(_(h)) for h in head])]
    for name, rs in reports.items():
        rows.append(html.Tr([html.Td(name, style={"color": POLICY_COLOURS[name]}),
                             *[html.Td(_cell([get(r) for r in rs], fmt)) for get, fmt in cols]]))
    return html.Table(rows, className="tbl")


def verdict_line(reports: dict) -> html.P:
    """What the seeds support: co-pool against the dedicated split on utilisation and on $ per M
    tokens, or that the verdict is not settled at this day length (the 95% interval of the
    difference spans zero)."""
    n = len(reports["copool"])
    v = verdict(reports)
    says = {"supernode_util": (N_("utilisation"), lambda x: f"{x * 100:+.1f} " + _("points")),
            "usd_per_m_tokens": (N_("$ per M tokens"), lambda x: f"{x:+.3f} $")}
    parts, unsettled = [], []
    for fig, (label, fmt) in says.items():
        d, ahead = v[fig]["diff"], v[fig]["ahead"]
        if d is None:
            continue
        span = f"[{fmt(d['lo'])}, {fmt(d['hi'])}]" if d["lo"] is not None else fmt(d["mean"])
        if ahead:
            parts.append(_("%(who)s is ahead on %(what)s (co-pool minus dedicated %(span)s)") % {
                "who": _(POLICY_NAMES[ahead]), "what": _(label), "span": span})
        else:
            unsettled.append(_(label))
            parts.append(_("%(what)s: co-pool minus dedicated %(span)s spans zero") % {"what": _(label), "span": span})
    head = _("Over %(n)s seeds (95%% intervals):") % {"n": n}
    tail = (" " + _("Not settled at this day length: run a longer day.")) if unsettled else ""
    return html.P(f"{head} {'; '.join(parts)}.{tail}", id=f"{P}-verdict",
                  className="hint" + (" verdict-open" if unsettled else ""))


def _trigger():
    try:
        return dash.ctx.triggered_id
    except Exception:   # called as a function (tests): no callback context
        return None


def _values(fields, raw) -> dict:
    """The form's values as numbers (None = keep the default; the models check the ranges)."""
    out = {}
    for (name, *_rest), v in zip(fields, raw):
        x = guard.number(v)
        if v not in (None, "") and x is None:
            raise CatalogError(f"{name} = {str(v)[:40]!r}: not a number")
        out[name] = x
    return out


@dash.callback(
    Output(f"{P}-run", "data"),
    *MSG,
    Input(f"{P}-go", "n_clicks"),
    State(f"{P}-day", "value"),
    *[State(f"{P}-{k[0]}", "value") for k in KNOBS],
    State("ctl-secret", "data"),
    prevent_initial_call=True,
)
def on_run(_n, day, *rest):
    knobs, secret = rest[:-1], rest[-1]
    try:
        d = guard.number(day)
        if d is None or not DAY_MIN_S <= d <= DAY_MAX_S:
            raise CatalogError(f"day length = {str(day)[:40]!r}: allowed {DAY_MIN_S} to {DAY_MAX_S} simulated seconds")
        values = {k: v for k, v in _values(KNOBS, knobs).items() if v is not None}
        load_params(**values)
        who, addr = guard.client(secret)
        job = jobs.pool().submit("cloud", comparison, (d, values), total=SEEDS * len(POLICIES),
                               cost_s=comparison_cost_s(d), client=who, addr=addr)
    except (CatalogError, ValueError) as exc:         # JP.JobRefused is a ValueError
        return no_update, _("Not run: %(why)s") % {"why": explain(exc)}, "ctl-msg msg-error"
    return {"job": job, "day": d}, _("A %(d)s s day under %(n)s policies and %(s)s seeds is queued as a background "
                                     "job.") % {"d": f"{d:g}", "n": len(POLICIES), "s": SEEDS}, "ctl-msg msg-ok"


def _job(run, secret) -> dict | None:
    return jobs.pool().view(guard.store(run).get("job"), guard.client(secret)[0])


def job_text(job: dict | None) -> str:
    """One line on the comparison job: its place in the queue, its progress, or how it ended."""
    if job is None:
        return ""
    if job["state"] == "queued":
        return _("Comparison queued: %(pos)s in line, about %(s)s s of work ahead.") % {
            "pos": job["position"], "s": f"{job['wait_s']:,.0f}"}
    if job["state"] == "running":
        return _("Comparison running: %(done)s of %(total)s runs (%(used)s of at most %(cap)s CPU-s).") % {
            "done": job["done"], "total": job["total"], "used": f"{job['cpu_s']:,.0f}", "cap": f"{job['ceiling_s']:,.0f}"}
    if job["state"] == "cancelled":
        return _("Comparison cancelled.")
    if job["state"] == "error":
        return _("Comparison failed: %(why)s") % {"why": explain(job["message"])}
    return ""


@dash.callback(
    Output(f"{P}-job-msg", "children"), Output(f"{P}-job-tick", "disabled"), Output(f"{P}-run", "data", allow_duplicate=True),
    Input(f"{P}-job-tick", "n_intervals"), Input(f"{P}-run", "data"), State("ctl-secret", "data"),
    prevent_initial_call="initial_duplicate",
)
def on_job_tick(_n, run, secret):
    """Follow the comparison job; when it is done, touch the run store so the table is priced."""
    job = _job(run, secret)
    if job is None:
        return "", True, no_update
    active = job["state"] in ("queued", "running")
    done_now = job["state"] == "done" and not guard.store(run).get("shown")
    return job_text(job), not active, {**guard.store(run), "shown": True} if done_now else no_update


@dash.callback(
    Output(f"{P}-job-msg", "children", allow_duplicate=True),
    Input(f"{P}-cancel", "n_clicks"), State(f"{P}-run", "data"), State("ctl-secret", "data"),
    prevent_initial_call=True,
)
def on_cancel(_n, run, secret):
    if jobs.pool().cancel(guard.store(run).get("job"), guard.client(secret)[0]):
        return _("Comparison cancelled.")
    return _("Cancel: no comparison of yours is queued or running.")


@dash.callback(
    output=[Output(f"{P}-table", "children"), *MSG],
    inputs={"run": Input(f"{P}-run", "data"), "prices": [Input(f"{P}-{k[0]}", "value") for k in PRICES],
            "secret": State("ctl-secret", "data")},
    prevent_initial_call="initial_duplicate",
)
def on_show(run, prices, secret):
    """Price every policy of this tab's finished comparison (again when a price changes)."""
    job = _job(run, secret)
    usage = job["result"] if job and job["state"] == "done" else None
    if usage is None:
        return html.P(_("Run the comparison to see the three policies side by side."), className="hint"), \
            no_update, no_update
    try:
        pr = load_prices(**_values(PRICES, prices))
    except CatalogError as exc:
        return no_update, _("Not re-priced: %(why)s") % {"why": explain(exc)}, "ctl-msg msg-error"
    reports = {name: [priced(u, pr) for u in days] for name, days in usage.items()}
    repriced = _trigger() in {f"{P}-{k[0]}" for k in PRICES}
    msg = (_("Re-priced the simulated day."), "ctl-msg msg-ok") if repriced else (no_update, no_update)
    return html.Div([comparison_table(reports), verdict_line(reports)]), *msg
