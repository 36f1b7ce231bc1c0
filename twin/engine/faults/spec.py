"""What a fault is: the recovery policy, the record of one fault, and the one validation of a fault spec (`check_shape`; `check_spec` adds its time) and of the random-failure
setting (`check_random`)."""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field

import numpy as np

from twin.model.config import CATALOG_DIR, CatalogError
from twin.i18n import N_
from twin.engine.ems.pool import ModelCache
from twin.engine.faults.rows import RISE
from twin.topology import TopologyError, parse
from twin.workload import brief
from twin.engine.accounting import BEFORE_S, fault_windows, mean_in, rise_in
from twin.engine.faults.aftermath import MARGIN, Aftermath
from twin.engine.faults.kinds import KINDS, fault_keys, kind as kind_of

# what each part kind is called in messages (the dashboard's labels too: twin.ui.faultview)
PART_LABEL = {"die": N_("NPU die"), "npu": N_("NPU"), "cpu": N_("Kunpeng CPU"), "node": N_("node"),
              "link:l1-l2": N_("optical L1-L2 link"), "l1": N_("L1 UB switch"), "l2": N_("L2 UB switch"),
              "subplane": N_("UB sub-plane"), "rdma_nic": N_("RDMA NIC"), "rdma_switch": N_("RDMA switch"),
              "vpc_nic": N_("VPC card"), "vpc_switch": N_("VPC switch"), "storage": N_("object storage"),
              "rack": N_("rack"), "comm_rack": N_("communication rack"), "nvswitch": N_("NVSwitch")}


def part_label(kind: str, *, article: bool = False, plural: bool = False) -> str:
    """A part kind in words: "an L2 UB switch", "L2 UB switches", "a die-l1 link"."""
    name = PART_LABEL.get(kind) or (kind[5:] + " link" if kind.startswith("link:") else kind)
    if plural:
        return name + ("es" if name.endswith(("s", "sh", "ch", "x")) else "s")
    if article:       # by sound: "an NPU", "an L2", "an optical"
        return ("an " if name[0] in "aeiouAEFHILMNORSX" else "a ") + name
    return name


# what a policy may do about a part the detector found slow (twin.engine.faults.gray)
GRAY_ACTIONS = ("reroute", "shrink", "replace", "none")
MAX_RECORDS = 200  # closed faults kept with full, frozen reports (assumption: a long demo's worth)
MEASURES = ("goodput", "goodput_tps"), ("slo", "slo_attainment")   # report key, history series


def defaults() -> dict:
    return tomllib.loads((CATALOG_DIR / "faults.toml").read_text())


