"""Region: run a region of supernodes behind a global router (twin.region) as a bounded background
job, read the regional audit and the per-supernode table, and drill into any supernode: all its
figures from the region's report, and a link that opens its deployment and scenario in a private
sandbox on the Overview."""
from __future__ import annotations

from decimal import Decimal
from urllib.parse import urlencode

import dash
from dash import Input, Output, State, dcc, html, no_update

from twin.engine.source import ARRIVAL_TICK_S
from twin.live import jobs
from twin.region import ROUTERS, names, pagejob, region
from twin.region.driver import CACHE_REUSE, member_seed, parse_fault
from twin.region.routing import AFFINITY_SLACK
from twin.ui import components, figures, guard, jobform, lang, theme
from twin.ui.errors import explain
from twin.ui.lang import N_, _, unit

dash.register_page(__name__, path="/region", name=N_("Region"), title=lang.title("Region"), order=7.5,
                   menu="more",
                   shots=())     # its shot shows a finished job: the browser test's (test-artifacts/e2e)

P = "rg"
TICK_MS = 1000
NONE = "none"
POLICY_HELP = {"least-load": N_("the least work per unit of capacity"),
               "prefix-affinity": N_("the supernode holding the longest prefix of the prompt, within %(slack)s of "
                                     "the least loaded"),
               "session-affinity": N_("a session stays on its first supernode while it is within %(slack)s of "
                                      "the least loaded")}
