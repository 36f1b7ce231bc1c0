"""Fault console helpers for the Failures page: which parts a fault kind can break, picking a part
from the topology drawing, fault marks on the KPI charts, the per-fault table and the demos.

Everything here reads snapshots (plain dicts and lists) and the static topology; nothing touches
a running engine. Validation of a fault itself lives in `twin.session.check_fault` (the engine's
own rules against a fresh topology).
"""
from __future__ import annotations

import json
import math
import zlib
from functools import lru_cache
from pathlib import Path

from dash import html

from twin.config import CATALOG_DIR
from twin.engine.faults import EXAMPLES, KINDS
from twin.topology import UnknownElementError, parse, topology

from . import components as C
from . import theme

# fault kind -> what the dropdown says
KIND_LABEL = {
    "npu_die": "NPU die lost", "npu": "NPU (both dies) lost", "cpu": "Kunpeng CPU lost (EMS server)",
    "node": "node power loss", "optical_link": "optical link down", "optical_degrade": "optical link degraded",
    "optical_flap": "optical link flapping", "l1": "L1 UB switch lost", "l2": "L2 UB switch lost",
    "subplane": "UB sub-plane lost", "rdma_nic": "RDMA NIC lost", "rdma_plane": "RDMA switch lost",
    "vpc": "VPC card (QingTian) lost",
}
# element kind (topology) -> the fault kind picked when that part is clicked
DEFAULT_KIND = {"die": "npu_die", "npu": "npu", "cpu": "cpu", "node": "node", "link:l1-l2": "optical_link",
                "l1": "l1", "l2": "l2", "subplane": "subplane", "rdma_nic": "rdma_nic",
                "rdma_switch": "rdma_plane", "vpc_nic": "vpc"}
ELEMENT_LABEL = {"die": "NPU die", "npu": "NPU", "cpu": "Kunpeng CPU", "node": "node", "link:l1-l2": "optical L1-L2 link",
                 "l1": "L1 UB switch", "l2": "L2 UB switch", "subplane": "UB sub-plane",
                 "rdma_nic": "RDMA NIC", "rdma_switch": "RDMA switch", "vpc_nic": "VPC card",
                 "vpc_switch": "VPC switch", "storage": "object storage", "rack": "rack",
                 "comm_rack": "communication rack", "nvswitch": "NVSwitch"}
EXTRA_FIELDS = {"optical_degrade": "factor", "optical_flap": "period_s"}   # kind-specific inputs
SUGGESTIONS = 200          # at most this many ids in the target's suggestion list

# demo files (twin/catalog/faults/*.toml) in presentation order, with their titles
DEMO_TITLES = {
    "optical-flap": "Optical link flapping at peak load",
    "l2-loss": "L2 switch lost",
    "decode-die-redundant": "Decode die lost, redundant experts",
    "decode-die-no-redundancy": "Decode die lost, no redundancy",
    "ems-node-loss": "EMS node lost",
    "node-power-loss": "Node power loss",
}


def kind_options() -> list[dict]:
    return [{"label": f"{KIND_LABEL.get(k, k)} ({k})", "value": k} for k in KINDS]


def who(viewer: str | None, token: dict | None) -> str:
    """The name shared actions are logged under (same form as the run controls)."""
    name = f"viewer {viewer}" if viewer else "viewer"
    return f"instructor ({name})" if token and token.get("ok") else name


def crc(obj) -> int:
    """A cheap, stable signature of JSON-like data (to send a part only when it changed)."""
    return zlib.crc32(json.dumps(obj, sort_keys=True, default=str).encode())


# ---- targets -------------------------------------------------------------------------------------

@lru_cache(maxsize=8)
def _topo(system: str):
    return topology(system)      # fresh and only read here


def element_kind(system: str, target: str | None) -> str | None:
    """The topology kind of an id ("die", "l2", "link:l1-l2", ...), or None if no such element."""
    if not target or not isinstance(target, str):
        return None
    t = _topo(system)
    try:
        canonical = t.validate_target(target.strip())
        if "--" in canonical:
            return "link:" + t.link_arrays().ends[t.edge(canonical)][3]
        return parse(canonical)["kind"]
    except (UnknownElementError, ValueError, KeyError):
        return None


