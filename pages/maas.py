"""MaaS: the supernode as a map of models. A MaaS day (twin.cloud.maas: several models on the 384
NPUs, capacity moving to the model that needs it) runs compressed as a bounded background job
(twin.cloud.maasjob, twin.live.jobs), optionally with one model's traffic doubled; the page then
replays the finished day with a time slider: which model holds each 16-NPU unit, the moves up to that
moment with why, and per model its throughput, TTFT and TPOT against its SLO and $ per million tokens.
Before a run the map shows the day's starting split from the catalog."""
from __future__ import annotations

import dash
from dash import Input, Output, State, dcc, html, no_update

from twin.cloud import maasjob
from twin.cloud.maas import UNIT_NPUS, days, load_day
from twin.live import jobs
from twin.ui import components, figures, guard, jobform, lang, theme
from twin.ui.errors import explain
from twin.ui.lang import N_, _

dash.register_page(__name__, path="/maas", name=N_("MaaS"), title=lang.title("MaaS"), order=9.5,
                   menu="more", live=(None, "#ms-map"))

P = "ms"
TICK_MS = 1000
NONE = "none"
COLS = 6                         # the map: 24 units in 4 rows of 6 (two 8-NPU nodes a unit)
COLOURS = (theme.BLUE, theme.ORANGE, theme.GREEN, theme.PURPLE, theme.TEAL, theme.PINK, theme.YELLOW, theme.RED)
DAYS = {"maas-day": N_("capacity moves between models"), "maas-day-static": N_("the split stays fixed")}
STATE_NAMES = {"serving": N_("serving"), "draining": N_("draining (given away)"),
               "loading": N_("loading weights"), "waiting": N_("waiting for a donor")}
LABELS = {"calibration": N_("calibration"), "prediction": N_("prediction")}
MAP_INFO = N_("Each square is a ledger unit of 16 NPUs (two 8-NPU nodes) of the 384, coloured by the model that "
              "holds it at the slider's moment; a dashed border: its group is draining or loading weights. Before "
              "a run: the day's starting split (twin/catalog/maas.toml). Simulated by the twin's engines.")
DAY_INFO = N_("Per model, every control step of the simulated day: NPUs held (solid) and arrivals as a share of "
              "its serving capacity (dotted, right axis). The vertical line is the slider's moment.")


def _field(label: str, child, title: str = "") -> html.Div:
    return html.Div([html.Label(label, className="ctl-label"), child], className="field", title=title)


def model_options(name: str) -> list[dict]:
    return [{"label": _("none (as the catalog)"), "value": NONE}] + [
        {"label": m, "value": m} for m in load_day(name).models]


