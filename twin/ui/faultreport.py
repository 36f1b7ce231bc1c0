"""A fault's incident report, reachable from the Failures page's timeline, table and chart labels, and
the export of every report the run keeps.

The engine keeps a report per fault (at most MAX_RECORDS closed ones, frozen once service was
restored, plus the open ones); a snapshot carries the newest SNAPSHOT_FAULTS whole (`Snapshot.faults`)
and the older ones as `Snapshot.fault_archive`, so both the report of any kept fault and the export of
all of them are read from one snapshot, never from the running engine."""
from __future__ import annotations

from dash import html

from twin.ui import components
from twin.engine.faults.rows import RISE, impact, rising, rows, state
from twin.ui.faulttable import CLOSE, LINK

WHATIF = "fl-whatif"         # pattern-matching id of the report's "run the what-if" button: {"type": WHATIF, "index": id}
from twin.ui.faultview import kind_label
from twin.ui.lang import N_, _



def kept(snap) -> list[dict]:
    """Every report the run keeps, oldest first (the archive, then the snapshot's newest)."""
    seen = {}
    for r in tuple(getattr(snap, "fault_archive", ()) or ()) + tuple(getattr(snap, "faults", ()) or ()):
        seen[int(r.get("id") or 0)] = r
    return [seen[k] for k in sorted(seen)]


def export_rows(snap) -> list[dict]:
    """The rows of the CSV / JSON export: all kept reports (`kept`), not only the table's newest."""
    return rows(kept(snap), float(getattr(snap, "sim_time", 0.0)))


def find(snap, fault_id) -> dict | None:
    """The kept report of fault `fault_id`, or None (not a fault of this run, or folded into the totals)."""
    try:
        fid = int(fault_id)
    except (TypeError, ValueError):
        return None
    return next((r for r in kept(snap) if int(r.get("id") or 0) == fid), None)


def fault_id(value) -> int | None:
    """A fault id from a link's index, a chart label (its name "fault-<id>") or a URL (?report=<id>)."""
    if isinstance(value, dict):                  # a chart's clickAnnotationData
        note = value.get("annotation")
        value = str(note.get("name") or "").removeprefix("fault-") if isinstance(note, dict) else None
    try:
        fid = int(str(value))
    except (TypeError, ValueError):
        return None
    return fid if 0 < fid < 2**31 else None


def file_name(snap, ext: str) -> str:
    """faults-<scenario>-<deployment>-seed<seed>-t<simulated seconds>s.<ext>: what the export holds."""
    return (f"faults-{snap.scenario}-{snap.deployment}-seed{snap.seed}-t{float(snap.sim_time):.0f}s.{ext}"
            .replace("/", "_").replace(" ", "_"))


def _secs(v) -> str:
    return "–" if v is None else f"{float(v):,.1f} s"


def _trio(r: dict, key: str, fmt) -> str:
    """before / during / after of one measure, "–" for what was not measured."""
    return " / ".join("–" if r.get(f"{key}_{w}") is None else fmt(r[f"{key}_{w}"]) for w in ("before", "during", "after"))


def _back(r: dict) -> str:
    """When users got their service back: SLO attainment within the margin of its minute before
    (`faults.aftermath`), which can be long after the part served again (a backlog draining)."""
    margin = {"m": f"{(r.get('back_margin') or 0) * 100:.0f}"}
    if r.get("back_s") is not None:
        return _("after %(s)s (t = %(t)s s): SLO attainment back within %(m)s points of the minute before "
                 "(%(ref)s %%)") % {"s": _secs(r["back_s"]), "t": f"{r['at_s'] + r['back_s']:,.1f}",
                                    "ref": components.pct(r["slo_reference"]), **margin}
    if "back_margin" not in r:
        return "–"
    if r.get("slo_reference") is None:
        return _("not measurable: nothing completed in the minute before the fault")
    return _("not yet: SLO attainment is not back within %(m)s points of the minute before (%(ref)s %%)") % {
        "ref": components.pct(r["slo_reference"]), **margin}


def _phases(r: dict) -> str:
    """The sim times of the three phases: the minute before, the fault until the part was repaired, and
    from then until service was back (at least a minute)."""
    at, rec, back = r["at_s"], r.get("recover_s"), r.get("back_s")
    lo = (r.get("window_s") or [at - 60.0])[0]
    t = lambda v: f"{v:,.0f}"       # noqa: E731
    during = f"{t(at)}–{t(at + rec)}" if rec is not None else f"{t(at)}–…"
    if rec is None:
        after = "–"
    else:
        end = max(at + back, at + rec + (at - lo)) if back is not None else None
        after = f"{t(at + rec)}–{t(end) if end is not None else '…'}"
    return f"{t(lo)}–{t(at)} / {during} / {after}"


ROWS = (   # label, value from the report
    (N_("struck at"), lambda r: _("t = %(t)s s") % {"t": f"{r['at_s']:,.1f}"}),
    (N_("detected after"), lambda r: _secs(r.get("detect_s"))),
    (N_("part serving again after"), lambda r: _secs(r.get("served_s"))),
    (N_("part repaired after"), lambda r: _secs(r.get("recover_s"))),
    (N_("service back"), _back),
    (N_("before / during / after (sim s)"), _phases),
    (N_("requests affected / requeued / recomputed / lost"),
     lambda r: " / ".join(str(int(r.get(k) or 0)) for k in ("requests_affected", "requeued", "recomputed", "lost"))),
    (N_("goodput before / during / after (tok/s)"), lambda r: _trio(r, "goodput", components.fmt)),
    (N_("goodput over the minute before"), lambda r: "–" if r.get(RISE) is None else (
        f"{r[RISE] * 100:+.0f} %" + (" · " + _("not steady: before against during is the run's change, not the "
                                               "fault's") if rising(r) is not None else ""))),
    (N_("SLO attainment before / during / after (%)"), lambda r: _trio(r, "slo", components.pct)),
)


