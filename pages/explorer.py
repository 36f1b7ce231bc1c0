"""Explorer: pick one or two axes, run a bounded sweep in the background, see goodput per chip
against tokens/s per user as a Pareto frontier (seed means with 95% intervals, the paper's decode
points); below, "why a supernode": the same model on CloudMatrix384 and four GPU systems."""
from __future__ import annotations


import dash
import pandas as pd
from dash import Input, Output, State, dcc, html, no_update

from twin.live import jobs
from twin.live import session
from twin.model.config import CatalogError, catalog
from twin.engine.scenario import synthetic_scenarios
from twin.explore.evaluate import point_rate
from twin.explore import sweepjobs
from twin.explore.points import KEYS, parse_vary, plan
from twin.explore.sweep import pareto
from twin.ui import components
from twin.ui import guard
from twin.ui import jobform
from twin.ui import lang
from twin.ui import theme
from twin.ui.lang import N_, _, request_lang

dash.register_page(__name__, path="/explorer", name=N_("Explorer"), title=lang.title("Explorer"), order=7, menu="more")

P = "ex"
TICK_MS = 1000
AXES = [k for k in KEYS if k not in ("deployment", "trace")]
NONE = "none"
PAPER = ((1e3 / 49.4, 1943, 96, 49.4), (1e3 / 14.9, 538, 8, 14.9))    # reference section 4: (x, tok/s, batch, TPOT ms)
CI95 = {"ci": "95%"}      # in a message's values: a literal '%' in a msgid would read as a placeholder
SOURCES = {"engine": N_("engine (simulated)"), "model": N_("perf model")}
PALETTE = (theme.BLUE, theme.ORANGE, theme.GREEN, theme.PURPLE, theme.TEAL, theme.YELLOW, theme.PINK, theme.RED)


def _field(label: str, child, title: str = "") -> html.Div:
    return html.Div([html.Label(label, className="ctl-label"), child], className="field", title=title)


def axis_options() -> list[dict]:
    """The sweep keys with their CLI name (`--vary NAME=...`, which messages quote): first in English,
    after the meaning in Chinese."""
    en = request_lang() == "en"
    return [{"label": f"{k} — {KEYS[k].help}" if en else f"{_(KEYS[k].help)} ({k})", "value": k,
             "search": f"{k} {_(KEYS[k].help)}"} for k in AXES]