def layout(**_kwargs):
    bounds = {"lo": f"{maasjob.MIN_DAY_S:g}", "hi": f"{maasjob.MAX_DAY_S:g}"}
    return html.Div([
        dcc.Interval(id=f"{P}-tick", interval=TICK_MS, disabled=True),
        dcc.Store(id=f"{P}-job", storage_type="session"),
        components.page_header(_("Models as a service"), _(
            "One supernode serving several large MoE models side by side, as Huawei Cloud does: which NPUs serve "
            "which model, how each model meets its SLO, what a million tokens costs, and how capacity moves to the "
            "model that needs it over a day.")),
        components.panel(html.Div([
            html.Div([
                _field(_("Day"), dcc.RadioItems(id=f"{P}-day", value="maas-day", inline=True, options=[
                    {"label": f"{k} — {_(DAYS[k])}", "value": k} for k in DAYS if k in days()])),
                _field(_("Day length, simulated s (%(lo)s–%(hi)s)") % bounds,
                       dcc.Input(id=f"{P}-len", type="number", value=maasjob.DEFAULT_DAY_S, step=10,
                                 style={"width": "7em"}),
                       _("simulated seconds that stand for 24 hours (the command line's day: 3,600)")),
                _field(_("What if this model's traffic doubles"),
                       components.dropdown(id=f"{P}-double", options=model_options("maas-day"), value=NONE,
                                           clearable=False, className="dd")),
                _field(_("Seed"), dcc.Input(id=f"{P}-seed", type="number", value=0, step=1, style={"width": "7em"})),
                *jobform.buttons(P, _("Run the day")),
            ], className="ctl-row"),
            html.Div(_("A compressed day: the catalog's four models, loads, peak hours and policy, with the whole day "
                       "squeezed into the simulated seconds above (the command line's day runs 3,600 s, about 17 "
                       "minutes). Bounded: one run per viewer, estimated from its "
                       "size and refused past %(cpu)s CPU-seconds; it runs in a low-priority process of its own and "
                       "the live twin keeps its pace.") % {"cpu": f"{jobs.MAX_JOB_CPU_S:,.0f}"}, className="hint"),
            *jobform.status(P),
        ]), _("Run a MaaS day"), "config"),
        components.panel([
            html.Div(_field(_("Moment of the day"), dcc.Slider(id=f"{P}-t", min=0, max=1, step=1, value=0, marks={},
                                                               disabled=True)), className="ctl-row",
                     style={"display": "block"}),
            html.P(id=f"{P}-when", className="hint"),
            components.graph(f"{P}-map", map_figure(maasjob.start_owner(load_day("maas-day")),
                                                    list(load_day("maas-day").models)), 300, info_text=_(MAP_INFO)),
        ], _("The supernode as a map of models"), "sim"),
        components.panel(html.Div(html.P(_("Run the day to see each model's throughput, latency against its SLO and "
                                           "cost here."), className="hint"), id=f"{P}-results"),
                         _("Per model"), "sim"),
        components.panel(components.graph(f"{P}-fig", figures.empty_figure(
            message=_("Run the day: each model's NPUs and load over the day appear here"), height=280), 280,
            info_text=_(DAY_INFO)), _("Over the day"), "sim"),
        components.panel(html.Div(html.P(_("Moves appear here as they happen while the day runs, and as it is replayed."), className="hint"),
                                  id=f"{P}-moves"), _("Moves, up to the slider's moment"), "sim"),
    ])


# ---- the form and the job ------------------------------------------------------------------------
def start_run(name, length, double, seed, viewer: str, addr: str | None = None) -> str:
    """Check the form and queue the day; ValueError (a JobRefused is one) with a one-line message."""
    name, double = guard.ident(name), guard.ident(double)
    if name not in DAYS or name not in days():
        raise ValueError(_("Day: allowed %(names)s") % {"names": ", ".join(k for k in DAYS if k in days())})
    length = guard.number(length)
    if length is None or not maasjob.MIN_DAY_S <= length <= maasjob.MAX_DAY_S:
        raise ValueError(_("Day length: allowed %(lo)s to %(hi)s simulated s") % {
            "lo": f"{maasjob.MIN_DAY_S:g}", "hi": f"{maasjob.MAX_DAY_S:g}"})
    models = list(load_day(name).models)
    if double not in [NONE, *models]:
        raise ValueError(_("Traffic doubles for: allowed none or one of %(names)s") % {"names": ", ".join(models)})
    s = guard.number(seed)
    hi = components.bounds("seed")["hi"]
    if s is None or not s.is_integer() or not 0 <= s <= int(hi):
        raise ValueError(_("Seed: allowed a whole number 0 to %(hi)s") % {"hi": hi})
    double = None if double == NONE else double
    day = maasjob.day_for(name, float(length), double, int(s))
    return jobs.pool().submit("maas", maasjob.maas_job, (name, float(length), double, int(s)),
                              total=maasjob.steps(day), cost_s=maasjob.cost_s(day, double), client=viewer, addr=addr)


def _report(job_id, secret) -> dict | None:
    job = jobform.view(job_id, secret)
    return job["result"] if job and job["state"] == "done" else None


@dash.callback(Output(f"{P}-double", "options"), Output(f"{P}-double", "value"), Output(f"{P}-map", "figure"),
               Input(f"{P}-day", "value"), State(f"{P}-double", "value"), prevent_initial_call=True)
