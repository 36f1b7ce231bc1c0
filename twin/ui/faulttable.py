"""The Failures page's read-outs: fault marks on the KPI charts, the per-fault table (with SLO
attainment before and during each fault, over the engine's goodput windows), failed parts, the
fault timeline and the policy and random-failure lines. Everything is built from snapshot data."""
from __future__ import annotations

import math

from dash import html

from twin.engine.faults import failure_rates
from twin.topology import StaticTopology

from twin.ui import components
from twin.ui import theme
from twin.engine.faults import KINDS
from twin.ui.faultview import ELEMENT_LABEL, element_kind, kind_label
from twin.ui.lang import N_, _, unit
from twin.engine.faults.rows import num, rising


# ---- chart marks -------------------------------------------------------------------------------------

MARK_LABELS = 6            # strike lines labelled on a chart (at most the newest 6)
LABEL_ROWS = (1.0, 0.86, 0.72)   # heights (share of the plot) a label may take: near strikes are staggered
LABEL_GAP = 0.24           # assumption: a label ("#12 link down") is about a quarter of a half-width chart's
#                            plot wide (~90 of ~380 px at 1440 px): two labels in a row stay this far apart
def short_label(name: str) -> str:
    """A fault kind in two or three words, for a label on a chart (the table and the hover say it in full)."""
    return _(KINDS[name].short) if name in KINDS else name


def label_rows(xs: list[float], span: float) -> list[int | None]:
    """A row (index into LABEL_ROWS) for a label at each x, newest (last) first, so that two labels in
    a row are at least LABEL_GAP x `span` apart; None: no room (that strike keeps its line and hover)."""
    gap = LABEL_GAP * max(span, 1e-9)
    placed: list[list[float]] = [[] for _ in LABEL_ROWS]
    out: list[int | None] = [None] * len(xs)
    for i in sorted(range(len(xs)), key=lambda k: -xs[k]):
        row = next((r for r, taken in enumerate(placed) if all(abs(xs[i] - x) >= gap for x in taken)), None)
        if row is not None:
            placed[row].append(xs[i])
        out[i] = row
    return out


def _band(x0: float, x1: float) -> dict:
    return {"type": "rect", "xref": "x", "yref": "paper", "x0": round(x0, 1), "x1": round(x1, 1), "y0": 0, "y1": 1,
            "fillcolor": theme.RED, "opacity": 0.13, "line": {"width": 0}, "layer": "below"}


def vline(x: float, colour: str, width: float, dash: str | None = None) -> dict:
    line = {"color": colour, "width": width}
    if dash:
        line["dash"] = dash
    return {"type": "line", "xref": "x", "yref": "paper", "x0": round(x, 1), "x1": round(x, 1), "y0": 0, "y1": 1,
            "line": line}


def marks(reports, now: float, t_from: float | None = None) -> tuple[list, list]:
    """(shapes, annotations) for a KPI chart: red bands where any fault disturbed service (from the
    strike until traffic flowed steadily again, `served_s`: a reroute, an isolated flapping link, a
    recovered instance; overlapping faults merged into one band), a solid line where each struck, a dashed yellow line where it was
    detected, and a label on the newest MARK_LABELS strikes. Only what overlaps the visible window
    (from `t_from` to now) is drawn: with hundreds of faults the marks stay a few KB."""
    spans, strikes, detects = [], [], []
    lo = -math.inf if t_from is None else t_from
    for r in reports or ():
        at = num(r.get("at_s"))
        if at is None or at > now + 1e-9 or (not r.get("active") and r.get("recover_s") is None):
            continue
        rec = num(r.get("served_s"))
        end = min(at + rec, now) if rec is not None else now
        if end < lo:
            continue
        spans.append((max(at, lo), end))
        if at >= lo:
            strikes.append((at, r.get("id"), r.get("kind"), r.get("target")))
        det = num(r.get("detect_s"))
        if det is not None and lo <= at + det <= now + 1e-9:
            detects.append(at + det)
    bands: list[list[float]] = []
    for x0, x1 in sorted(spans):
        if bands and x0 <= bands[-1][1]:
            bands[-1][1] = max(bands[-1][1], x1)
        else:
            bands.append([x0, x1])
    shapes = [_band(x0, x1) for x0, x1 in bands]
    shapes += [vline(at, theme.RED, 1.5) for at, *_ in strikes]
    shapes += [vline(x, theme.YELLOW, 1.2, "dash") for x in sorted(set(round(x, 1) for x in detects))]
    return shapes, _labels(strikes, (t_from if t_from is not None else 0.0), now)


