"""What the Failures page's tick sends, built from a snapshot: the KPI charts with fault marks (whole,
or one compact update), the table, timeline, failed parts and banner (each with a signature, so a
viewer gets a part only when it changed), the policy and random-failure read-outs, and the part a
URL names checked against the system on screen."""
from __future__ import annotations

from dash import html, no_update

from twin.engine.faults.aftermath import SERIES
from twin.ui import eventtext
from twin.ui import faultconsole
from twin.ui import faultreport
from twin.ui import faulttable
from twin.engine.faults import rows as faultrows
from twin.engine.faults.kinds import picked
from twin.ui import faultview
from twin.ui import figures
from twin.ui import guard
from twin.ui import theme
from twin.ui.lang import N_, _, system_title
from twin.ui.polling import Tick

def window_start(hist: dict) -> float | None:
    ts = (hist or {}).get("t") or []
    if not ts:
        return None
    return float(ts[max(0, len(ts) - figures.HISTORY_POINTS)])


def cursor(cur) -> dict:
    """This page's cursor fields from the browser, each of the right type (else dropped: a redraw)."""
    cur = guard.store(cur)
    out = {k: cur[k] for k in ("system", "view") if guard.ident(cur.get(k))}
    if type(cur.get("pin")) is int:
        out["pin"] = cur["pin"]
    if isinstance(cur.get("drawn"), bool):
        out["drawn"] = cur["drawn"]
    if isinstance(cur.get("s"), dict):
        out["s"] = {k: v for k, v in cur["s"].items() if type(v) is int}
    return out


def banner_of(snap) -> tuple:
    if getattr(snap, "partitioned", False):
        why = eventtext.latest(getattr(snap, "events", ()), "partition", "names") or getattr(snap, "message", "")
        return ([html.B(_("Partitioned.") + " "), why or _("part of the system is cut off")],
                "banner banner-bad")
    return "", "banner"


def demo_line(tw, snap) -> str:
    name = faultview.demo_name(tw.params.faults)
    base = _("%(scenario)s · seed %(seed)s · %(system)s") % {"scenario": snap.scenario, "seed": snap.seed,
                                                              "system": system_title(snap.system)}
    return _("Demo %(name)s: %(base)s") % {"name": name, "base": base} if name else base


def pinned(snap, fid: int) -> list[dict] | None:
    """The four KPI charts of fault `fid`'s incident, pinned to the window its report gives (a minute
    before the strike to a minute past service back): drawn from the series the engine kept for it
    (`faults.aftermath`), so the evidence stays while the live history scrolls on. Green lines mark
    the part serving again and service back. None when the run keeps no series for the fault."""
    inc = (getattr(snap, "incidents", None) or {}).get(fid)
    r = faultreport.find(snap, fid)
    if not inc or r is None or not r.get("window_s"):
        return None
    hist = {k: inc[k].tolist() for k in SERIES}
    lo, hi = r["window_s"]
    now = float(snap.sim_time)
    shapes, notes = faulttable.marks([r], now, lo)
    for at, what in ((faultrows.num(r.get("served_s")), N_("part serving again")),
                     (faultrows.num(r.get("back_s")), N_("service back"))):
        if at is not None:
            x = r["at_s"] + at
            shapes.append(faulttable.vline(x, theme.GREEN, 1.5, "dot" if what == "service back" else "solid"))
            notes.append({"x": x, "y": 0.02 if what == "service back" else 0.14, "xref": "x", "yref": "paper",
                          "xanchor": "left", "yanchor": "bottom", "showarrow": False, "text": _(what),
                          "font": {"size": 10, "color": theme.GREEN}, "bgcolor": theme.PANEL})
    figs = []
    for spec in faultconsole.CHARTS.values():
        fig = figures.strip_figure(spec, hist, height=faultconsole.CHART_H, points=len(hist["t"]))
        lay = fig["layout"]
        lay["shapes"], lay["annotations"] = shapes, notes
        lay["margin"] = {**lay["margin"], "t": 54}
        lay["title"] = {"text": _(spec.title) + " · " + _("fault #%(id)s") % {"id": fid}}
        lay["xaxis"] = {**lay["xaxis"], "range": [lo, hi], "autorange": False}
        figs.append(fig)
    return figs


def pin_sig(snap, fid: int | None) -> int | None:
    """What the pinned charts of fault `fid` depend on (None: nothing pinned)."""
    inc = (getattr(snap, "incidents", None) or {}).get(fid) if fid else None
    return faultview.crc([fid, inc["window"], len(inc["t"])]) if inc else None


