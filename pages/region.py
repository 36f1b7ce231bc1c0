"""Region: run a region of supernodes behind a global router (twin.region) as a bounded background
job, read the regional audit and the per-supernode table, and drill into any supernode: all its
figures from the region's report, and a link that opens its deployment and scenario in a private
sandbox on the Overview."""
from __future__ import annotations

from decimal import Decimal

import dash
from dash import Input, Output, State, dcc, html, no_update

from twin.engine.source import ARRIVAL_TICK_S
from twin.live import jobs
from twin.region import ROUTERS, names, pagejob, region
from twin.region.driver import CACHE_REUSE, parse_fault
from twin.region.routing import AFFINITY_SLACK
from twin.ui import components, guard, jobform, lang, regionreport
from twin.ui.regionreport import FIG_INFO, detail, figure, results
from twin.ui.lang import N_, _

dash.register_page(__name__, path="/region", name=N_("Region"), title=lang.title("Region"), order=7.5,
                   menu="more",
                   shots=())     # its shot shows a finished job: the browser test's (test-artifacts/e2e)

P = regionreport.P
TICK_MS = 1000
NONE = "none"
POLICY_HELP = {"least-load": N_("the least work per unit of capacity"),
               "prefix-affinity": N_("the supernode holding the longest prefix of the prompt, within %(slack)s of "
                                     "the least loaded"),
               "session-affinity": N_("a session stays on its first supernode while it is within %(slack)s of "
                                      "the least loaded")}
REUSE = regionreport.REUSE


def _field(label: str, child, title: str = "") -> html.Div:
    return html.Div([html.Label(label, className="ctl-label"), child], className="field", title=title)


def region_options() -> list[dict]:
    out = []
    for n in names():
        spec = region(n)
        deps = ", ".join(f"{spec.deployments.count(d)} × {d}" for d in dict.fromkeys(spec.deployments))
        out.append({"label": f"{n} — {deps}", "value": n})
    return out


def fail_options(name) -> list[dict]:
    """No failure, or one of the region's supernodes by index."""
    size = region(name).size if name in names() else 0
    return [{"label": _("no failure"), "value": NONE}] + [
        {"label": _("supernode %(i)s") % {"i": i}, "value": str(i)} for i in range(size)]


def link_options(name) -> tuple[list[dict], list[dict]]:
    """The inter-supernode link failure's two ends: no link failure or a supernode (only that with one
    supernode: no link), and the other supernode."""
    size = region(name).size if name in names() else 0
    ends = [{"label": _("supernode %(i)s") % {"i": i}, "value": str(i)} for i in range(size)]
    return [{"label": _("no link failure"), "value": NONE}] + (ends if size > 1 else []), ends