def _labels(strikes: list, lo: float, now: float) -> list[dict]:
    """Labels of the newest MARK_LABELS strikes: "#id" and the fault in short words, staggered so that
    none overprints another (`label_rows`); the hover says the fault in full, and a click on a label
    opens its report (the page reads the chart's clickAnnotationData)."""
    newest = sorted(sorted(strikes, key=lambda s: -int(s[1] or 0))[:MARK_LABELS])
    heights = label_rows([s[0] for s in newest], now - lo)
    return [{"x": round(at, 1), "y": LABEL_ROWS[row], "xref": "x", "yref": "paper", "yanchor": "top",
             "xanchor": "left", "showarrow": False, "text": f"#{i} " + short_label(k),
             "font": {"size": 10, "color": theme.RED}, "bgcolor": theme.PANEL, "captureevents": True,
             "hovertext": _("#%(id)s %(kind)s on %(target)s at t = %(t)s s: click for its report") % {
                 "id": i, "kind": kind_label(k), "target": target, "t": f"{at:,.1f}"}, "name": f"fault-{i}"}
            for (at, i, k, target), row in zip(newest, heights) if row is not None]


# ---- the fault table --------------------------------------------------------------------------------

LINK = "fl-rep"            # pattern-matching id of a link to a report: {"type": LINK, "index": id, "at": where}
CLOSE = 0                  # the index of the report's close button (fault ids start at 1)


def link(fid: int, at: str, text: str | None = None) -> html.Button:
    """A link to fault `fid`'s incident report (`faultreport`; the page's report panel opens on it);
    `at` tells apart the links to one fault (its table row, each of its timeline lines)."""
    return html.Button(text or f"#{fid}", id={"type": LINK, "index": int(fid), "at": at}, className="linkish",
                       n_clicks=0, title=_("Open the report of fault #%(id)s") % {"id": fid})


def _secs(v, pending: str = "…") -> str:
    f = num(v)
    return pending if f is None else f"{f:,.1f} {unit('s')}"


def _change(before, during, fmt, unit: str = "", missing: str = "…", rise: float | None = None) -> html.Td:
    """A "before → during (±x %)" cell, red when the value fell by more than 5 %; `missing` stands
    for a during value not measured; `rise` (rows.rising) for a "before" still rising: no change is
    claimed, since the run, not the fault, moved the value."""
    if before is None and during is None:
        return html.Td("–", className="muted")
    if during is None:
        return html.Td(f"{fmt(before)} → {missing}", className="chg chg-bad" if missing != "…" else "chg")
    if rise is not None:
        return html.Td(f"{fmt(before)} → {fmt(during)}{unit} (" + _("not steady before") + ")", className="chg muted",
                       title=_("Goodput rose %(pct)s %% over the minute before the fault (the twin warming up, or a "
                               "burst): the change is the run's, not the fault's") % {"pct": f"{rise * 100:.0f}"})
    delta = (during - before) / before if before else None
    cls = "chg chg-bad" if delta is not None and delta < -0.05 else "chg"
    return html.Td(f"{fmt(before)} → {fmt(during)}{unit}" + (f" ({delta * 100:+.0f} %)" if delta is not None else ""),
                   className=cls)


def _after(cell: html.Td, r: dict) -> html.Td:
    """The SLO cell with its "after" phase (to service back) once measured, red when it stayed below
    the minute before by more than the margin: the harm of a backlog after the part was repaired."""
    after, ref, margin = r.get("slo_after"), r.get("slo_reference"), r.get("back_margin")
    if after is None:
        return cell
    bad = ref is not None and margin is not None and after < ref - margin - 1e-9
    return html.Td(f"{cell.children} → {_pct(after)}", className="chg chg-bad" if bad else cell.className,
                   title=_("before → during → after the part was repaired, until service was back"))