def canonical(system: str, target: str) -> str:
    try:
        return _topo(system).validate_target(target.strip())
    except (UnknownElementError, ValueError, KeyError):
        return target


def fits(system: str, kind: str, target: str | None) -> bool:
    return kind in KINDS and element_kind(system, target) in KINDS[kind]


def pick(system: str, target: str, current: str | None = None) -> tuple[str, str] | None:
    """(fault kind, target) for a clicked part: the current kind if it applies, else the part's
    natural kind; None if the part cannot be broken (a rack, the VPC switch, storage)."""
    el = element_kind(system, target)
    if el is None:
        return None
    target = canonical(system, target)
    if current in KINDS and el in KINDS[current]:
        return current, target
    if current == "npu" and el == "die":
        return "npu", target.rsplit("/", 1)[0]
    kind = DEFAULT_KIND.get(el)
    return (kind, target) if kind else None


def related(system: str, kind: str, target: str | None) -> str:
    """A target for `kind` close to the current one (die -> its NPU, part of a node -> the node,
    an L2 -> its sub-plane, ...), else the kind's example."""
    if kind not in KINDS:
        return ""
    if fits(system, kind, target):
        return canonical(system, target)
    try:
        p = parse(canonical(system, target or ""))
    except (UnknownElementError, ValueError):
        p = {}
    if p.get("kind") == "link":          # an optical link: think of its L1 end
        try:
            p = parse(p["u"] if p["u"].startswith("n") else p["v"])
        except (UnknownElementError, ValueError):
            p = {}
    node, sp = p.get("node"), p.get("subplane")
    guesses = []
    if node is not None:
        n = f"n{node:02d}"
        npu = p.get("npu", 0)
        guesses += {"npu_die": [f"{n}/npu{npu}/d{p.get('die', 0)}"], "npu": [f"{n}/npu{npu}"],
                    "cpu": [f"{n}/cpu0"], "node": [n], "l1": [f"{n}/l1-{sp or 0}"],
                    "rdma_nic": [f"{n}/rdma{npu}"], "vpc": [f"{n}/vpc"],
                    "subplane": [f"sp{sp}"] if sp is not None else [],
                    }.get(kind, [])
        if kind.startswith("optical"):
            guesses.append(f"{n}/l1-{sp or 0}--sp{sp or 0}/l2-0")
    elif sp is not None:
        guesses += {"subplane": [f"sp{sp}"], "l2": [f"sp{sp}/l2-{p.get('index', 0)}"]}.get(kind, [])
    for g in guesses:
        if fits(system, kind, g):
            return canonical(system, g)
    return EXAMPLES.get(kind, "")


@lru_cache(maxsize=64)
def ids_for(system: str, kind: str) -> tuple[str, ...]:
    """Every valid target of a fault kind on a system, in topology order."""
    t = _topo(system)
    want = KINDS.get(kind, ())
    out: list[str] = []
    for el in want:
        if el == "die":
            out += t.die_ids
        elif el == "npu":
            out += list(dict.fromkeys(d.rsplit("/", 1)[0] for d in t.die_ids))
        elif el == "node":
            out += [f"n{i:02d}" for i in range(t.system.nodes)]
        elif el == "subplane":
            out += [f"sp{k}" for k in range(t.system.subplanes)] if t.kind == "supernode" else []
        elif el.startswith("link:"):
            lk = el[5:]
            out += [t.link_id(e) for e, end in enumerate(t.link_arrays().ends) if end[3] == lk]
        else:
            out += t.ids(el)
    return tuple(out)


def suggest(system: str, kind: str, text: str | None, limit: int = SUGGESTIONS) -> list[str]:
    """Valid ids of `kind` containing `text` (ids starting with it first), at most `limit`."""
    ids = ids_for(system, kind)
    q = (text or "").strip().lower()
    if not q or (q in (i.lower() for i in ids[:1])):
        return list(ids[:limit])
    head = [i for i in ids if i.lower().startswith(q)]
    if len(head) >= limit:
        return head[:limit]
    rest = [i for i in ids if q in i.lower() and not i.lower().startswith(q)]
    out = head + rest
    if not out:       # nothing matches: show where to start
        return list(ids[:limit])
    return out[:limit]