def layout(**_kwargs):
    first = "cm384-trio" if "cm384-trio" in names() else names()[0]
    slack = {"slack": f"{AFFINITY_SLACK:.0%}"}
    policies = [{"label": f"{k} — {_(POLICY_HELP[k]) % slack}" if k in POLICY_HELP else k, "value": k}
                for k in ROUTERS]
    bounds = {"dlo": f"{pagejob.MIN_DURATION_S:g}", "dhi": f"{pagejob.MAX_DURATION_S:g}",
              "wlo": f"{pagejob.MIN_WINDOW_S:g}", "whi": f"{pagejob.MAX_WINDOW_S:g}",
              "llo": f"{pagejob.MIN_LOAD:g}", "lhi": f"{pagejob.MAX_LOAD:g}"}
    return html.Div([
        dcc.Interval(id=f"{P}-tick", interval=TICK_MS, disabled=True),      # the run's progress, while it runs
        dcc.Store(id=f"{P}-job", storage_type="session"),
        components.page_header(_("Region"), _("Several supernodes behind one global router: how does a region "
                                              "route, and what happens when a supernode is lost? Run a region of "
                                              "the twin in the background, then drill into any supernode.")),
        components.panel(html.Div([
            html.Div([
                _field(_("Region"), components.dropdown(id=f"{P}-name", options=region_options(), value=first,
                                                        clearable=False, className="dd-wide")),
                _field(_("Router policy"), components.dropdown(id=f"{P}-policy", options=policies,
                                                               value="least-load", clearable=False,
                                                               className="dd-wide")),
                _field(_("Cache reuse"), dcc.RadioItems(id=f"{P}-reuse", value="off", inline=True, options=[
                    {"label": _(REUSE[k]), "value": k} for k in CACHE_REUSE])),
            ], className="ctl-row"),
            html.Div([
                _field(_("Simulated s of arrivals (%(dlo)s–%(dhi)s)") % bounds,
                       dcc.Input(id=f"{P}-dur", type="number", value=30, step=5)),
                _field(_("Load, × capacity (%(llo)s–%(lhi)s)") % bounds,
                       dcc.Input(id=f"{P}-load", type="number", value=pagejob.default_load(first), step=0.01,
                                 style={"width": "6em"}),
                       _("arrivals as a fraction of the region's summed capacity; 1 = all of it")),
                _field(_("Window, s (%(wlo)s–%(whi)s)") % bounds,
                       dcc.Input(id=f"{P}-window", type="number", value=1, step=0.1),
                       _("simulated seconds between the router's looks at the supernodes' loads")),
                _field(_("Fail"), components.dropdown(id=f"{P}-fail", options=fail_options(first), value="1",
                                                      clearable=False, className="dd")),
                _field(_("at s"), dcc.Input(id=f"{P}-at", type="number", value=15, step=1, style={"width": "6em"})),
            ], className="ctl-row"),
            html.Div([
                _field(_("Link down between"), components.dropdown(
                    id=f"{P}-link-a", options=link_options(first)[0], value=NONE, clearable=False, className="dd"),
                    _("an inter-supernode link: it carries the prefix fetches of cache reuse \"fetch\" only")),
                _field(_("and"), components.dropdown(id=f"{P}-link-b", options=link_options(first)[1], value="1",
                                                     clearable=False, className="dd")),
                _field(_("at s"), dcc.Input(id=f"{P}-link-at", type="number", value=10, step=1,
                                            style={"width": "6em"})),
                _field(_("for s (empty: to the end)"), dcc.Input(id=f"{P}-link-for", type="number", value=None,
                                                                 step=1, style={"width": "6em"}),
                       _("simulated seconds the link stays down; empty: the rest of the run")),
                _field(_("Seed"), dcc.Input(id=f"{P}-seed", type="number", value=0, step=1, style={"width": "8em"})),
                *jobform.buttons(P, _("Run region")),
            ], className="ctl-row"),
            html.Div(_("Bounded: one run per viewer, estimated from its size (rate x duration, supernodes, "
                       "windows) and refused past %(cpu)s CPU-seconds; it runs in a low-priority process of its "
                       "own, every supernode in it, and the live twin keeps its pace. After the arrivals end, "
                       "every admitted request is served to its end (at most %(cap)s simulated s).") % {
                "cpu": f"{jobs.MAX_JOB_CPU_S:,.0f}", "cap": f"{pagejob.DRAIN_CAP_S:g}"}, className="hint"),
            *jobform.status(P),
        ]), _("Run a region"), "config"),
        components.panel(html.Div(html.P(_("Run a region to see its audit and its supernodes here."), className="hint"),
                                  id=f"{P}-results"), _("The region"), "sim"),
        components.panel(components.graph(f"{P}-fig", figure(None), 300), _("Requests and TTFT per supernode"),
                         "sim", info_text=_(FIG_INFO)),
        components.panel([
            html.Div(_field(_("Supernode"), components.dropdown(id=f"{P}-pick", options=[], value=None,
                                                                clearable=False, className="dd",
                                                                placeholder=_("run a region first"))),
                     className="ctl-row"),
            html.Div(id=f"{P}-detail"),
        ], _("Drill down: one supernode"), "sim"),
    ])


# ---- the form and the job ------------------------------------------------------------------------
def _whole(v) -> int | None:
    x = guard.number(v)
    return int(x) if x is not None and x.is_integer() else None


def _plain(x: float) -> str:
    """A time as the runner's fault text reads it back exactly: positional digits, no exponent."""
    return format(Decimal(repr(x)).normalize(), "f")