def layout(**_kwargs):
    deps, scs = list(catalog().deployments), synthetic_scenarios()
    axis = axis_options()
    lim = sweepjobs.LIMITS
    return html.Div([
        dcc.Interval(id=f"{P}-tick", interval=TICK_MS, disabled=True),      # sweep progress, while one runs
        dcc.Store(id=f"{P}-job", storage_type="session"),
        dcc.Download(id=f"{P}-dl"),
        components.page_header(_("Explorer"), _("What should I run, and what do I give up? Sweep settings on the engine "
                                        "(or the perf model), several seeds per point, and read the frontier: "
                                        "goodput per chip against the speed each user sees.")),
        components.panel(html.Div([
            html.Div([
                _field(_("Deployment"), components.dropdown(id=f"{P}-dep", options=deps, value="cloudmatrix-infer-paper",
                                                  clearable=False, className="dd-wide")),
                _field(_("Scenario"), components.dropdown(id=f"{P}-sc", options=scs, value="paper-decode",
                                                clearable=False, className="dd")),
                _field(_("Source"), dcc.RadioItems(id=f"{P}-source", value="engine", inline=True,
                                                   options=[{"label": _(v), "value": k} for k, v in SOURCES.items()]),
                       _("engine: the discrete-event simulation, several seeds per point; perf model: the "
                         "calibrated operator-level model, one evaluation per point (fast, no queueing)")),
            ], className="ctl-row"),
            html.Div([
                _field(_("Axis 1"), components.dropdown(id=f"{P}-k1", options=axis, value="load", clearable=False,
                                              className="dd-wide")),
                _field(_("values"), dcc.Input(id=f"{P}-v1", value="0.3:1.2:0.15", debounce=True, maxLength=200,
                                                    style={"width": "11em"}),
                       _("a list V1,V2,... or a range LO:HI:STEP")),
                _field(_("Axis 2"), components.dropdown(id=f"{P}-k2", options=[{"label": _("none"), "value": NONE}] + axis,
                                              value="mtp", clearable=False, className="dd-wide")),
                _field(_("values"), dcc.Input(id=f"{P}-v2", value="true,false", debounce=True, maxLength=200,
                                                    style={"width": "11em"}),
                       _("a list V1,V2,... or a range LO:HI:STEP")),
            ], className="ctl-row"),
            html.Div([
                _field(_("Seeds (1–%(n)s)") % {"n": lim["seeds"]}, dcc.Input(id=f"{P}-seeds", type="number", value=2, min=1,
                                                                    max=sweepjobs.LIMITS["seeds"], step=1)),
                _field(_("Simulated s per run (5–%(n)s)") % {"n": f"{sweepjobs.MAX_DURATION_S:g}"},
                       dcc.Input(id=f"{P}-dur", type="number", value=20, min=5, max=sweepjobs.MAX_DURATION_S, step=5)),
                *jobform.buttons(P, _("Run sweep")),
                html.Button(_("Download CSV"), id=f"{P}-csv", className="btn", n_clicks=0),
            ], className="ctl-row"),
            html.Div(_("Bounded: at most %(points)s points, %(runs)s runs and %(sim)s simulated seconds per "
                       "sweep, and %(cpu)s CPU-seconds estimated from its size (rate x duration x runs); one job "
                       "per viewer, run in turn in a low-priority process. Repeated points come from the cache.") % {
                "points": lim["points"], "runs": lim["runs"], "sim": f"{lim['sim_seconds']:,}",
                "cpu": f"{jobs.MAX_JOB_CPU_S:,.0f}"}, className="hint"),
            *jobform.status(P),
        ]), _("Sweep"), "config"),
        components.panel([dcc.RadioItems(id=f"{P}-x", options=[{"label": _(v), "value": k} for k, v in X_AXES.items()],
                                value="tokens_per_s_per_user", inline=True),
                 components.graph(f"{P}-pareto", pareto_figure([], []), 460),
                 html.P(_("Each dot is a point of the sweep (mean over seeds, bars: %(ci)s confidence interval); "
                          "the line joins the points no other point beats on both axes. Up and right is better: "
                          "more output per accelerator while each user still reads fast. Click a point to "
                          "open it in a private sandbox twin.") % CI95, className="hint")],
                _("Goodput per chip vs tokens/s per user (or TTFT)"), "sim",
                extra=html.Span([components.tag("model"), components.tag("paper")]), info_text=_(
                    "Each point is one setting of the sweep: mean over its seeds from the engine (simulated) or "
                    "one perf-model evaluation (model), with %(ci)s intervals. y: goodput, output tokens/s per chip "
                    "of requests meeting both SLOs; x: 1000 / TPOT p50 (or TTFT p99). Stars: the paper's two decode "
                    "points (reference section 4), calibration rows: the perf model was fitted to them.") % CI95),
        html.P([_("The same model on five systems, side by side:") + " ", dcc.Link(_("Compare"), href="/compare")],
               className="hint"),
    ])


# ---- figures (plain dicts) -----------------------------------------------------------------------
X_AXES = {"tokens_per_s_per_user": N_("tokens/s per user (1000 / TPOT p50)"), "ttft_ms_p99": N_("TTFT p99, ms")}


def setting(key: str, value) -> str:
    """A point's setting as its legend and hover show it: "mtp = on", "load = 0.4"."""
    shown = (_("on") if value else _("off")) if isinstance(value, bool) else value
    return f"{key} = {shown}"


