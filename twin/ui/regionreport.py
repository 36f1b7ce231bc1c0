"""What the Region page shows of a finished region run (twin.region's report, read from the job's
result): what the figures are, the regional audit line, the link failures and the links' figures,
the per-supernode table and chart, and one supernode drilled into with the link that opens its
deployment and scenario in a private sandbox. The page (pages/region.py) holds the form and the job."""
from __future__ import annotations

from urllib.parse import urlencode

from dash import dcc, html

from twin.region.driver import member_seed
from twin.ui import components, figures, theme
from twin.ui.lang import N_, _, unit

P = "rg"
REUSE = {"off": N_("off: recompute"), "fetch": N_("fetch a prefix over the inter-supernode link")}
STATUS = {"up": N_("up"), "failed": N_("failed")}


# ---- the run --------------------------------------------------------------------------------------
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