@dataclass
class Policy:
    detect_s: float = 60.0
    reroute_s: float = 2.0
    retransmit_us: float = 200.0
    network_repair_s: float = 480.0
    hardware_repair_s: float = 540.0
    redundant_experts: bool = True
    weights_from: str = "ems"
    expert_reload_s: float = 1.0
    mitigate_gray: bool = True       # act on a gray fault once the detector notices it
    gray_action: str = "reroute"     # GRAY_ACTIONS
    gray_threshold: float = 1.15     # a die's step time over its group's median that counts as slow
    gray_window_s: float = 10.0      # ... for this long, without a break, before it is flagged

    @classmethod
    def load(cls, **overrides) -> "Policy":
        values = {**defaults()["policy"], **overrides}
        unknown = set(values) - set(cls.__dataclass_fields__)
        if unknown:
            raise CatalogError(f"policy: unknown field(s) {', '.join(sorted(unknown))} "
                               f"(allowed: {', '.join(cls.__dataclass_fields__)})")
        p = cls(**values)
        for name in ("detect_s", "reroute_s", "retransmit_us", "network_repair_s",
                     "hardware_repair_s", "expert_reload_s"):
            v = getattr(p, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v <= 86400:
                raise CatalogError(f"policy.{name} = {v!r}: allowed a number of seconds 0..86400")
        if p.weights_from not in ("ems", "obs"):
            raise CatalogError(f"policy.weights_from = {p.weights_from!r}: allowed 'ems' or 'obs'")
        for name in ("redundant_experts", "mitigate_gray"):
            if not isinstance(getattr(p, name), bool):
                raise CatalogError(f"policy.{name} = {getattr(p, name)!r}: allowed true or false")
        if p.gray_action not in GRAY_ACTIONS:
            raise CatalogError(f"policy.gray_action = {p.gray_action!r}: allowed {', '.join(map(repr, GRAY_ACTIONS))}")
        t = p.gray_threshold
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not 1.0 < t <= 10.0:
            raise CatalogError(f"policy.gray_threshold = {t!r}: allowed a ratio to the group's median, 1 < x <= 10")
        w = p.gray_window_s
        if not isinstance(w, (int, float)) or isinstance(w, bool) or not 0 < w <= 3600:
            raise CatalogError(f"policy.gray_window_s = {w!r}: allowed a number of seconds 0 < x <= 3600")
        return p

    def restart_s(self) -> float:
        """Instance restart: load the weights (ref 3 model caching via twin.engine.ems.pool.ModelCache)."""
        return ModelCache().load_time_s(self.weights_from)


@dataclass
class Fault:
    id: int
    kind: str
    target: str
    at_s: float
    duration_s: float | None = None
    fields: dict = field(default_factory=dict)    # the kind's own numbers (factor, period_s), defaults filled in
    detect_s: float | None = None
    recover_s: float | None = None
    served_s: float | None = None     # seconds until traffic flowed steadily again (rerouted, isolated)
    rerouted: bool = False
    active: bool = False
    affected: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    requeued: int = 0
    recomputed: int = 0
    nodes: tuple = ()
    note: str = ""
    frozen: dict = field(default_factory=dict)   # before / during / after numbers once measured for good
    settled: bool = False   # the "after" window has passed and was frozen: with the fault over, its report is final
    detected_by: str | None = None    # "telemetry" (the detector) or "policy" (after Policy.detect_s)
    mitigated_s: float | None = None  # gray: seconds from onset until a mitigation took effect
    mitigation: str = ""              # gray: what was done about it (words)
    aftermath: Aftermath | None = None   # from the strike: service back and the incident's series

    @property
    def factor(self) -> float:
        return self.fields["factor"]

    @property
    def period_s(self) -> float:
        return self.fields["period_s"]

    def report(self, now: float, interval_s: float, lost_ids: np.ndarray, history: dict,
               next_at: float | None = None) -> dict:
        """One row of the fault table; `lost_ids` from the engine's lifecycle audit, `history` the
        metrics history as arrays ("t", "goodput_tps", "slo_attainment"). Goodput and SLO
        attainment are averaged over the same windows (`accounting.fault_windows`), cut at
        `next_at`, when the next fault struck."""
        lost = int(np.isin(self.affected, lost_ids).sum()) if len(lost_ids) else 0
        end = self.at_s + (self.recover_s if self.recover_s is not None else max(now - self.at_s, 0))
        before, during = fault_windows(self.at_s, end, interval_s, next_at)
        after = (end, end + (before[1] - before[0]))          # as long as "before", from restoration
        t = history["t"]
        out = {"id": self.id, "target": self.target, "kind": self.kind, "at_s": self.at_s,
               "detect_s": self.detect_s, "recover_s": self.recover_s,
               "served_s": self.served_s if self.served_s is not None else self.recover_s,
               "requests_affected": len(self.affected), "requeued": self.requeued,
               "recomputed": self.recomputed, "lost": lost, "detected_by": self.detected_by,
               "mitigated_s": self.mitigated_s, "mitigation": self.mitigation}
        for key, series in MEASURES:
            for name, window in (("before", before), ("during", during), ("after", after)):
                out[f"{key}_{name}"] = mean_in(t, history[series], window) if window[1] <= now + 1e-9 else None
        am = self.aftermath
        if am is not None:
            back = am.back_at
            out.update(back_s=None if back is None else round(back - self.at_s, 3), back_margin=MARGIN,
                       slo_reference=am.reference, window_s=am.window())
            if self.recover_s is not None and (back is None and am.waiting() and now > after[1] + 1e-9
                                               or back is not None and back > after[1] + 1e-9):
                out.update(am.after())       # "after" runs to service back: summed as it closed
        # the run's trend, whatever the fault's length: over the whole minute before it
        out[RISE] = (rise_in(t, history["goodput_tps"], (max(self.at_s - BEFORE_S, 0.0), self.at_s))
                     if self.at_s <= now + 1e-9 and RISE not in self.frozen else None)   # frozen: kept below
        return {**out, **self.frozen, "active": self.active, "note": self.note,
                "final": self.settled and not self.active}     # over, "after" frozen: the report is settled

    def freeze(self, report: dict) -> None:
        """Keep the before / during / after numbers of `report` measured so far, for good: the
        metrics history is a rolling window, and a fault's report must outlive it."""
        for k in (*(f"{key}_{name}" for key, _series in MEASURES for name in ("before", "during", "after")), RISE):
            if report.get(k) is not None:
                self.frozen.setdefault(k, report[k])


def check_spec(spec: dict, topo, now: float, fault_id: int = 1) -> Fault:
    """Validate a fault against a topology at sim time `now` (fault files, random failures, the
    headless engine): its shape (`check_shape`) then its time (`make_fault`). Returns the Fault
    (canonical target id) or raises ValueError naming the field and what is allowed."""
    return make_fault(check_shape(spec, topo), now, fault_id)


def check_shape(spec: dict, topo) -> dict:
    """The one validation of what a fault is, against a topology of the system (healthy or live:
    only ids and part kinds are read): kind, target, numbers in range, no unknown field. Returns the
    canonical spec (canonical target id, the fields given, as floats; the kind's own fields from its declaration,
    `twin.engine.faults.kinds`); what depends on the moment
    (is at_s past? is the part already down?) is the engine's, when the fault lands."""
    if not isinstance(spec, dict):
        raise ValueError(f"fault = {brief(spec)}: allowed a table of {', '.join(fault_keys())}")
    spec = dict(spec)
    name = spec.pop("kind", None)
    if not isinstance(name, str) or name not in KINDS:       # the fault-file loader's message
        raise ValueError(f"fault kind = {brief(name)}: allowed {', '.join(KINDS)}")
    k = kind_of(name)
    target = spec.pop("target", None)
    if not isinstance(target, str) or not target:
        raise ValueError(f"fault target = {brief(target)}: required, e.g. {k.example!r}")
    try:
        canonical = topo.validate_target(target)
    except (TopologyError, KeyError) as exc:
        raise ValueError(f"fault target = {target!r}: {exc}") from None
    what = "link:" + _link_kind(topo, canonical) if "--" in canonical else parse(canonical)["kind"]
    if what not in k.targets:
        wanted = " or ".join(part_label(x, article=True) for x in k.targets)
        raise ValueError(f"fault target = {target!r} is {part_label(what, article=True)}; fault kind {name} "
                         f"{'breaks' if k.stops else 'slows'} {wanted} (e.g. {k.example!r})")
    out = {"kind": name, "target": canonical}
    for key, lo, hi, allowed in (("at_s", -math.inf, math.inf, "a finite time in seconds"),
                                 ("duration_s", 1e-9, 30 * 86400, "0 < duration_s <= 2,592,000 s")):
        value = spec.pop(key, None)
        if value is not None:
            out[key] = _number(value, key, None, lo, hi, allowed)
    for f in k.fields:
        value = spec.pop(f.name, None)
        if value is not None:
            out[f.name] = f.check(value)
    if spec:
        raise ValueError(f"fault: unknown field(s) {', '.join(spec)} (allowed: {', '.join(k.keys())}, "
                         f"for kind {name})")
    return out


def make_fault(canonical: dict, now: float, fault_id: int) -> Fault:
    """The Fault of a spec `check_shape` returned, at sim time `now` (no at_s: now); ValueError if
    at_s has already passed."""
    at = canonical.get("at_s", now)
    if at < now - 1e-9:
        raise ValueError(f"fault at_s = {at}: in the past (now {now:.3f} s)")
    fields = {f.name: canonical.get(f.name, f.default) for f in kind_of(canonical["kind"]).fields}
    return Fault(fault_id, canonical["kind"], canonical["target"], at, canonical.get("duration_s"), fields=fields)


def _link_kind(topo, link: str) -> str:
    return topo.link_arrays().ends[topo.edge(link)][3]


def _number(value, name: str, default, lo: float, hi: float, allowed: str) -> float:
    """A finite number within [lo, hi], or a ValueError naming the field and its range."""
    if value is None and default is not None:
        return float(default)
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"fault {name} = {value!r}: not a number (allowed: {allowed})") from None
    if not math.isfinite(x) or not lo <= x <= hi:
        raise ValueError(f"fault {name} = {value!r}: allowed {allowed}")
    return x


