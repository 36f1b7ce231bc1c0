"""Fault console helpers for the Failures page: which parts a fault kind can break, picking a part
from the topology drawing, fault marks on the KPI charts, the per-fault table and the demos.

Everything here reads snapshots: the failure-free topology a snapshot carries
(`Snapshot.system.topology`, a `StaticTopology`) and plain dicts and lists; nothing touches a
running engine or builds a topology. A fault is validated once, by `Twin.send` (twin.live.controls).
The fault table, chart marks and demos live in `twin.ui.faulttable`.
"""
from __future__ import annotations

import json
import math
import zlib
from functools import lru_cache
from pathlib import Path

from twin.model.config import CATALOG_DIR
from twin.engine.faults import KINDS, describe, load_fault_file
from twin.engine.faults.kinds import parts, picked
from twin.engine.faults.spec import PART_LABEL, part_label
from twin.topology import (StaticTopology, UnknownElementError, l1_id, l2_id, link_id, node_label, npu_id,
                           parse, rdma_nic_id, subplane_id, vpc_nic_id, cpu_id, die_id)

from twin.ui.lang import N_, _, request_lang


ELEMENT_LABEL = PART_LABEL
SUGGESTIONS = 200          # at most this many ids in the target's suggestion list

# demo files (twin/catalog/faults/*.toml) in presentation order, with their titles
DEMO_TITLES = {
    "optical-flap": N_("Optical link flapping at peak load"),
    "l2-loss": N_("L2 switch lost"),
    "decode-die-redundant": N_("Decode die lost, redundant experts"),
    "decode-die-no-redundancy": N_("Decode die lost, no redundancy"),
    "ems-node-loss": N_("EMS node lost"),
    "node-power-loss": N_("Node power loss"),
    "one-slow-die": N_("One slow die in 320"),
}


def kind_options() -> list[dict]:
    """The fault kinds as the dropdown lists them, in the registry's order (fail-stops, then gray)."""
    return [{"label": f"{_(k.label)} ({k.name})", "value": k.name} for k in KINDS.values()]


def kind_label(name: str) -> str:
    """A fault kind in the viewer's words ("L2 UB switch lost"); an unknown name as it is."""
    return _(KINDS[name].label) if name in KINDS else name


def example(name) -> str:
    return KINDS[name].example if name in KINDS else ""


def extra_field(name):
    """The kind's own input on the console (factor or period_s; the first it declares), or None."""
    k = KINDS.get(name) if isinstance(name, str) else None
    return k.fields[0] if k and k.fields else None


def crc(obj) -> int:
    """A cheap, stable signature of JSON-like data (to send a part only when it changed)."""
    return zlib.crc32(json.dumps(obj, sort_keys=True, default=str).encode())


# ---- targets -------------------------------------------------------------------------------------

def element_kind(t: StaticTopology, target: str | None) -> str | None:
    """The topology kind of an id ("die", "l2", "link:l1-l2", ...), or None if no such element."""
    if not target or not isinstance(target, str):
        return None
    try:
        canonical = t.validate_target(target.strip())
        if "--" in canonical:
            return "link:" + t.link_arrays().ends[t.edge(canonical)][3]
        return parse(canonical)["kind"]
    except (UnknownElementError, ValueError, KeyError):
        return None


def canonical(t: StaticTopology, target: str) -> str:
    try:
        return t.validate_target(target.strip())
    except (UnknownElementError, ValueError, KeyError):
        return target


def fits(t: StaticTopology, kind: str, target: str | None) -> bool:
    return kind in KINDS and element_kind(t, target) in KINDS[kind].targets


def id_kind(target: str) -> str | None:
    """The element kind an id names by its form alone ("n20" a node, "n20/l1-3--sp3/l2-7" an optical
    L1-L2 link), for the page's layout, drawn before the viewer's system is known."""
    try:
        p = parse(target.strip())
    except (UnknownElementError, ValueError):
        return None
    if p["kind"] == "link":
        ends = sorted(parse(e)["kind"] for e in (p["u"], p["v"]))
        return "link:l1-l2" if ends == ["l1", "l2"] else None
    return p["kind"]


def pick(t: StaticTopology | None, target: str, current: str | None = None) -> tuple[str, str] | None:
    """(fault kind, target) for a clicked or linked part: the current kind if it applies, else the
    part's natural kind; None if the part cannot be broken (a rack, the VPC switch, storage). With
    no topology (`t` None) the part is read from its id's form, unchecked."""
    el = element_kind(t, target) if t is not None else id_kind(target)
    if el is None:
        return None
    target = canonical(t, target) if t is not None else target.strip()
    if current in KINDS and el in KINDS[current].targets:
        return current, target
    if current in KINDS and el == "die" and "npu" in KINDS[current].targets:
        return current, target.rsplit("/", 1)[0]
    kind = picked(el)
    return (kind, target) if kind else None