def _pct(v) -> str:
    return "–" if v is None else f"{v * 100:.1f}"


HEAD = (("#", "", N_("fault number")), (N_("fault"), "", N_("fault kind")), (N_("target"), "", N_("the part that failed")),
        (N_("struck at"), "num", N_("sim time the fault started")),
        (N_("time to detect"), "num", N_("seconds from the fault to its detection (the policy's detect time; for a "
                                          "part running slowly, measured: when the detector noticed it)")),
        (N_("time to recover"), "num", N_("seconds from the fault until service recovered")),
        (N_("requests affected"), "num", N_("requests in flight on the parts the fault touched")),
        (N_("requeued"), "num", N_("requests sent back through the scheduler")),
        (N_("recomputed"), "num", N_("requeued requests whose generated tokens had to be recomputed")),
        (N_("lost"), "num", N_("requests dropped: must always be 0")),
        (N_("goodput before → during (tok/s)"), "num", N_("SLO-meeting output tokens/s before the fault vs during it")),
        (N_("SLO attainment before → during → after (%)"), "num", N_("share of completions meeting TTFT and TPOT "
                                                                   "SLOs; after: from the repair to service back")),
        (N_("state"), "", ""))


def _cells(r: dict) -> list:
    """One row's cells, as plain strings where possible (the table is resent each tick while
    faults last, so every component counts); column alignment comes from the stylesheet."""
    lost = int(r.get("lost") or 0)
    started = r["state"] not in ("scheduled", "starting")
    det = r.get("detect_s")
    det_txt = _secs(det) if det is not None else (
        _("not needed") if r.get("recover_s") is not None else "…" if started else "–")
    if det is not None and r.get("detected_by") == "telemetry":      # measured by the detector, not declared
        det_txt = [det_txt, html.Div(_("by the detector"), className="muted small")]
    st = _(r["state"]) + (f" t={r['at_s']:,.1f} {unit('s')}" if r["state"] == "scheduled" else "")
    kind_cls = {"served": "recovered"}.get(r["state"].split(" ")[0], r["state"].split(" ")[0])
    dash = "–"
    return [
        html.Td(link(r["id"], "table")),
        html.Td(kind_label(r["kind"])),
        html.Td(r["target"], className="code"),
        html.Td(_secs(r["at_s"])),
        html.Td(det_txt),
        html.Td(_secs(r.get("recover_s")) if started else dash),
        html.Td(components.fmt(r.get("requests_affected")) if started else dash),
        html.Td(components.fmt(r.get("requeued")) if started else dash),
        html.Td(components.fmt(r.get("recomputed")) if started else dash),
        html.Td(str(lost), className="lost-ok" if lost == 0 else "lost-bad"),
        _change(r.get("goodput_before"), r.get("goodput_during"), components.fmt, rise=rising(r))
        if started else html.Td(dash),
        # an interval ended in the window (goodput measured) but nothing completed: a hang, not 100 %
        _after(_change(r.get("slo_before"), r.get("slo_during"), _pct,
                       missing=_("no completions") if r.get("goodput_during") is not None else "…"), r)
        if started else html.Td(dash),
        html.Td([st, html.Div(r["note"], className="muted small")] if r.get("note") else st,
                className=f"fstate fstate-{kind_cls}"),
    ]