def charts(t: Tick, panels: dict, changed, whole: bool = False) -> dict:
    """The four KPI charts: whole figures (with fault marks) on a first draw (or `whole`: the pinned
    charts of a report were just let go), else one compact
    update for all four (the new times once, the new values per series, the fault marks only when
    they moved) that the browser merges in (assets/twin.js `strips`, which also keeps each chart
    to its last HISTORY_POINTS points, so the charts are never resent whole)."""
    hist = getattr(t.snap, "history", None) or {}
    sig, (shapes, notes) = panels["marks"]
    if t.mode == "full" or whole:
        changed("marks", sig, force=True)
        figs = []
        for spec in faultconsole.CHARTS.values():
            fig = figures.strip_figure(spec, hist, height=faultconsole.CHART_H)
            fig["layout"]["shapes"], fig["layout"]["annotations"] = shapes, notes
            fig["layout"]["margin"] = {**fig["layout"]["margin"], "t": 54}   # legend under the title: the
            figs.append(fig)                                                   # charts are half a column wide
        return {"figs": figs}
    ext = [figures.extend(spec, hist, t.since_t) for spec in faultconsole.CHARTS.values()]
    new_marks = changed("marks", sig)
    if ext[0] is None and not new_marks:
        return {}
    upd = {"v": t.cursor["v"], "keep": figures.HISTORY_POINTS, "x": ext[0][0]["x"][0] if ext[0] else [],
           "y": [e[0]["y"] if e else [] for e in ext]}
    if new_marks:
        upd["shapes"], upd["notes"] = shapes, notes
    axes = [figures.robust_axis(spec, hist) if spec.robust else None for spec in faultconsole.CHARTS.values()]
    if changed("axes", faultview.crc(axes)):     # a clipped axis moves with its window (assets/twin.js)
        upd["yaxes"] = axes
    return {"strips": upd}


def panels(snap) -> dict:
    """What the tick draws from one snapshot, as (signature, content) per part: built once per
    snapshot version for every viewer of the twin (Twin.memo); each viewer's cursor keeps the
    signatures it has, so a part is sent only when it changed."""
    now = float(snap.sim_time)
    reports, failed, hist = list(snap.faults or ()), list(snap.failed or ()), snap.history
    rows = faultrows.rows(reports, now)
    summary = snap.fault_summary or {}
    evs = [e for e in (snap.events or ()) if e.get("kind") in faulttable.TIMELINE_KINDS][-14:]
    marks = faulttable.marks(reports, now, window_start(hist))
    banner = [snap.partitioned, snap.message]
    return {"table": (faultview.crc([rows, summary.get("injected")]), faulttable.table(rows, now, summary)),
            "events": (faultview.crc(evs), faulttable.timeline(evs)),
            "failed": (faultview.crc([failed, [r["target"] for r in reports]]),
                       faulttable.failed_list(snap.system.topology, failed, reports)),
            "banner": (faultview.crc(banner), banner_of(snap)),
            "marks": (faultview.crc(marks), marks)}


def twin_settings(tw, info, changed) -> dict:
    """Policy, random failures and the demo line: they follow the viewed twin (another viewer or a
    demo may change them), and can change without a new snapshot (a policy set on a paused twin)."""
    out = {}
    if changed("pol", faultview.crc(tw.policy)):
        pp = tw.policy
        out.update(policy_now=faulttable.policy_text(pp), detect=pp.get("detect_s", no_update),
                   redundant=("on" if pp.get("redundant_experts") else "off") if pp else no_update,
                   weights=pp.get("weights_from", no_update))
    if changed("rnd", faultview.crc([tw.random, info.name])):
        on = tw.random is not None
        out.update(random_now=faulttable.random_text(info.topology, tw.random), random=["on"] if on else [],
                   random_rate=tw.random if on else no_update)
    snap = tw.snapshot
    if changed("demo", faultview.crc([tw.params.faults, snap.scenario, snap.seed, info.name])):
        out["demo_line"] = demo_line(tw, snap)
    return out


def url_pick(info, url, keep: bool = True) -> dict:
    """The part named in the URL, checked against the system on screen (on the first draw, and again
    when the viewed twin switched systems: the hint's count and example are the new system's). Only a
    URL without a part falls back to one: the kind's example, or the first part of a kind this system
    has. `keep`: leave the fields alone when the layout already drew these values (first draw only)."""
    url, t = guard.store(url), info.topology
    given, url_kind = guard.ident(url.get("target")), url.get("kind")
    kind, target = faultconsole.initial(t, given, url_kind)
    if not given and not faultview.ids_for(t, kind):     # e.g. an L2 switch on a GPU cluster: a part it has
        kind = picked("die")
    if not given and not faultview.fits(t, kind, target):
        target = faultview.ids_for(t, kind)[0]
    fs, ps = faultconsole.extra_styles(kind)
    ft, pt = faultconsole.field_titles(kind)
    same = keep and (kind, target) == faultconsole.initial(None, given, url_kind)   # as the layout drew them
    return {"kind": no_update if same else kind, "target": no_update if same else target,
            "hint": faultview.target_hint(t, kind, target),
            "factor_style": fs, "period_style": ps, "factor_title": ft, "period_title": pt}