def _ms(v) -> str:
    return "–" if v is None else f"{float(v):,.1f}"


def _whatif(r: dict) -> str:
    """Tokens made fewer than without the fault (or more: a backlog caught up in the window), and TPOT
    and SLO attainment without it."""
    w = r.get("whatif") or {}
    lost = w.get("tokens_lost")
    made = (_("%(tokens)s tokens more (a backlog caught up)") if lost is not None and lost < 0 else
            _("%(tokens)s tokens fewer")) % {"tokens": components.fmt(abs(lost) if lost is not None else None)}
    return made + "; " + _("TPOT p50 %(tpot)s ms and SLO attainment %(slo)s %% without the fault") % {
        "tpot": _ms(w.get("tpot_ms_without")),
        "slo": components.pct(w["slo_without"]) if w.get("slo_without") is not None else "–"}


# a gray fault's rows (twin.engine.faults.gray), shown when its report has them: label, the key that
# must be there, value
GRAY_ROWS = (
    (N_("detected by"), "detected_by", lambda r: _("the detector, from telemetry (measured)")
     if r["detected_by"] == "telemetry" else _("the policy's detect time")),
    (N_("mitigated after"), "mitigated_s", lambda r: _secs(r["mitigated_s"]) + (
        " · " + _(r["mitigation"]) if r.get("mitigation") else "")),
    (N_("TPOT p50 before / during / after (ms)"), "tpot_before_ms",
     lambda r: " / ".join(_ms(r.get(f"tpot_{w}_ms")) for w in ("before", "during", "after"))),
    (N_("what the slow part cost (what-if)"), "whatif", _whatif),
    (N_("won back by the mitigation"), "whatif", lambda r: _("%(tokens)s tokens") % {
        "tokens": components.fmt((r["whatif"] or {}).get("won_back_tokens"))}),
)


def with_whatif(r: dict | None, store, faults: str | None) -> dict | None:
    """The report with the what-if a job measured for it (`store`: the page's what-if store), when
    the job replayed the demo the twin runs now."""
    store = store if isinstance(store, dict) else {}
    got = (store.get("result") or {}).get(str((r or {}).get("id")))
    if r is None or not got or not faults or store.get("faults") != faults:
        return r
    return {**r, "whatif": got}


def final(r: dict) -> bool:
    """The fault is over and its "after" window frozen (the engine says so): the report will not change.
    A number still missing then was never measurable (a fault shorter than a sampling interval)."""
    return bool(r.get("final"))


def panel(r: dict, now: float) -> html.Div:
    """The incident report of one fault: what broke, when it was detected and served again, what it
    cost (goodput and SLO attainment before, during and after; for a part running slowly, how it was
    detected and worked around, TPOT before, during and after, and its what-if) and whether the
    numbers are final."""
    head = _("Fault #%(id)s: %(kind)s on %(target)s") % {"id": r["id"], "kind": kind_label(r["kind"]),
                                                       "target": r["target"]}
    rows_ = [*ROWS[:2], *((k, fn) for k, key, fn in GRAY_ROWS if r.get(key) is not None), *ROWS[2:]]
    body = [html.Div([html.Span(_(k), className="k"), html.Span(fn(r), className="v")], className="row")
            for k, fn in rows_]
    body.append(html.Div([html.Span(_("state"), className="k"), html.Span(_(state(r, now)), className="v")],
                         className="row"))
    if r.get("whatif") is None and r.get("tpot_before_ms") is not None:     # a gray fault, no what-if yet
        body.append(html.Div([html.Span(_("what the slow part cost (what-if)"), className="k"), html.Span([
            html.Button(_("Run the what-if"), id={"type": WHATIF, "index": r["id"]}, className="btn btn-small",
                        n_clicks=0, title=_("A background job replays the demo to its end beside the same seed "
                                            "without the fault and without its mitigation")),
            html.Span(id=f"{WHATIF}-msg", className="hint small")], className="v")], className="row"))
    notes = [html.P(impact(r), className="hint")]
    if r.get("note"):
        notes.append(html.P(r["note"], className="hint small"))
    notes.append(html.P(_("Final: the fault is over and its numbers are frozen; the report will not change (a "
                          "– was never measurable: the window held no sampling interval).") if final(r) else
                        _("Still measuring: numbers are frozen as their windows close (the one after recovery "
                          "lasts up to a minute)."), className="hint small"))
    close = html.Button("✕", id={"type": LINK, "index": CLOSE, "at": "report"}, className="btn btn-small", n_clicks=0,
                        title=_("Close the report"))
    return components.panel([html.Div(body, className="stats fl-report-rows"), *notes],
                   head, "sim", extra=close, className="fl-block fl-report")


def missing(fid: int) -> html.Div:
    return html.Div(_("Fault #%(id)s has no report kept: the run keeps the newest reports (older ones are "
                      "counted in the totals), and a reset starts a new run.") % {"id": fid},
                    className="hint fl-block")