def link_fault(name: str, size: int, dur: float, a, b, at, down_for) -> str | None:
    """The form's link failure as the runner's `link:I-J@T[+D]`, or None; ValueError naming what
    is allowed."""
    a, b = guard.ident(a), guard.ident(b)
    if a == NONE:
        return None
    if size < 2:
        raise ValueError(_("Link failure: allowed no link failure only, region %(name)s has one supernode") % {
            "name": name})
    i, j = _whole(a), _whole(b)
    if i is None or j is None or not 0 <= i < size or not 0 <= j < size or i == j:
        raise ValueError(_("Link failure: allowed no link failure or two different supernodes 0 to %(hi)s") % {
            "hi": size - 1})
    t = guard.number(at)
    if t is None or not 0 <= t < dur:
        raise ValueError(_("Link failure time: allowed 0 to less than the %(d)s simulated s of arrivals") % {
            "d": f"{dur:g}"})
    fault = f"link:{i}-{j}@{_plain(t)}"
    if down_for is not None and down_for != "":
        d = guard.number(down_for)
        if d is None or not d > 0:
            raise ValueError(_("Link down for: allowed empty (to the end of the run) or simulated seconds above 0"))
        fault += f"+{_plain(d)}"
    parse_fault(fault, size, dur)
    return fault


def start_run(name, policy, reuse, dur, window, fail, at, seed, load, link_a, link_b, link_at, link_for,
              viewer: str, addr: str | None = None) -> str:
    """Check the form and queue the run; ValueError (a JobRefused is one) with a one-line message."""
    name, policy, reuse, fail = guard.ident(name), guard.ident(policy), guard.ident(reuse), guard.ident(fail)
    if name not in names():
        raise ValueError(_("Region: allowed %(names)s") % {"names": ", ".join(names())})
    if policy not in ROUTERS:
        raise ValueError(_("Router policy: allowed %(names)s") % {"names": ", ".join(ROUTERS)})
    if reuse not in CACHE_REUSE:
        raise ValueError(_("Cache reuse: allowed %(names)s") % {"names": ", ".join(CACHE_REUSE)})
    dur, window = guard.number(dur), guard.number(window)
    if dur is None or not pagejob.MIN_DURATION_S <= dur <= pagejob.MAX_DURATION_S:
        raise ValueError(_("Simulated seconds: allowed %(lo)s to %(hi)s") % {
            "lo": f"{pagejob.MIN_DURATION_S:g}", "hi": f"{pagejob.MAX_DURATION_S:g}"})
    ticks = None if window is None else window / ARRIVAL_TICK_S
    if (window is None or not pagejob.MIN_WINDOW_S <= window <= pagejob.MAX_WINDOW_S
            or abs(ticks - round(ticks)) > 1e-6):
        raise ValueError(_("Window: allowed %(lo)s to %(hi)s s, a multiple of the %(tick)s s arrival tick") % {
            "lo": f"{pagejob.MIN_WINDOW_S:g}", "hi": f"{pagejob.MAX_WINDOW_S:g}", "tick": f"{ARRIVAL_TICK_S:g}"})
    size, fault = region(name).size, None
    if fail != NONE:
        i, t = _whole(fail), guard.number(at)
        if i is None or not 0 <= i < size:
            raise ValueError(_("Fail: allowed no failure or a supernode 0 to %(hi)s") % {"hi": size - 1})
        if t is None or not 0 <= t < dur:
            raise ValueError(_("Failure time: allowed 0 to less than the %(d)s simulated s of arrivals") % {
                "d": f"{dur:g}"})
        fault = f"supernode:{i}@{_plain(t)}"
        parse_fault(fault, size, dur)
    link = link_fault(name, size, dur, link_a, link_b, link_at, link_for)
    seed, hi = _whole(seed), components.bounds("seed")["hi"]
    if seed is None or not 0 <= seed <= int(hi):
        raise ValueError(_("Seed: allowed a whole number 0 to %(hi)s") % {"hi": hi})
    load = guard.number(load)
    if load is None or not pagejob.MIN_LOAD <= load <= pagejob.MAX_LOAD:
        raise ValueError(_("Load: allowed %(lo)s to %(hi)s, a fraction of the region's capacity (1 = all of it)") % {
            "lo": f"{pagejob.MIN_LOAD:g}", "hi": f"{pagejob.MAX_LOAD:g}"})
    args = (name, float(dur), policy, reuse, float(window), tuple(f for f in (fault, link) if f), seed, load)
    return jobs.pool().submit("region", pagejob.region_job, args, total=pagejob.windows(dur, window),
                              cost_s=pagejob.cost_s(name, dur, window, load), client=viewer, addr=addr)


def _report(job_id, secret) -> dict | None:
    job = jobform.view(job_id, secret)
    return job["result"] if job and job["state"] == "done" else None