def on_day(name, double):
    """The chosen day's models to double and its starting split."""
    name = guard.ident(name)
    if name not in DAYS or name not in days():
        return no_update, no_update, no_update
    opts = model_options(name)
    day = load_day(name)
    return opts, double if double in [o["value"] for o in opts] else NONE, map_figure(
        maasjob.start_owner(day), list(day.models))


on_start, on_cancel = jobform.callbacks(
    P, ("day", "len", "double", "seed"), start_run,
    lambda: _("MaaS day queued; it runs in a process of its own, and the live twin keeps its pace."),
    lambda: _("MaaS day cancelled."), lambda: _("Cancel: no MaaS day of yours is queued or running."))


def progress_view(job: dict | None):
    """(progress value, max, text, tick disabled, message, class, results, slider max, marks, value,
    disabled, map, moment, moves): while the day runs, the map and the moves follow its last step."""
    return _progress(job) + (live(job["partial"]) if job and job["state"] == "running" and job.get("partial")
                             else (no_update,) * 3)


def live(steps: list[dict]) -> tuple:
    """(map, moment, moves) of a running day: the ledger after its last step, every move so far."""
    last = steps[-1]
    log = [mv for s in steps for mv in s["moves"]]
    return ledger(last["frame"], last["models"], last["unit_npus"], last["day_s"], log, _("running, the day so far"))