def target_hint(system: str, kind: str, target: str | None) -> str:
    n = len(ids_for(system, kind))
    what = " or ".join(ELEMENT_LABEL.get(e, e) + "s" for e in KINDS.get(kind, ()))
    ex = EXAMPLES.get(kind, "")
    if not n:
        return f"This system has no {what}: pick another fault kind."
    state = ""
    if target and not fits(system, kind, target):
        el = element_kind(system, target)
        state = (f" · {target!r} is a {ELEMENT_LABEL.get(el, el)}, not one of these" if el
                 else f" · {target!r} is not an element of this system")
    return f"{n:,} {what} (e.g. {ex}); type to filter, or click a part on the drawing{state}"


def parse_at(text, now: float) -> float:
    """Schedule time from the field: "300" (sim time, s) or "+30" (seconds from now)."""
    s = str(text if text is not None else "").strip()
    if not s:
        raise ValueError(f"schedule: enter a sim time in seconds (now t = {now:.1f} s), or +N for N "
                         "seconds from now")
    rel = s.startswith("+")
    try:
        v = float(s[1:] if rel else s)
    except ValueError:
        raise ValueError(f"schedule at = {s!r}: allowed a sim time in seconds (now t = {now:.1f} s) "
                         "or +N seconds from now") from None
    if not math.isfinite(v):
        raise ValueError(f"schedule at = {s!r}: allowed a finite number of seconds")
    return round(now + v, 3) if rel else v


# ---- demos -----------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def demos() -> tuple[dict, ...]:
    """The fault demo files: name, title, description (the file's first comment), scenario, seed,
    duration and fault times."""
    from twin.engine.faults import load_fault_file
    folder = CATALOG_DIR / "faults"
    names = [n for n in DEMO_TITLES if (folder / f"{n}.toml").is_file()]
    names += sorted(p.stem for p in folder.glob("*.toml") if p.stem not in DEMO_TITLES)
    out = []
    for name in names:
        path = folder / f"{name}.toml"
        try:
            spec = load_fault_file(path)
        except ValueError:
            continue
        first = next((ln.lstrip("# ").strip() for ln in path.read_text().splitlines()
                      if ln.startswith("#")), "")
        faults = spec.get("fault", [])
        pol = spec.get("policy", {})
        out.append({"name": name, "title": DEMO_TITLES.get(name, name.replace("-", " ")),
                    "description": spec.get("description") or first,
                    "scenario": spec.get("scenario", "default"), "seed": spec.get("seed", 0),
                    "duration_s": spec.get("duration_s"), "at_s": sorted({f["at_s"] for f in faults}),
                    "kinds": sorted({f.get("kind", "") for f in faults}), "policy": pol})
    return tuple(out)


def demo_name(path: str | None) -> str | None:
    return Path(path).stem if path else None


# ---- chart marks -------------------------------------------------------------------------------------

def state(r: dict, now: float) -> str:
    if r.get("active"):
        if r.get("recover_s") is not None:        # service back, the part itself still under repair
            return "served again · part in repair"
        return "active · detected" if r.get("detect_s") is not None else "active"
    if r.get("recover_s") is not None:
        return "recovered"
    return "scheduled" if r.get("at_s", 0) > now - 1e-9 else "starting"


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


MARK_LABELS = 6            # strike lines labelled on a chart (the newest); more would overprint


def _band(x0: float, x1: float) -> dict:
    return {"type": "rect", "xref": "x", "yref": "paper", "x0": round(x0, 1), "x1": round(x1, 1), "y0": 0, "y1": 1,
            "fillcolor": theme.RED, "opacity": 0.13, "line": {"width": 0}, "layer": "below"}


