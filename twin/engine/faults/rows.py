"""The fault reports as rows: each fault's state, its measured goodput and SLO attainment before, during
and after it, and its impact in words; exported as CSV or JSON. The Failures page's table, its export
and the lesson checks read these rows (the table is in `twin.ui.faulttable`)."""
from __future__ import annotations

import csv
import io
import json
import math

from twin.i18n import N_


def state(r: dict, now: float) -> str:
    if r.get("active"):
        if r.get("mitigated_s") is not None:       # a gray fault worked around, the part still slow
            return N_("mitigated · part still slow")
        if r.get("served_s") is not None:         # service back (rerouted), the part still under repair
            return N_("served again · part in repair")
        return N_("active · detected") if r.get("detect_s") is not None else N_("active")
    if r.get("recover_s") is not None:
        if r.get("back_s") is None and r.get("back_margin") is not None and r.get("slo_reference") is not None:
            return N_("recovered · service not back yet")     # the part serves, users still wait (a backlog)
        return N_("recovered")
    return N_("scheduled") if r.get("at_s", 0) > now - 1e-9 else N_("starting")


def num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


MEASURED = ("goodput_before", "goodput_during", "goodput_after", "slo_before", "slo_during", "slo_after")
# when users got their service back (twin.engine.faults.aftermath): seconds after the strike, the margin
# of SLO attainment against its minute before (`slo_reference`), and the incident's window for its charts
BACK = ("served_s", "back_s", "back_margin", "slo_reference", "window_s")
# a gray fault's (twin.engine.faults.gray): how it was found and worked around, the TPOT p50 clients saw
GRAY = ("detected_by", "mitigated_s", "mitigation", "tpot_before_ms", "tpot_during_ms", "tpot_after_ms")
# its what-if (the same seed without the fault): what the slow part cost, and what the mitigation won back
WHATIF = ("tokens_lost", "tpot_ms_without", "slo_without", "won_back_tokens")
RISE = "goodput_rise_before"       # the engine's report (twin.engine.faults.spec): the run's trend before it
RISING = 0.15   # goodput up more than this over the minute before a fault: not steady (assumption; seed 0, second
                # half of a minute against its first: paper-decode and peak-384 past 2 min move under 3 %, the
                # bursty mooncake-live trace up to 20 % either way, the default scenario 372 % at 1 min, 17 % at 2)


def rising(r: dict) -> float | None:
    """How much goodput rose over the minute before the fault, if by more than RISING: the twin
    was still warming up (or in a burst), so "before" against "during" is not the fault's doing."""
    rise = num(r.get(RISE))
    return rise if rise is not None and rise > RISING else None


def rows(reports, now: float) -> list[dict]:
    """One dict per fault: the engine's report (goodput and SLO attainment before, during and after
    it, over the engine's windows, `accounting.fault_windows`, frozen once service was restored),
    its state and its impact in words."""
    out = []
    for r in reports or ():
        row = {k: r.get(k) for k in ("id", "kind", "target", "at_s", "detect_s", "recover_s", "requests_affected",
                                     "requeued", "recomputed", "lost", *MEASURED, RISE, "active", "note", *GRAY,
                                     *BACK)}
        for k in (*MEASURED, RISE, "mitigated_s", "tpot_before_ms", "tpot_during_ms", "tpot_after_ms", *BACK[:4]):
            row[k] = num(row[k])
        whatif = r.get("whatif") if isinstance(r.get("whatif"), dict) else {}
        row.update({f"whatif_{k}": num(whatif.get(k)) for k in WHATIF})
        row["state"] = state(r, now)
        row["impact"] = impact(row)
        out.append(row)
    return out


def impact(r: dict) -> str:
    """What the fault cost, in plain words (English: the reports' export), from its frozen numbers."""
    b, d = r.get("goodput_before"), r.get("goodput_during")
    drop = (d - b) / b if b and d is not None else None
    lost, affected = int(r.get("lost") or 0), int(r.get("requests_affected") or 0)
    if lost:
        return f"{lost} requests lost"
    if r.get("tpot_before_ms") and r.get("tpot_during_ms") is not None:
        return slowed(r)
    if drop is None:
        return "not measured yet"
    if rising(r) is not None:
        return (f"not comparable: goodput was still rising when it struck ({rising(r) * 100:+.0f} % over the "
                f"minute before: the twin warming up, or a burst); none lost")
    tail = aftertaste(r)
    if drop >= -0.05 and not tail:
        why = ("no request was on the part" if not affected else
               f"its {affected} requests in flight were served ({int(r.get('requeued') or 0)} requeued, none lost)")
        return f"no impact, because {why}"
    return (f"goodput fell {-drop * 100:.0f} % until the part was repaired; {affected} requests affected, "
            f"{int(r.get('requeued') or 0)} requeued, {int(r.get('recomputed') or 0)} recomputed, none lost{tail}")


def aftertaste(r: dict) -> str:
    """The harm after the part was repaired, when SLO attainment stayed below its minute before by more
    than the margin (a backlog draining): "" when there was none."""
    ref, after, margin = r.get("slo_reference"), r.get("slo_after"), r.get("back_margin")
    if ref is None or after is None or margin is None or after >= ref - margin - 1e-9:
        return ""
    back = (f"service was back after {r['back_s']:,.0f} s" if r.get("back_s") is not None
            else "service is not back yet")
    return f"; after it, SLO attainment was {after * 100:.1f} % (against {ref * 100:.1f} % before) and {back}"


def slowed(r: dict) -> str:
    """What a part running slowly cost, in plain words: TPOT during against before, how it was
    detected and worked around, and what its what-if says."""
    b, d, a = r["tpot_before_ms"], r["tpot_during_ms"], r.get("tpot_after_ms")
    out = f"TPOT p50 {b:.1f} -> {d:.1f} ms (x{d / b:.2f})"
    if r.get("detect_s") is not None:
        out += f"; {'noticed by the detector' if r.get('detected_by') == 'telemetry' else 'detected'} after " \
               f"{r['detect_s']:.0f} s"
    if r.get("mitigated_s") is not None:
        out += f"; {r.get('mitigation') or 'mitigated'} after {r['mitigated_s']:.0f} s" + (
            f", then {a:.1f} ms" if a is not None else "")
    if r.get("whatif_tokens_lost") is not None:
        out += f"; it cost {r['whatif_tokens_lost']:,.0f} tokens against the same run without it"
        if r.get("whatif_won_back_tokens") is not None:
            out += f", the mitigation won back {r['whatif_won_back_tokens']:,.0f}"
    return out + "; none lost"


CSV_FIELDS = ("id", "kind", "target", "at_s", "detect_s", "served_s", "recover_s", "back_s", "requests_affected",
              "requeued", "recomputed", "lost", *MEASURED, "slo_reference", "back_margin", RISE, *GRAY,
              *(f"whatif_{k}" for k in WHATIF), "state", "impact")


def csv_text(rows_: list[dict]) -> str:
    """The fault table as CSV (one row per fault, oldest first; empty cells for "not measured")."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for r in sorted(rows_, key=lambda x: int(x.get("id") or 0)):
        w.writerow(["" if r.get(k) is None else r.get(k) for k in CSV_FIELDS])
    return out.getvalue()


def json_text(rows_: list[dict]) -> str:
    """The fault reports as JSON (oldest first; null for "not measured")."""
    return json.dumps([{k: r.get(k) for k in CSV_FIELDS} for r in sorted(rows_, key=lambda x: int(x.get("id") or 0))],
                      indent=1)