REUSE = {"off": N_("off: recompute"), "fetch": N_("fetch a prefix over the inter-supernode link")}
STATUS = {"up": N_("up"), "failed": N_("failed")}


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
                html.Button(_("Run region"), id=f"{P}-start", className="btn btn-primary", n_clicks=0),
                html.Button(_("Cancel"), id=f"{P}-cancel", className="btn", n_clicks=0),
            ], className="ctl-row"),
            html.Div(_("Bounded: one run per viewer, estimated from its size (rate x duration, supernodes, "
                       "windows) and refused past %(cpu)s CPU-seconds; it runs in a low-priority process of its "
                       "own, every supernode in it, and the live twin keeps its pace. After the arrivals end, "
                       "every admitted request is served to its end (at most %(cap)s simulated s).") % {
                "cpu": f"{jobs.MAX_JOB_CPU_S:,.0f}", "cap": f"{pagejob.DRAIN_CAP_S:g}"}, className="hint"),
            html.Div(id=f"{P}-msg", className="ctl-msg", role="status"),
            html.Div([html.Progress(id=f"{P}-progress", value="0", max="1"),
                      html.Span(id=f"{P}-progress-text", className="hint")], className="ctl-row"),
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
    text = _("%(done)s of %(total)s windows") % {"done": job["done"], "total": job["total"]}
    if job["state"] == "queued":
        text = _("queued: %(pos)s in line, about %(s)s s of work ahead; estimated %(cost)s CPU-s") % {
            "pos": job["position"], "s": f"{job['wait_s']:,.0f}", "cost": f"{job['cost_s']:,.0f}"}
        return ("0", str(job["total"]), text, no_update, False, no_update, no_update) + keep
    if job["state"] == "running":
        text += " · " + _("%(used)s of at most %(cap)s CPU-s") % {"used": f"{job['cpu_s']:,.0f}",
                                                                 "cap": f"{job['ceiling_s']:,.0f}"}
        return (str(job["done"]), str(job["total"]), text, no_update, False, no_update, no_update) + keep
    if job["state"] in ("error", "cancelled"):
        why = _("Region run cancelled.") if job["state"] == "cancelled" else \
            _("Region run failed: %(why)s") % {"why": explain(job["message"])}
        return (str(job["done"]), str(job["total"]), text, no_update, True, why,
                "ctl-msg msg-ok" if job["state"] == "cancelled" else "ctl-msg msg-error") + keep
    rep = job["result"]
    lost = rep["regional"]["requests"]["lost"]
    opts = [{"label": _("supernode %(i)s") % {"i": s["supernode"]}, "value": str(s["supernode"])}
            for s in rep["supernodes"]]
    failed = [s["supernode"] for s in rep["supernodes"] if s["status"] == "failed"]
    return (str(job["total"]), str(job["total"]), text + " — " + _("done"), results(rep), True,
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


# ---- the results ---------------------------------------------------------------------------------
def _ms(v) -> str:
    return "–" if v is None else f"{components.fmt(v)} {unit('ms')}"


def provenance(rep: dict) -> str:
    """What the figures are: the region model's simulation, its window and the router's view."""
    return _("Simulated by the twin's region model: %(n)s supernodes in one process, router %(policy)s seeing "
             "the loads as of the last window edge (window %(w)s s), cache reuse %(reuse)s, seed %(seed)s, "
             "%(d)s s of arrivals at %(rate)s req/s, then served to the end (%(end)s s simulated).") % {
        "n": len(rep["supernodes"]), "policy": rep["policy"], "w": f"{rep['window_s']:g}",
        "reuse": _(REUSE.get(rep["cache_reuse"], rep["cache_reuse"])), "seed": rep["seed"],
        "d": f"{rep['duration_s']:g}", "rate": components.fmt(rep["rate_rps"]), "end": f"{rep['sim_seconds']:g}"}


def regional_line(rep: dict) -> list:
    g = rep["regional"]
    r = g["requests"]
    audit = _("Arrived %(a)s · completed %(c)s · rejected %(r)s · timed out %(t)s · in flight %(f)s · moved "
              "%(m)s · lost %(l)s (the lifecycle audit)") % {
        "a": f"{r['arrived']:,}", "c": f"{r['completed']:,}", "r": f"{r['rejected']:,}", "t": f"{r['timed_out']:,}",
        "f": f"{r['in_flight']:,}", "m": f"{r['moved']['in']:,}", "l": f"{r['lost']:,}"}
    perf = _("Throughput %(thr)s req/s · TTFT p50 %(t50)s, p99 %(t99)s · TPOT p50 %(p50)s, p99 %(p99)s · "
             "%(fetch)s prefix fetches") % {
        "thr": components.fmt(g["throughput_rps"]), "t50": _ms(g["ttft_ms"]["p50"]), "t99": _ms(g["ttft_ms"]["p99"]),
        "p50": _ms(g["tpot_ms"]["p50"]), "p99": _ms(g["tpot_ms"]["p99"]), "fetch": f"{g['fetch']['requests']:,}"}
    return [html.P(audit, id=f"{P}-audit", className="kpi-line"), html.P(perf, className="kpi-line")]


def link_lines(rep: dict) -> list:
    """The link failures as the runner applied them (at window edges) and its figures about the
    inter-supernode links: the prefix fetches of all links together (it keeps none per link)."""
    lines = []
    for f in rep.get("link_faults", []):
        args = {"i": f["link"][0], "j": f["link"][1], "down": f"{f['down_s']:g}", "at": f"{f['at_s']:g}",
                "for": "" if f["for_s"] is None else f"{f['for_s']:g}",
                "up": "" if f["up_s"] is None else f"{f['up_s']:g}"}
        if f["up_s"] is not None:
            text = _("Link failure: supernode %(i)s – supernode %(j)s down at %(down)s s, up again at %(up)s s "
                     "(asked: at %(at)s s for %(for)s s; the router applies faults at window edges)") % args
        elif f["for_s"] is None:
            text = _("Link failure: supernode %(i)s – supernode %(j)s down at %(down)s s to the end of the arrivals "
                     "(asked: at %(at)s s, for the rest of the run; the router applies faults at window edges)") % args
        else:
            text = _("Link failure: supernode %(i)s – supernode %(j)s down at %(down)s s to the end of the arrivals "
                     "(asked: at %(at)s s for %(for)s s, but no window edge was left before the arrivals ended to bring it "
                     "up; the router applies faults at window edges)") % args
        lines.append(html.P(text, className="kpi-line"))
    if not lines and rep["cache_reuse"] != "fetch":
        return []
    f = rep["regional"]["fetch"]
    if rep["cache_reuse"] == "fetch":
        lines.append(html.P(_(
            "Inter-supernode links, all together (the region model keeps no per-link figures): %(n)s prefix "
            "fetches, %(blocks)s blocks, %(gb)s; from a request's arrival to its prefix in place (waiting behind "
            "other fetches on the link included) mean %(mean)s, longest %(max)s; each link %(gbps)s, one fetch at "
            "a time per direction, + %(lat)s. While a link is down, a prefix held only across it is recomputed "
            "(not counted).") % {
            "n": f"{f['requests']:,}", "blocks": f"{f['blocks']:,}", "gb": f"{f['bytes'] / 1e9:,.2f} {unit('GB')}",
            "mean": _ms(f["mean_delay_ms"]), "max": _ms(1e3 * f["max_delay_s"] if f["requests"] else None),
            "gbps": f"{f['link_gbps']:g} {unit('Gbps')}", "lat": f"{f['link_latency_us']:g} {unit('µs')}"},
            className="hint"))
    else:
        lines.append(html.P(_("Cache reuse is off: nothing crosses the inter-supernode links, so the link failure "
                              "changes no figure of this run."), className="hint"))
    return [html.Div(lines, id=f"{P}-links")]


def table(rep: dict) -> html.Div:
    head = [_("Supernode"), _("deployment"), "NPU", _("status"), _("routed"), _("completed"), _("in flight"),
            _("req/s"), _("TTFT p50, ms"), _("TTFT p99, ms"), _("TPOT p50, ms"), _("TPOT p99, ms"),
            _("cache hit, tokens %")]
    rows = []
    for s in rep["supernodes"]:
        q = s["requests"]
        status = _(STATUS.get(s["status"], s["status"]))
        if s["failed_at_s"] is not None:
            status = _("failed at %(t)s s") % {"t": f"{s['failed_at_s']:g}"}
        rows.append(html.Tr([html.Td(s["supernode"], className="num"), html.Td(s["deployment"]),
                             html.Td(f"{s['npus']:g}", className="num"), html.Td(status),
                             *[html.Td(f"{v:,}", className="num") for v in (s["routed"], q["completed"],
                                                                          q["in_flight"])],
                             html.Td(components.fmt(s["throughput_rps"]), className="num"),
                             *[html.Td(components.fmt(s[k][p]), className="num")
                               for k in ("ttft_ms", "tpot_ms") for p in ("p50", "p99")],
                             html.Td(components.pct(s["cache"].get("token_hit_ratio")), className="num")],
                            className="row-failed" if s["status"] == "failed" else ""))
    return html.Div(html.Table([html.Thead(html.Tr([html.Th(h) for h in head])), html.Tbody(rows)], className="tbl",
                               id=f"{P}-table"), className="tbl-wrap")


FIG_INFO = N_("Simulated by the twin's region model. Bars: requests the global router sent each supernode (moved "
              "requests count where they went); a failed supernode is red. Diamonds: its TTFT p50. The router "
              "chose with the loads as of the last window edge plus what it had sent since. Click a supernode to "
              "drill into it.")


def figure(rep: dict | None) -> dict:
    """Requests routed to each supernode (bars; a failed one red, labelled) and its TTFT p50 (dots);
    a line saying so before a run (no axes with nothing on them)."""
    if not rep:
        return figures.empty_figure(message=_("Run a region: its supernodes' requests and TTFT appear here"),
                                    height=300)
    per = rep["supernodes"]
    x = [_("supernode %(i)s") % {"i": s["supernode"]} for s in per]
    failed = {s["supernode"]: s["failed_at_s"] for s in per if s["status"] == "failed"}
    bars = {"type": "bar", "name": _("requests routed"), "x": x, "y": [s["routed"] for s in per],
            "customdata": [s["supernode"] for s in per],
            "marker": {"color": [theme.RED if s["supernode"] in failed else theme.BLUE for s in per]},
            "text": [_("failed at %(t)s s") % {"t": f"{failed[s['supernode']]:g}"} if s["supernode"] in failed
                     else "" for s in per], "textposition": "inside",
            "hovertemplate": "%{x}: %{y:,} " + _("requests routed") + "<extra></extra>"}
    dots = {"type": "scatter", "mode": "markers", "name": _("TTFT p50, ms"), "x": x, "yaxis": "y2",
            "customdata": [s["supernode"] for s in per], "y": [s["ttft_ms"]["p50"] for s in per],
            "marker": {"size": 12, "color": theme.ORANGE, "symbol": "diamond"},
            "hovertemplate": "%{x}: TTFT p50 %{y:,.1f} " + unit("ms") + "<extra></extra>"}
    lay = theme.base_layout(yaxis={"title": {"text": _("requests routed")}},
                            yaxis2={"title": {"text": _("TTFT p50, ms")}, "overlaying": "y", "side": "right",
                                    "rangemode": "tozero", "showgrid": False},
                            hovermode="closest", margin={"r": 60})
    return {"data": [bars, dots], "layout": lay}


def results(rep: dict) -> list:
    """What the figures are, the regional line, the link failure and the links' figures (when there
    is one, or cache reuse fetches), and the per-supernode table of a finished run."""
    return [html.P(provenance(rep), className="hint", id=f"{P}-what"), *regional_line(rep), *link_lines(rep),
            table(rep)]


# ---- one supernode -------------------------------------------------------------------------------
# Every field of a supernode's entry in the region's report, by its path: its label (a key this list
# lacks is shown under its own name, so the page never hides a figure the report holds).
LABELS = {
    "deployment": N_("deployment"), "system": N_("system"), "npus": "NPU", "capacity_rps": N_("capacity, req/s"),
    "status": N_("status"), "failed_at_s": N_("failed at, s"), "routed": N_("requests routed to it"),
    "throughput_rps": N_("completed per simulated second, req/s"),
    "requests.arrived": N_("arrived"), "requests.completed": N_("completed"), "requests.rejected": N_("rejected"),
    "requests.timed_out": N_("timed out"), "requests.in_flight": N_("in flight (a failed one's: moved away)"),
    "requests.rejected_by_reason.kv_too_long": N_("rejected: KV too long"),
    "requests.rejected_by_reason.overloaded": N_("rejected: overloaded"),
    "requests.tokens_short": N_("output tokens short"), "requests.orphaned": N_("orphaned"),
    "requests.held_terminal": N_("finished but still held"), "requests.conserved": N_("audit conserved"),
    "requests.lost": N_("lost (its own audit)"), "ttft_ms.p50": N_("TTFT p50, ms"), "ttft_ms.p99": N_("TTFT p99, ms"),
    "tpot_ms.p50": N_("TPOT p50, ms"), "tpot_ms.p99": N_("TPOT p99, ms"),
    "cache.block_hit_ratio": N_("EMS cache hit, blocks %"), "cache.token_hit_ratio": N_("EMS cache hit, tokens %"),
    "drain.cap_s": N_("drain cap, s"), "drain.seconds": N_("drain took, simulated s"),
    "drain.complete": N_("drain complete"), "drain.still_in_flight": N_("still in flight after the drain"),
    "worker_cpu_s": N_("CPU s of the group it ran in (all its supernodes)"),
}
ERRORS = N_("lifecycle errors")


def flatten(d: dict, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for k, v in d.items():
        path = f"{prefix}{k}"
        out += flatten(v, path + ".") if isinstance(v, dict) else [(path, v)]
    return out


def _value(v) -> str:
    if isinstance(v, bool):
        return _("yes") if v else _("no")
    if isinstance(v, str):
        return _(STATUS[v]) if v in STATUS else v
    return f"{v:,}" if isinstance(v, int) else components.fmt(v)


def sandbox_params(rep: dict, s: dict) -> dict:
    """The Overview link's fields for this supernode: its scenario, deployment and own seed, at the
    load the router gave it (requests routed per second while it was up, in % of its capacity, within
    the control bar's bounds)."""
    up_s = s["failed_at_s"] if s["failed_at_s"] is not None else rep["duration_s"]
    q = {"scenario": rep["scenario"], "deployment": s["deployment"],
         "seed": member_seed(rep["seed"], s["supernode"])}
    lo, hi = (float(v) for v in components.bounds("load").values())
    load = 100 * s["routed"] / max(up_s, 1e-9) / s["capacity_rps"] if s["capacity_rps"] else 0
    if load > 0:
        q["load"] = f"{min(max(load, lo), hi):.0f}"
    return q


def detail(rep: dict, i: int) -> html.Div:
    """Every figure the region's report holds for supernode `i`, and the link to its own twin."""
    s = rep["supernodes"][i]
    rows, errors = [], []
    for path, v in flatten({k: v for k, v in s.items() if k != "supernode"}):
        if path.startswith("requests.errors."):
            errors.append(f"{path.rsplit('.', 1)[1]} {v}")
        else:
            rows.append(html.Tr([html.Th(_(LABELS[path]) if path in LABELS else path),
                                 html.Td(components.pct(v) if path.endswith("_ratio") else _value(v),
                                         className="num")]))
    if errors:
        rows.append(html.Tr([html.Th(_(ERRORS)), html.Td(", ".join(errors), className="num")]))
    q = sandbox_params(rep, s)
    return html.Div([
        html.H4(_("Supernode %(i)s: %(dep)s on %(sys)s") % {"i": i, "dep": s["deployment"], "sys": s["system"]}),
        html.P(provenance(rep), className="hint"),
        html.Div(html.Table(html.Tbody(rows), className="tbl", id=f"{P}-detail-table"), className="tbl-wrap",
                 style={"maxWidth": "48em"}),
        html.P([dcc.Link(_("Open supernode %(i)s's deployment and scenario on the Overview, in a private sandbox")
                         % {"i": i}, href="/?" + urlencode(q), id=f"{P}-open"),
                html.Span(" " + _("(one supernode alone, with its own seed and its own arrivals at the load the "
                                  "router gave it, %(load)s%% of its capacity: not the region's routed stream)")
                          % {"load": q.get("load", "0")}, className="hint")]),
    ])