def _progress(job: dict | None) -> tuple:
    keep = (no_update,) * 5
    if job is None:
        return ("0", "1", "", True, no_update, no_update) + keep
    text = _("%(done)s of %(total)s control steps") % {"done": job["done"], "total": job["total"]}
    if job["state"] == "queued":
        text = _("queued: %(pos)s in line, about %(s)s s of work ahead; estimated %(cost)s CPU-s") % {
            "pos": job["position"], "s": f"{job['wait_s']:,.0f}", "cost": f"{job['cost_s']:,.0f}"}
        return ("0", str(job["total"]), text, False, no_update, no_update) + keep
    if job["state"] == "running":
        text += " · " + _("%(used)s of at most %(cap)s CPU-s") % {"used": f"{job['cpu_s']:,.0f}",
                                                                 "cap": f"{job['ceiling_s']:,.0f}"}
        return (str(job["done"]), str(job["total"]), text, False, no_update, no_update) + keep
    if job["state"] in ("error", "cancelled"):
        why = _("MaaS day cancelled.") if job["state"] == "cancelled" else \
            _("MaaS day failed: %(why)s") % {"why": explain(job["message"])}
        return (str(job["done"]), str(job["total"]), text, True, why,
                "ctl-msg msg-ok" if job["state"] == "cancelled" else "ctl-msg msg-error") + keep
    rep = job["result"]
    lost = rep["requests"]["lost"]
    last = len(rep["frames"]) - 1
    marks = {i: _clock(_hour(rep, rep["frames"][i]["t"])) for i in range(0, last + 1, max(1, last // 6))}
    return (str(job["total"]), str(job["total"]), text + " — " + _("done"), True,
            _("MaaS day done: %(moves)s moves, %(lost)s requests lost.") % {"moves": rep["moves"]["count"], "lost": lost},
            "ctl-msg msg-ok" if lost == 0 and rep["conserved"] else "ctl-msg msg-error", results(rep), last, marks,
            last, False)


@dash.callback(
    Output(f"{P}-progress", "value"), Output(f"{P}-progress", "max"), Output(f"{P}-progress-text", "children"),
    Output(f"{P}-tick", "disabled", allow_duplicate=True),
    Output(f"{P}-msg", "children", allow_duplicate=True), Output(f"{P}-msg", "className", allow_duplicate=True),
    Output(f"{P}-results", "children"), Output(f"{P}-t", "max"), Output(f"{P}-t", "marks"), Output(f"{P}-t", "value"),
    Output(f"{P}-t", "disabled"), Output(f"{P}-map", "figure", allow_duplicate=True),
    Output(f"{P}-when", "children", allow_duplicate=True), Output(f"{P}-moves", "children", allow_duplicate=True),
    Input(f"{P}-tick", "n_intervals"), Input(f"{P}-job", "data"), State("ctl-secret", "data"),
    prevent_initial_call=True,
)
def on_tick(_n, job_id, secret):
    return progress_view(jobform.view(job_id, secret))


@dash.callback(Output(f"{P}-map", "figure", allow_duplicate=True), Output(f"{P}-when", "children"),
               Output(f"{P}-moves", "children"), Output(f"{P}-fig", "figure"),
               Input(f"{P}-t", "value"), State(f"{P}-job", "data"), State("ctl-secret", "data"),
               prevent_initial_call=True)
def on_moment(i, job_id, secret):
    """The finished day at frame `i`: the map, what the moment is, the moves so far, the day's chart."""
    rep = _report(job_id, secret)
    i = guard.number(i)
    if rep is None or i is None or not i.is_integer() or not 0 <= i < len(rep["frames"]):
        return no_update, no_update, no_update, no_update
    return moment(rep, int(i))


# ---- the results ---------------------------------------------------------------------------------
def moment(rep: dict, i: int) -> tuple:
    """(map, moment, moves, day chart) of the finished day at frame i."""
    f = rep["frames"][i]
    return (*ledger(f, list(rep["models"]), rep["unit_npus"], rep["day_s"], rep["moves"]["log"]),
            day_figure(rep, f["t"]))


def ledger(f: dict, models: list[str], unit_npus: int, day_s: float, log: list[dict], running: str = "") -> tuple:
    """(map, moment, moves) at a frame of the ledger; `running` marks a day still under way."""
    owner = [models[o] if o >= 0 else None for o in f["owner"]]
    states = [maasjob.STATES[s] for s in f["state"]]
    held = ", ".join(f"{m} {sum(o == m for o in owner) * unit_npus}" for m in models)
    when = _("%(clock)s on the day's clock (simulated %(t)s s of %(d)s); NPUs held: %(held)s") % {
        "clock": _clock(24 * f["t"] / day_s), "t": f"{f['t']:g}", "d": f"{day_s:g}", "held": held}
    return (map_figure(owner, models, states), f"{running} · {when}" if running else when, moves_table(log, f["t"]))


def _clock(h: float) -> str:
    """hh:mm of an hour of the day, 0 to 24 (the day's end reads 24:00)."""
    m = round(h * 60)
    return f"{m // 60:02d}:{m % 60:02d}"


def _hour(rep: dict, t: float) -> float:
    """The day's clock at simulated time t, 0 to 24."""
    return 24 * t / rep["day_s"]


def map_figure(owner: list, models: list[str], states: list[str] | None = None) -> dict:
    """The units as tiles in rows of COLS, coloured by model (free: grey), each named with its model and,
    unless serving, its group's state (a dashed white border: draining or loading weights)."""
    states = states or ["serving"] * len(owner)
    colour = {m: COLOURS[k % len(COLOURS)] for k, m in enumerate(models)}
    tiles = [{"type": "rect", "x0": u % COLS - 0.46, "x1": u % COLS + 0.46, "y0": u // COLS - 0.44,
              "y1": u // COLS + 0.44, "fillcolor": colour.get(o, theme.GRID), "layer": "below",
              "line": {"width": 0 if states[u] == "serving" else 3, "color": theme.TEXT, "dash": "dash"}}
             for u, o in enumerate(owner)]
    name = lambda o: o if o is not None else _("free")
    names = [*models, *([None] if None in owner else [])]
    keys = [{"type": "scatter", "mode": "markers", "name": name(m), "x": [None], "y": [None], "legendgroup": name(m),
             "marker": {"symbol": "square", "size": 12, "color": colour.get(m, theme.GRID)}} for m in names]
    text = {"type": "scatter", "mode": "text", "showlegend": False, "name": "", "customdata": list(range(len(owner))),
            "x": [u % COLS for u in range(len(owner))], "y": [u // COLS for u in range(len(owner))],
            "text": [name(o) + ("" if states[u] == "serving" else "<br>" + _(STATE_NAMES[states[u]]))
                     for u, o in enumerate(owner)], "textfont": {"size": 12, "color": theme.BG},
            "hovertemplate": [_("unit %(u)s: NPUs %(a)s–%(b)s, nodes %(na)s–%(nb)s") % {
                "u": u, "a": u * UNIT_NPUS, "b": u * UNIT_NPUS + UNIT_NPUS - 1, "na": 2 * u, "nb": 2 * u + 1}
                + f"<br>{name(o)} · {_(STATE_NAMES[states[u]])}<extra></extra>" for u, o in enumerate(owner)]}
    rows = (len(owner) + COLS - 1) // COLS
    axis = {"visible": False, "fixedrange": True}
    return {"data": [*keys, text], "layout": theme.base_layout(
        xaxis={**axis, "range": [-0.55, COLS - 0.45]}, yaxis={**axis, "range": [rows - 0.5, -0.5]}, shapes=tiles,
        hovermode="closest", margin={"l": 8, "r": 8, "t": 30, "b": 8})}


def _ms_vs(r: dict, key: str) -> str:
    v, slo = r[f"{key}_ms"], r[f"{key}_slo_ms"]
    p99 = v["p99"]
    mark = "" if p99 is None else " ✓" if p99 <= slo else " ✗"
    return f"{components.fmt(v['p50'])} / {components.fmt(p99)} ({components.fmt(slo)}){mark}"


def provenance(rep: dict) -> str:
    return _("Simulated by the twin's engines, one per model on a common clock (the perf model's step times, "
             "calibrated on DeepSeek-R1 with the paper's figures; the other models are predictions from their "
             "published configs). A compressed day: %(d)s simulated s stand for 24 hours, a decision every "
             "%(c)s s, seed %(seed)s%(double)s, then every admitted request served to its end. $ per million output "
             "tokens = the NPU time each model held x US$%(usd)s per chip-hour (ref 6's price over an assumed "
             "4 years, plus power: an assumption).") % {
        "d": f"{rep['day_s']:g}", "c": f"{rep['control_s']:g}", "seed": rep["seed"],
        "double": "" if not rep["doubled"] else "; " + _("%(m)s's traffic x %(f)s") % {
            "m": rep["doubled"], "f": f"{rep['factor']:g}"}, "usd": f"{rep['usd_per_chip_hour']:.2f}"}


def results(rep: dict) -> list:
    """What the figures are, the audit and moves line, the per-model table."""
    q, mv = rep["requests"], rep["moves"]
    audit = _("Arrived %(a)s · completed %(c)s · rejected %(r)s · timed out %(t)s · lost %(l)s (the lifecycle "
              "audit) · %(n)s moves, %(npus)s NPUs moved, %(load)s s of weight loading on the day's clock (from "
              "%(src)s)") % {"a": f"{q['arrived']:,}", "c": f"{q['completed']:,}", "r": f"{q['rejected']:,}",
                             "t": f"{q['timed_out']:,}", "l": f"{q['lost']:,}", "n": mv["count"],
                             "npus": mv["npus_moved"], "load": f"{mv['weight_load_s']:g}", "src": mv["weights_from"]}
    head = [_("model"), _("figures"), _("NPUs start → end (mean)"), _("completed"), _("rejected + timed out"),
            _("req/s"), _("output tok/s"), _("TTFT p50 / p99, ms (SLO)"), _("TPOT p50 / p99, ms (SLO)"),
            _("SLO attainment %"), _("utilisation %"), _("$ / M tokens")]
    rows = []
    for m, r in rep["models"].items():
        req, n = r["requests"], r["npus"]
        rows.append(html.Tr([
            html.Td(m), html.Td(_(LABELS[r["label"]])),
            html.Td(f"{n['start']} → {n['end']} ({components.fmt(n['mean'])})", className="num"),
            html.Td(f"{req['completed']:,}", className="num"),
            html.Td(f"{req['rejected'] + req['timed_out']:,}", className="num"),
            html.Td(components.fmt(req["completed"] / rep["day_s"]), className="num"),
            html.Td(components.fmt(r["output_tokens"] / rep["day_s"]), className="num"),
            html.Td(_ms_vs(r, "ttft"), className="num"), html.Td(_ms_vs(r, "tpot"), className="num"),
            html.Td(components.pct(r["slo_attainment"]), className="num"),
            html.Td(components.pct(r["utilisation"]), className="num"),
            html.Td(components.fmt(r["usd_per_million_tokens"]), className="num")]))
    return [html.P(provenance(rep), className="hint", id=f"{P}-what"), html.P(audit, className="kpi-line", id=f"{P}-audit"),
            html.Div(html.Table([html.Thead(html.Tr([html.Th(h) for h in head])), html.Tbody(rows)], className="tbl",
                                id=f"{P}-table"), className="tbl-wrap"),
            html.P(_("Throughput is per simulated second of the compressed day; ✓ / ✗: the p99 within / over the "
                     "model's SLO. calibration: the paper's model on its calibrated step times; prediction: no "
                     "published CloudMatrix figure checks that model."), className="hint")]


def moves_table(log: list[dict], t: float) -> html.Div:
    log = [mv for mv in log if mv["t"] <= t + 1e-9]
    if not log:
        return html.Div(html.P(_("No move yet at this moment of the day."), className="hint"), id=f"{P}-moves-list")
    head = [_("clock"), _("simulated s"), _("from"), _("to"), "NPU", _("why"), _("drain, s"), _("weights, GB"),
            _("weight load, s (day clock)")]
    rows = [html.Tr([html.Td(_clock(mv["clock_h"])), html.Td(f"{mv['t']:g}", className="num"),
                     html.Td(mv["from"] or _("free NPUs")), html.Td(mv["to"]), html.Td(mv["npus"], className="num"),
                     html.Td(mv["reason"]), html.Td(components.fmt(mv["drain_s"]), className="num"),
                     html.Td(components.fmt(mv.get("weight_gb")), className="num"),
                     html.Td(components.fmt(mv.get("weight_load_s")), className="num")]) for mv in reversed(log)]
    return html.Div(html.Table([html.Thead(html.Tr([html.Th(h) for h in head])), html.Tbody(rows)], className="tbl"),
                    className="tbl-wrap", id=f"{P}-moves-list")


def day_figure(rep: dict, t: float) -> dict:
    """NPUs held per model (solid, left axis) and its load (dotted, right) over the day's clock."""
    tl = rep["timeline"]
    x = [_hour(rep, row["t"]) for row in tl]
    data = []
    for k, m in enumerate(rep["models"]):
        c = COLOURS[k % len(COLOURS)]
        data.append({"type": "scatter", "mode": "lines", "name": m, "x": x, "y": [row[f"{m}_npus"] for row in tl],
                     "line": {"color": c, "shape": "hv", "width": 2}, "legendgroup": m,
                     "hovertemplate": f"{m}: %{{y}} NPU<extra></extra>"})
        data.append({"type": "scatter", "mode": "lines", "name": m + " " + _("load"), "x": x, "yaxis": "y2",
                     "y": [row[f"{m}_load"] for row in tl], "showlegend": False, "legendgroup": m,
                     "line": {"color": c, "dash": "dot", "width": 1},
                     "hovertemplate": f"{m} " + _("load") + " %{y:.0%}<extra></extra>"})
    h = _hour(rep, t)
    lay = theme.base_layout(
        xaxis={"title": {"text": _("hour of the day")}, "range": [0, 24], "dtick": 3},
        yaxis={"title": {"text": "NPU"}}, yaxis2={"title": {"text": _("load, × capacity")}, "overlaying": "y",
                                                  "side": "right", "rangemode": "tozero", "showgrid": False,
                                                  "tickformat": ".0%"},
        shapes=[{"type": "line", "x0": h, "x1": h, "yref": "paper", "y0": 0, "y1": 1,
                 "line": {"color": theme.MUTED, "dash": "dash", "width": 1}}], margin={"r": 60})
    return {"data": data, "layout": lay}