def _vline(x: float, colour: str, width: float, dash: str | None = None) -> dict:
    line = {"color": colour, "width": width}
    if dash:
        line["dash"] = dash
    return {"type": "line", "xref": "x", "yref": "paper", "x0": round(x, 1), "x1": round(x, 1), "y0": 0, "y1": 1,
            "line": line}


def marks(reports, now: float, t_from: float | None = None) -> tuple[list, list]:
    """(shapes, annotations) for a KPI chart: red bands where any fault lasted (overlapping faults
    merged into one band), a solid line where each struck, a dashed yellow line where it was
    detected, and a label on the newest MARK_LABELS strikes. Only what overlaps the visible window
    (from `t_from` to now) is drawn: with hundreds of faults the marks stay a few KB."""
    spans, strikes, detects = [], [], []
    lo = -math.inf if t_from is None else t_from
    for r in reports or ():
        at = _num(r.get("at_s"))
        if at is None or at > now + 1e-9 or (not r.get("active") and r.get("recover_s") is None):
            continue
        rec = _num(r.get("recover_s"))
        end = at + rec if rec is not None else now
        if end < lo:
            continue
        spans.append((max(at, lo), end))
        if at >= lo:
            strikes.append((at, r.get("id"), r.get("kind")))
        det = _num(r.get("detect_s"))
        if det is not None and lo <= at + det <= now + 1e-9:
            detects.append(at + det)
    bands: list[list[float]] = []
    for x0, x1 in sorted(spans):
        if bands and x0 <= bands[-1][1]:
            bands[-1][1] = max(bands[-1][1], x1)
        else:
            bands.append([x0, x1])
    shapes = [_band(x0, x1) for x0, x1 in bands]
    shapes += [_vline(at, theme.RED, 1.5) for at, _, _ in strikes]
    shapes += [_vline(x, theme.YELLOW, 1.2, "dash") for x in sorted(set(round(x, 1) for x in detects))]
    newest = sorted(strikes, key=lambda s: -int(s[1] or 0))[:MARK_LABELS]
    notes = [{"x": round(at, 1), "y": 1, "xref": "x", "yref": "paper", "yanchor": "top", "xanchor": "left",
              "showarrow": False, "text": f"#{i} {k}", "font": {"size": 10, "color": theme.RED}}
             for at, i, k in sorted(newest)]
    return shapes, notes


# ---- the fault table --------------------------------------------------------------------------------

def _mean(hist: dict, key: str, t0: float, t1: float) -> float | None:
    ts, vs = hist.get("t") or [], hist.get(key) or []
    vals = [v for t, v in zip(ts, vs) if t0 < t <= t1 + 1e-9 and _num(v) is not None]
    return sum(vals) / len(vals) if vals else None


def rows(reports, hist: dict | None, now: float, interval_s: float = 1.0) -> list[dict]:
    """One dict per fault: the engine's report plus SLO attainment before and during it (from the
    snapshot history, over the same windows the engine uses for goodput) and its state."""
    hist = hist or {}
    out = []
    for r in reports or ():
        at = _num(r.get("at_s")) or 0.0
        rec = _num(r.get("recover_s"))
        started = at <= now + 1e-9 and (r.get("active") or rec is not None)
        end = at + rec if rec is not None else now
        span = max(end - at, interval_s)
        row = {k: r.get(k) for k in ("id", "kind", "target", "at_s", "detect_s", "recover_s", "requests_affected",
                                     "requeued", "recomputed", "lost", "goodput_before", "goodput_during",
                                     "active", "note")}
        for k in ("goodput_before", "goodput_during"):
            row[k] = _num(row[k])
        row["slo_before"] = _mean(hist, "slo_attainment", at - span, at) if started else None
        row["slo_during"] = _mean(hist, "slo_attainment", at, end) if started else None
        row["state"] = state(r, now)
        out.append(row)
    return out


def _secs(v, pending: str = "…") -> str:
    f = _num(v)
    return pending if f is None else f"{f:,.1f} s"