def table(rows_: list[dict], now: float, summary: dict | None = None) -> html.Div:
    """The newest faults, newest first, under a line counting all of them (`fault_summary`)."""
    if not rows_:
        return html.Div(_("No faults yet. Pick a part and a fault above and inject it, or load a demo."),
                        className="hint")
    n = int((summary or {}).get("injected") or 0)
    count = (_("%(n)s faults, newest %(shown)s shown") % {"n": f"{n:,}", "shown": len(rows_)} if n > len(rows_)
             else _("%(n)s fault(s)") % {"n": len(rows_)})
    active = (summary or {}).get("active")
    if active:
        count += " · " + _("%(n)s active") % {"n": active}
    det = (summary or {}).get("detector")
    if isinstance(det, dict) and det.get("flags") is not None:     # the gray detector (twin.engine.faults.detect)
        count += " · " + _("detector: %(flags)s flagged slow, %(false)s false alarms") % {
            "flags": det["flags"], "false": det.get("false_alarms", 0)}
    body = [html.Tr(_cells(r)) for r in sorted(rows_, key=lambda x: -int(x.get("id") or 0))]
    head = html.Thead(html.Tr([html.Th(_(h), className=c, title=_(t)) for h, c, t in HEAD]))
    return html.Div([html.Div(count, className="hint small ftbl-count"),
                     html.Div(html.Table([head, html.Tbody(body)], className="tbl ftbl"), className="tbl-wrap")])


# ---- failed parts, events, policy ------------------------------------------------------------------

def failed_groups(failed, reports) -> list[tuple[str, int]]:
    """Failed element ids grouped under the fault targets that explain them: [(id, n elements)]."""
    failed = list(failed or ())
    targets = sorted({r.get("target") for r in reports or () if r.get("target")}, key=len, reverse=True)
    groups: dict[str, int] = {}
    for f in failed:
        owner = next((t for t in targets if f == t or f.startswith(t + "/")), f)
        groups[owner] = groups.get(owner, 0) + 1
    return sorted(groups.items())


def failed_list(t: StaticTopology, failed, reports) -> list:
    groups = failed_groups(failed, reports)
    if not groups:
        return [html.Span(_("Nothing has failed: every part is up."), className="hint")]
    items = []
    for gid, n in groups[:40]:
        el = element_kind(t, gid)
        label = ELEMENT_LABEL.get(el, el or "element")
        items.append(html.Li([html.Code(gid), html.Span(" " + _(label) + (" · " + _("%(n)s elements down") % {"n": n}
                                                                           if n > 1 else ""),
                                                        className="muted")], className="failed-item"))
    if len(groups) > 40:
        items.append(html.Li(_("… and %(n)s more") % {"n": len(groups) - 40}, className="muted"))
    return [html.Ul(items, className="failed-list")]


TIMELINE_KINDS = ("fault", "detect", "recover", "repair", "partition", "error", "policy")


def timeline(events, n: int = 14) -> list:
    """The newest fault events, each line about one fault ending in a link to its report."""
    evs = [e for e in events or () if e.get("kind") in TIMELINE_KINDS][-n:][::-1]
    lines = iter(range(len(evs)))
    return components.events(evs, _("No fault events yet."), ",.1f", extra=lambda e: _report_link(e, next(lines)))


def _report_link(e: dict, line: int):
    fid = (e.get("args") or {}).get("id")
    return link(fid, f"ev{line}", _("report #%(id)s") % {"id": fid}) if type(fid) is int else None


def policy_text(policy: dict) -> str:
    if not policy:
        return _("Policy: the engine's defaults.")
    return _("In force: detect %(detect)s s, redundant experts %(redundant)s, weights from %(weights)s.") % {
        "detect": f"{policy.get('detect_s', 0):g}", "redundant": _("on") if policy.get("redundant_experts") else _("off"),
        "weights": str(policy.get("weights_from", "ems")).upper()}


def mean_gap_s(t: StaticTopology, hours_per_sim_s: float) -> float | None:
    """Mean sim seconds between random failures at this failure-clock rate (the engine's own rates,
    `failure_rates`: catalog MTBFs)."""
    rate_per_h = float(failure_rates(t)[1].sum())
    if rate_per_h <= 0 or not hours_per_sim_s:
        return None
    return 1.0 / (rate_per_h * hours_per_sim_s)


def random_text(t: StaticTopology, random_h: float | None) -> str:
    if random_h is None:
        return _("Random failures: off.")
    gap = mean_gap_s(t, random_h)
    return (_("Random failures: on, %(h)s failure-clock hours per sim second") % {"h": f"{random_h:g}"}
            + (" " + _("(about one failure every %(gap)s sim s)") % {"gap": f"{gap:,.0f}"} if gap else "") + ".")