@dash.callback(Output(f"{P}-fail", "options"), Output(f"{P}-fail", "value"), Output(f"{P}-link-a", "options"),
               Output(f"{P}-link-a", "value"), Output(f"{P}-link-b", "options"), Output(f"{P}-link-b", "value"),
               Input(f"{P}-name", "value"), State(f"{P}-fail", "value"), State(f"{P}-link-a", "value"),
               State(f"{P}-link-b", "value"), prevent_initial_call=True)
def on_region(name, fail, link_a, link_b):
    """The failure choices of the chosen region's members (a choice it still has is kept)."""
    name = guard.ident(name)
    opts = fail_options(name)
    a_opts, b_opts = link_options(name)
    keep = lambda v, options, other: v if v in [o["value"] for o in options] else other
    return (opts, keep(fail, opts, NONE), a_opts, keep(link_a, a_opts, NONE), b_opts,
            keep(link_b, b_opts, b_opts[-1]["value"] if b_opts else None))


on_start, on_cancel = jobform.callbacks(
    P, ("name", "policy", "reuse", "dur", "window", "fail", "at", "seed", "load", "link-a", "link-b", "link-at",
        "link-for"), start_run,
    lambda: _("Region run queued; it runs in a process of its own, and the live twin keeps its pace."),
    lambda: _("Region run cancelled."), lambda: _("Cancel: no region run of yours is queued or running."))


def progress_view(job: dict | None):
    """(progress value, max, text, results, tick disabled, message, class, supernode options, pick,
    figure)."""
    keep = (no_update,) * 3
    if job is None:
        return ("0", "1", "", no_update, True, no_update, no_update) + keep
    bar = jobform.progress(job, _("%(done)s of %(total)s windows") % {"done": job["done"], "total": job["total"]})
    if job["state"] in jobform.ACTIVE:
        return (*bar, no_update, False, no_update, no_update) + keep
    if job["state"] != "done":
        return (*bar, no_update, True,
                *jobform.ended(job, _("Region run cancelled."), _("Region run failed: %(why)s"))) + keep
    rep = job["result"]
    lost = rep["regional"]["requests"]["lost"]
    opts = [{"label": _("supernode %(i)s") % {"i": s["supernode"]}, "value": str(s["supernode"])}
            for s in rep["supernodes"]]
    failed = [s["supernode"] for s in rep["supernodes"] if s["status"] == "failed"]
    return (*bar, results(rep), True,
            _("Region run done: %(n)s supernodes, %(lost)s requests lost.") % {"n": len(rep["supernodes"]),
                                                                              "lost": lost},
            "ctl-msg msg-ok" if lost == 0 else "ctl-msg msg-error", opts, str(failed[0] if failed else 0), figure(rep))


@dash.callback(
    Output(f"{P}-progress", "value"), Output(f"{P}-progress", "max"), Output(f"{P}-progress-text", "children"),
    Output(f"{P}-results", "children"), Output(f"{P}-tick", "disabled", allow_duplicate=True),
    Output(f"{P}-msg", "children", allow_duplicate=True), Output(f"{P}-msg", "className", allow_duplicate=True),
    Output(f"{P}-pick", "options"), Output(f"{P}-pick", "value"), Output(f"{P}-fig", "figure"),
    Input(f"{P}-tick", "n_intervals"), Input(f"{P}-job", "data"), State("ctl-secret", "data"),
    prevent_initial_call=True,
)
def on_tick(_n, job_id, secret):
    return progress_view(jobform.view(job_id, secret))


@dash.callback(Output(f"{P}-pick", "value", allow_duplicate=True), Input(f"{P}-fig", "clickData"),
               prevent_initial_call=True)
def on_click(click):
    """A click on a supernode's bar drills into it."""
    pts = click.get("points") if isinstance(click, dict) else None
    i = pts[0].get("customdata") if isinstance(pts, list) and pts and isinstance(pts[0], dict) else None
    return str(i) if type(i) is int else no_update


@dash.callback(Output(f"{P}-detail", "children"), Input(f"{P}-pick", "value"), State(f"{P}-job", "data"),
               State("ctl-secret", "data"), prevent_initial_call=True)
def on_pick(pick, job_id, secret):
    rep, i = _report(job_id, secret), _whole(guard.ident(pick))
    if rep is None or i is None or not 0 <= i < len(rep["supernodes"]):
        return html.P(_("Run a region, then choose one of its supernodes."), className="hint")
    return detail(rep, i)