def _change(before, during, fmt, unit: str = "") -> html.Td:
    """A "before → during (±x %)" cell, red when the value fell by more than 5 %."""
    if before is None and during is None:
        return html.Td("–", className="muted")
    delta = (during - before) / before if before and during is not None else None
    cls = "chg-bad" if delta is not None and delta < -0.05 else ""
    return html.Td(f"{fmt(before)} → {fmt(during)}{unit}" + (f" ({delta * 100:+.0f} %)" if delta is not None else ""),
                   className=cls or None)


def _pct(v) -> str:
    return "–" if v is None else f"{v * 100:.1f}"


HEAD = (("#", "", "fault number"), ("fault", "", "fault kind"), ("target", "", "the part that failed"),
        ("struck at", "num", "sim time the fault started"),
        ("time to detect", "num", "seconds from the fault to its detection (policy detect time)"),
        ("time to recover", "num", "seconds from the fault until service recovered"),
        ("requests affected", "num", "requests in flight on the parts the fault touched"),
        ("requeued", "num", "requests sent back through the scheduler"),
        ("recomputed", "num", "requeued requests whose generated tokens had to be recomputed"),
        ("lost", "num", "requests dropped: must always be 0"),
        ("goodput before → during (tok/s)", "num", "SLO-meeting output tokens/s before the fault vs during it"),
        ("SLO attainment before → during (%)", "num", "share of completions meeting TTFT and TPOT SLOs"),
        ("state", "", ""))


def _cells(r: dict) -> list:
    """One row's cells, as plain strings where possible (the table is resent each tick while
    faults last, so every component counts); column alignment comes from the stylesheet."""
    lost = int(r.get("lost") or 0)
    started = r["state"] not in ("scheduled", "starting")
    det = r.get("detect_s")
    det_txt = _secs(det) if det is not None else (
        "not needed" if r.get("recover_s") is not None else "…" if started else "–")
    st = r["state"] + (f" at t={r['at_s']:,.1f} s" if r["state"] == "scheduled" else "")
    kind_cls = {"served": "recovered"}.get(r["state"].split(" ")[0], r["state"].split(" ")[0])
    dash = "–"
    return [
        html.Td(f"#{r['id']}"),
        html.Td(KIND_LABEL.get(r["kind"], r["kind"])),
        html.Td(r["target"], className="code"),
        html.Td(f"{r['at_s']:,.1f} s"),
        html.Td(det_txt),
        html.Td(_secs(r.get("recover_s")) if started else dash),
        html.Td(C.fmt(r.get("requests_affected")) if started else dash),
        html.Td(C.fmt(r.get("requeued")) if started else dash),
        html.Td(C.fmt(r.get("recomputed")) if started else dash),
        html.Td(str(lost), className="lost-ok" if lost == 0 else "lost-bad"),
        _change(r.get("goodput_before"), r.get("goodput_during"), C.fmt) if started else html.Td(dash),
        _change(r.get("slo_before"), r.get("slo_during"), _pct) if started else html.Td(dash),
        html.Td([st, html.Div(r["note"], className="muted small")] if r.get("note") else st,
                className=f"fstate fstate-{kind_cls}"),
    ]


def table(rows_: list[dict], now: float, summary: dict | None = None) -> html.Div:
    """The newest faults, newest first, under a line counting all of them (`fault_summary`)."""
    if not rows_:
        return html.Div("No faults yet. Pick a part and a fault above and inject it, or load a demo.",
                        className="hint")
    n = int((summary or {}).get("injected") or 0)
    count = (f"{n:,} faults, newest {len(rows_)} shown" if n > len(rows_)
             else f"{len(rows_)} fault" + ("s" if len(rows_) != 1 else ""))
    active = (summary or {}).get("active")
    if active:
        count += f" · {active} active"
    body = [html.Tr(_cells(r)) for r in sorted(rows_, key=lambda x: -int(x.get("id") or 0))]
    head = html.Thead(html.Tr([html.Th(h, className=c, title=t) for h, c, t in HEAD]))
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