# assumption: at most 10 failure-clock hours per sim second. The catalog's MTBFs give the supernode
# one failure per ~74 h (random_classes), so this is one per ~7.4 sim s, and with repairs of ~10 min
# (ref 6) about 80 faults open at once: faults stay distinct events and their processes stay bounded.
RANDOM_MAX = 10.0


def check_random(spec) -> dict:
    if not isinstance(spec, dict) or set(spec) - {"hours_per_sim_s", "gray"}:
        raise CatalogError(f"random = {str(spec)[:60]}: allowed a table {{hours_per_sim_s = <number>, "
                           f"gray = <true or false>}}")
    h = spec.get("hours_per_sim_s", 1.0)
    if isinstance(h, bool) or not isinstance(h, (int, float)) or not 0 <= h <= RANDOM_MAX:
        raise CatalogError(f"random.hours_per_sim_s = {str(h)[:40]}: allowed a number 0 <= x <= {RANDOM_MAX:g} "
                           f"(failure-clock hours per simulated second; 0 = off)")
    gray = spec.get("gray", False)
    if not isinstance(gray, bool):
        raise CatalogError(f"random.gray = {str(gray)[:40]}: allowed true (gray failures too, at the catalog's "
                           f"[gray] rates) or false")
    return {"hours_per_sim_s": float(h), "gray": gray}