def pareto_figure(points: list[dict], varied: list[str], x: str = "tokens_per_s_per_user") -> dict:
    y = "goodput_per_chip"
    second = varied[1] if len(varied) > 1 else None
    groups: dict = {}
    for p in points:
        groups.setdefault(p.get(second) if second else "", []).append(p)
    data = []
    for i, (g, pts) in enumerate(groups.items()):
        data.append({"type": "scatter", "mode": "markers", "name": setting(second, g) if second else _("points"),
                     "x": [p[x] for p in pts], "y": [p[y] for p in pts],
                     "error_x": {"type": "data", "array": [p.get(f"{x}_ci95") or 0 for p in pts], "visible": True},
                     "error_y": {"type": "data", "array": [p.get(f"{y}_ci95") or 0 for p in pts], "visible": True},
                     "text": [", ".join(setting(k, p[k]) for k in varied) for p in pts],
                     "customdata": [points.index(p) for p in pts],       # the point a click opens
                     "hovertemplate": "%{text}<br>x %{x:.1f}, %{y:.0f} " + _("tok/s per chip") + "<extra></extra>",
                     "marker": {"size": 9, "color": PALETTE[i % len(PALETTE)]}})
    front = [points[i] for i in pareto(points, x, y, x_larger_better=x != "ttft_ms_p99")]
    data.append({"type": "scatter", "mode": "lines", "name": _("Pareto frontier"), "x": [p[x] for p in front],
                 "y": [p[y] for p in front], "line": {"color": theme.TEXT, "dash": "dot"}, "hoverinfo": "skip"})
    if x == "tokens_per_s_per_user":      # the paper reports decode throughput against TPOT
        data.append({"type": "scatter", "mode": "markers", "name": _("paper (decode, per NPU)"),
                     "x": [p[0] for p in PAPER], "y": [p[1] for p in PAPER],
                     "text": [_("reference section 4: batch %(b)s, TPOT %(t)s ms") % {"b": b, "t": t}
                              for _x, _y, b, t in PAPER],
                     "hovertemplate": "%{text}<extra></extra>",
                     "marker": {"symbol": "star", "size": 14, "color": theme.YELLOW}})
    lay = theme.base_layout(xaxis={"title": {"text": _(X_AXES[x])}, "gridcolor": theme.GRID},
                        yaxis={"title": {"text": _("goodput, output tokens/s per chip")}, "gridcolor": theme.GRID,
                               "rangemode": "tozero"}, hovermode="closest")
    return {"data": data, "layout": lay}


# ---- callbacks -----------------------------------------------------------------------------------
def start_sweep(dep, sc, k1, v1, k2, v2, seeds, dur, source, viewer: str, addr: str | None = None) -> str:
    """Validate the form and start a sweep; ValueError with a one-line message if anything is off."""
    deps, scs = catalog().deployments, synthetic_scenarios()
    dep, sc, k1, k2 = guard.ident(dep), guard.ident(sc), guard.ident(k1), guard.ident(k2)
    if dep not in deps:
        raise ValueError(_("Deployment: choose one from the list"))
    if sc not in scs:
        raise ValueError(_("Scenario: allowed %(names)s") % {"names": ", ".join(scs)})
    if source not in ("engine", "model"):
        raise ValueError(_("Source: allowed engine or model"))
    seeds, dur = guard.number(seeds), guard.number(dur)
    if seeds is None or not seeds.is_integer() or not 1 <= seeds <= sweepjobs.LIMITS["seeds"]:
        raise ValueError(_("Seeds: allowed a whole number 1 to %(n)s") % {"n": sweepjobs.LIMITS["seeds"]})
    if dur is None or not 5 <= dur <= sweepjobs.MAX_DURATION_S:
        raise ValueError(_("Simulated seconds: allowed 5 to %(n)s") % {"n": f"{sweepjobs.MAX_DURATION_S:g}"})
    axes = [(k1, v1)] + ([(k2, v2)] if k2 not in (None, NONE) else [])
    varies = []
    for k, v in axes:
        if k not in AXES:
            raise ValueError(_("Axis: allowed %(names)s") % {"names": ", ".join(AXES)})
        text = guard.text(v)
        if text is None:
            raise ValueError(_("values of %(key)s: allowed a list V1,V2,... or LO:HI:STEP (at most %(n)s "
                               "characters)") % {"key": k, "n": guard.MAX_TEXT})
        varies.append(parse_vary(f"{k}={text}", flag="values of"))
    tasks = plan(dep, sc, varies, int(seeds), float(dur), source, limits=sweepjobs.LIMITS)
    varied = [k for k, _ in varies]
    return jobs.pool().submit("sweep", sweepjobs.sweep_job, (tasks, varied), total=len(tasks), cost_s=sweepjobs.cost_s(tasks),
                            client=viewer, addr=addr)


on_start, on_cancel = jobform.callbacks(
    P, ("dep", "sc", "k1", "v1", "k2", "v2", "seeds", "dur", "source"), start_sweep,
    lambda: _("Sweep queued; it runs in a process of its own, and the live twin keeps its pace."),
    lambda: _("Sweep cancelled."), lambda: _("Cancel: no sweep of yours is queued or running."))


def _x(v) -> str:
    return v if isinstance(v, str) and v in X_AXES else "tokens_per_s_per_user"