def related(t: StaticTopology, kind: str, target: str | None) -> str:
    """A target for `kind` close to the current one (die -> its NPU, part of a node -> the node,
    an L2 -> its sub-plane, ...), else the kind's example."""
    if kind not in KINDS:
        return ""
    if fits(t, kind, target):
        return canonical(t, target)
    try:
        p = parse(canonical(t, target or ""))
    except (UnknownElementError, ValueError):
        p = {}
    if p.get("kind") == "link":          # an optical link: think of its L1 end
        try:
            p = parse(p["u"] if p["u"].startswith("n") else p["v"])
        except (UnknownElementError, ValueError):
            p = {}
    node, sp = p.get("node"), p.get("subplane")
    near = {}                                     # element kind -> the part of that kind nearest the target
    if node is not None:
        npu = p.get("npu", 0)
        near = {"die": die_id(node, npu, p.get("die", 0)), "npu": npu_id(node, npu), "cpu": cpu_id(node, 0),
                "node": node_label(node), "l1": l1_id(node, sp or 0), "rdma_nic": rdma_nic_id(node, npu),
                "vpc_nic": vpc_nic_id(node), "link:l1-l2": link_id(l1_id(node, sp or 0), l2_id(sp or 0, 0))}
        if sp is not None:
            near["subplane"] = subplane_id(sp)
    elif sp is not None:
        near = {"subplane": subplane_id(sp), "l2": l2_id(sp, p.get("index", 0))}
    for g in (near[el] for el in KINDS[kind].targets if el in near):
        if fits(t, kind, g):
            return canonical(t, g)
    return example(kind)


@lru_cache(maxsize=64)
def ids_for(t: StaticTopology, kind: str) -> tuple[str, ...]:
    """Every valid target of a fault kind on a system, in topology order."""
    return tuple(parts(t, kind)) if kind in KINDS else ()


def suggest(t: StaticTopology, kind: str, text: str | None, limit: int = SUGGESTIONS) -> list[str]:
    """Valid ids of `kind` containing `text` (ids starting with it first), at most `limit`."""
    ids = ids_for(t, kind)
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


def element_label(t: StaticTopology, el: str | None, **form) -> str:
    """What a part is called on this system (a die of a one-die package is a GPU); `form`:
    part_label's article= or plural=."""
    if el in ("die", "npu") and t.dies_per_package() == 1:
        el = "GPU"
    if request_lang() != "en":            # no articles or plurals to make: the part's name, translated
        return _(PART_LABEL.get(el or "element", el or "element"))
    return part_label(el or "element", **form)



def fault_message(spec: dict) -> str:
    """What the console says after a fault was accepted (in the viewer's language)."""
    what = f"{kind_label(spec['kind'])}: {spec['target']}"
    when = (_("scheduled at t = %(t)s s") % {"t": f"{spec['at_s']:,.1f}"} if "at_s" in spec else _("injected now"))
    dur = " " + _("for %(s)s s") % {"s": f"{spec['duration_s']:g}"} if "duration_s" in spec else ""
    return f"{what} {when}{dur}; " + _("watch the table below")


def demo_message(title: str, msg: str) -> str:
    return _("Demo \u201c%(title)s\u201d loaded (%(msg)s)") % {"title": _(title), "msg": msg}


def target_hint(t: StaticTopology, kind: str, target: str | None) -> str:
    """How many parts the kind can break, an example, and what is wrong with the target typed."""
    if element_kind(t, target) and pick(t, target) is None:      # a rack, the VPC switch, storage
        return _("%(target)s cannot be broken: pick a node, die, CPU, switch, NIC or optical link") % {
            "target": repr(target)}
    ids = ids_for(t, kind)
    n = len(ids)
    what = _(" or ").join(element_label(t, e, plural=True) for e in (KINDS[kind].targets if kind in KINDS else ()))
    ex = example(kind) if example(kind) in ids else (ids[0] if ids else "")
    if not n:
        return _("This system has no %(what)s: pick another fault kind.") % {"what": what}
    state = ""
    if target and not fits(t, kind, target):
        el = element_kind(t, target)
        state = " · " + (_("%(target)s is %(what)s, not one of these") % {
            "target": repr(target), "what": element_label(t, el, article=True)} if el
            else _("%(target)s is not an element of this system") % {"target": repr(target)})
    return _("%(n)s %(what)s (e.g. %(ex)s); type to filter, or click a part on the drawing") % {
        "n": f"{n:,}", "what": what, "ex": ex} + state


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
        faults = spec.get("fault", [])
        pol = spec.get("policy", {})
        out.append({"name": name, "title": DEMO_TITLES.get(name, name.replace("-", " ")),
                    "description": describe(path, spec),
                    "scenario": spec.get("scenario", "default"), "seed": spec.get("seed", 0),
                    "duration_s": spec.get("duration_s"), "at_s": sorted({f["at_s"] for f in faults}),
                    "kinds": sorted({f.get("kind", "") for f in faults}), "policy": pol})
    return tuple(out)


def demo_name(path: str | None) -> str | None:
    return Path(path).stem if path else None