def failed_list(system: str, failed, reports) -> list:
    groups = failed_groups(failed, reports)
    if not groups:
        return [html.Span("Nothing has failed: every part is up.", className="hint")]
    items = []
    for gid, n in groups[:40]:
        el = element_kind(system, gid)
        label = ELEMENT_LABEL.get(el, el or "element")
        items.append(html.Li([html.Code(gid), html.Span(f" {label}" + (f" · {n} elements down" if n > 1 else ""),
                                                        className="muted")], className="failed-item"))
    if len(groups) > 40:
        items.append(html.Li(f"… and {len(groups) - 40} more", className="muted"))
    return [html.Ul(items, className="failed-list")]


TIMELINE_KINDS = ("fault", "detect", "recover", "partition", "error", "policy")


def timeline(events, n: int = 14) -> list:
    evs = [e for e in events or () if e.get("kind") in TIMELINE_KINDS][-n:][::-1]
    if not evs:
        return [html.Div("No fault events yet.", className="muted")]
    return [html.Div([html.Span(f"t={e.get('t', 0):,.1f} s", className="ev-t"),
                      html.Span(e.get("kind", ""), className=f"ev-kind ev-{e.get('kind', '')}"),
                      html.Span(e.get("message", ""), className="ev-msg")], className="ev")
            for e in evs]


def policy_text(policy: dict) -> str:
    if not policy:
        return "Policy: the engine's defaults."
    bits = [f"detect {policy.get('detect_s', 0):g} s",
            "redundant experts " + ("on" if policy.get("redundant_experts") else "off"),
            f"weights from {str(policy.get('weights_from', 'ems')).upper()}"]
    return "In force: " + ", ".join(bits) + "."


def mean_gap_s(system: str, hours_per_sim_s: float) -> float | None:
    """Mean sim seconds between random failures at this failure-clock rate (catalog MTBFs)."""
    from twin.engine.faults import defaults, random_classes
    try:
        mtbf = defaults()["mtbf_hours"]
    except (KeyError, OSError):
        return None
    counts = {k: len(v) for k, v in random_classes(_topo(system)).items()}
    rate_per_h = sum(n / mtbf[k] for k, n in counts.items() if n and k in mtbf)
    if rate_per_h <= 0 or not hours_per_sim_s:
        return None
    return 1.0 / (rate_per_h * hours_per_sim_s)


def random_text(system: str, random_h: float | None) -> str:
    if random_h is None:
        return "Random failures: off."
    gap = mean_gap_s(system, random_h)
    return (f"Random failures: on, {random_h:g} failure-clock hours per sim second"
            + (f" (about one failure every {gap:,.0f} sim s)" if gap else "") + ".")



# ---- the picker drawing ----------------------------------------------------------------------------

def stylesheet() -> list[dict]:
    """The topology stylesheet with utilisation drawn neutral, so that red only ever means failed:
    wholly failed parts dark red and dashed, parts with a failed component outlined red (npart)."""
    base = theme.UTIL_STOPS[0]
    css = [r for r in _topo_css() if r["selector"] not in _LAST]
    for i in range(1, len(theme.UTIL_STOPS)):
        css.append({"selector": f"node.u{i}", "style": {"background-color": base}})
        css.append({"selector": f"edge.u{i}", "style": {"line-color": "#4a5d78", "opacity": 0.6}})
    css.append({"selector": "node.npart", "style": {"border-color": "#ff4d4f", "border-style": "dashed",
                                                    "border-width": 3}})
    css += [r for r in _topo_css() if r["selector"] in _LAST]
    css.append({"selector": "node.down", "style": {"background-color": "#a61e22"}})
    return css


_LAST = ("edge.part", "edge.down", "node.down", ":selected", "node:active")


def _topo_css() -> list[dict]:
    from .topoview import stylesheet as topo_stylesheet
    return topo_stylesheet()


def partial_nodes(v, failed) -> list[int]:
    """View nodes (indices) with some but not all of their parts failed (e.g. a node with a dead die)."""
    dead = set(failed or ())
    if not dead:
        return []
    out = []
    for i, vid in enumerate(v.node_ids):
        mem = v.members.get(vid) or [vid]
        n = sum(1 for m in mem if m in dead)
        if 0 < n < len(mem):
            out.append(i)
    return out