def progress_view(job: dict | None, x: str = "tokens_per_s_per_user"):
    """(progress value, max, text, figure or no_update, tick disabled, message, class) of a job."""
    if job is None:
        return "0", "1", "", no_update, True, no_update, no_update
    bar = jobform.progress(job, _("%(done)s of %(total)s runs") % {"done": job["done"], "total": job["total"]})
    if job["state"] in jobform.ACTIVE:
        return *bar, no_update, False, no_update, no_update
    if job["state"] != "done":
        return *bar, no_update, True, *jobform.ended(job, _("Sweep cancelled."), _("Sweep failed: %(why)s"))
    res = job["result"]
    return *bar, pareto_figure(res["points"], res["varied"], x), True, \
        _("Sweep done: %(n)s points.") % {"n": len(res["points"])}, "ctl-msg msg-ok"


@dash.callback(
    Output(f"{P}-progress", "value"), Output(f"{P}-progress", "max"), Output(f"{P}-progress-text", "children"),
    Output(f"{P}-pareto", "figure"), Output(f"{P}-tick", "disabled", allow_duplicate=True),
    Output(f"{P}-msg", "children", allow_duplicate=True), Output(f"{P}-msg", "className", allow_duplicate=True),
    Input(f"{P}-tick", "n_intervals"), Input(f"{P}-job", "data"), Input(f"{P}-x", "value"),
    State("ctl-secret", "data"),
    prevent_initial_call=True,
)
def on_tick(_n, job_id, x, secret):
    return progress_view(jobform.view(job_id, secret), _x(x))


SANDBOX_KEYS = {"deployment", "load", "rate"}     # what a live twin's settings can take today


def sandbox_params(job: dict | None, click) -> dict:
    """The live twin settings of the clicked point; ValueError if the click or the point cannot be."""
    pts = click.get("points") if isinstance(click, dict) else None
    idx = pts[0].get("customdata") if isinstance(pts, list) and pts and isinstance(pts[0], dict) else None
    res = job["result"] if job and job["state"] == "done" else None
    if not res or type(idx) is not int or not 0 <= idx < len(res["points"]):
        raise ValueError(_("Open in a sandbox: click a point of a finished sweep"))
    other = [k for k in res["varied"] if k not in SANDBOX_KEYS]
    if other:
        raise ValueError(_("Open in a sandbox: the live twin cannot take %(keys)s yet (allowed: points varying "
                           "%(allowed)s)") % {"keys": ", ".join(other), "allowed": ", ".join(sorted(SANDBOX_KEYS))})
    p = res["points"][idx]
    rate = p.get("rate")
    if rate is None:
        rate = point_rate(p["scenario"], p["deployment"], p.get("load"))
    return {"scenario": p["scenario"], "deployment": p["deployment"], "rate": round(rate, 3)}


@dash.callback(
    Output("ctl-twin", "data", allow_duplicate=True),
    Output(f"{P}-msg", "children", allow_duplicate=True), Output(f"{P}-msg", "className", allow_duplicate=True),
    Input(f"{P}-pareto", "clickData"), State(f"{P}-job", "data"), State("ctl-secret", "data"),
    prevent_initial_call=True,
)
def on_click(click, job_id, secret):
    if click is None:                 # the chart drawn (page load, a new figure): nothing was clicked
        return no_update, no_update, no_update
    who, addr = guard.client(secret)
    try:
        params = sandbox_params(jobform.view(job_id, secret), click)
        tw = session.sessions().open_sandbox(params, client=who, addr=addr)
    except (ValueError, CatalogError) as exc:       # S.ControlError is a ValueError
        return no_update, *jobform.refusal(exc)
    return tw.key, _("Private sandbox %(key)s runs %(scenario)s on %(deployment)s at %(rate)s req/s; the pages "
                     "now show it.") % {"key": tw.key, "scenario": params["scenario"],
                                        "deployment": params["deployment"], "rate": f"{params['rate']:g}"}, \
        "ctl-msg msg-ok"


@dash.callback(
    Output(f"{P}-dl", "data"), Output(f"{P}-msg", "children", allow_duplicate=True),
    Output(f"{P}-msg", "className", allow_duplicate=True),
    Input(f"{P}-csv", "n_clicks"), State(f"{P}-job", "data"), State("ctl-secret", "data"),
    prevent_initial_call=True,
)
def on_csv(_n, job_id, secret):
    job = jobform.view(job_id, secret)
    if not job or job["state"] != "done":
        return no_update, _("Download CSV: run a sweep first (its rows are what is downloaded)"), \
            "ctl-msg msg-error"
    return dcc.send_data_frame(pd.DataFrame(job["result"]["rows"]).to_csv, "sweep.csv", index=False), no_update, no_update
