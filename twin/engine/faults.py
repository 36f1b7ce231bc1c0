"""Fault injection and recovery: break any part during a run; consequences follow from the model.

A fault changes the topology (links and switches lose capacity, dies and CPUs die); the engine
recomputes each instance's network state, so the perf model sees slower dispatch, combine and KV
transfers. Compute faults hang the instances that use the part until detection; recovery then
remaps a redundant expert or restarts the instance, requeueing its requests (prompt KV comes
back from EMS where cached, the rest is recomputed). Nothing is ever dropped, and each report's
`lost` comes from the engine's lifecycle audit. The record keeps every open fault and the last
MAX_RECORDS closed ones; older ones fold into per-kind aggregates (`FaultManager.totals`).
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..config import CATALOG_DIR, CatalogError
from ..ems import ModelCache
from ..topology import TopologyError, parse
from ..workload import brief, read_regular_file

if TYPE_CHECKING:
    from .core import Engine

# kind -> element kinds it may target ("link:l1-l2" = an optical L1-L2 link)
KINDS = {
    "npu_die": ("die",), "npu": ("npu",), "cpu": ("cpu",), "node": ("node",),
    "optical_link": ("link:l1-l2",), "optical_degrade": ("link:l1-l2",),
    "optical_flap": ("link:l1-l2",), "l1": ("l1",), "l2": ("l2",), "subplane": ("subplane",),
    "rdma_nic": ("rdma_nic",), "rdma_plane": ("rdma_switch",), "vpc": ("vpc_nic",),
}
NETWORK = {"optical_link", "optical_degrade", "optical_flap", "l1", "l2", "subplane", "rdma_nic",
           "rdma_plane", "vpc"}
UB_KINDS = {"optical_link", "optical_flap", "l1", "l2", "subplane"}
EXAMPLES = {"npu_die": "n20/npu3/d1", "npu": "n20/npu3", "cpu": "n05/cpu2", "node": "n20",
            "optical_link": "n20/l1-3--sp3/l2-7", "optical_degrade": "n20/l1-3--sp3/l2-7",
            "optical_flap": "n20/l1-3--sp3/l2-7", "l1": "n20/l1-3", "l2": "sp2/l2-5",
            "subplane": "sp4", "rdma_nic": "n20/rdma3", "rdma_plane": "rdma/spine-0", "vpc": "n20/vpc"}


BEFORE_S = 60.0   # "before" = the minute before the fault (or the fault's length, if shorter)
MAX_RECORDS = 100  # closed faults kept with full records (assumption: a screenful of history)


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
        if not isinstance(p.redundant_experts, bool):
            raise CatalogError(f"policy.redundant_experts = {p.redundant_experts!r}: allowed true or false")
        return p

    def restart_s(self) -> float:
        """Instance restart: load the weights (ref 3 model caching via twin.ems.ModelCache)."""
        return ModelCache().load_time_s(self.weights_from)


@dataclass
class Fault:
    id: int
    kind: str
    target: str
    at_s: float
    duration_s: float | None = None
    factor: float = 0.5
    period_s: float = 10.0
    detect_s: float | None = None
    recover_s: float | None = None
    rerouted: bool = False
    active: bool = False
    affected: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    requeued: int = 0
    recomputed: int = 0
    nodes: tuple = ()
    note: str = ""

    def report(self, eng: "Engine", lost_ids: np.ndarray, t: np.ndarray, goodput: np.ndarray) -> dict:
        """One row of the fault table; `lost_ids` from `Engine.lost_ids()` (the audit), `t` and
        `goodput` the history's interval ends and goodput."""
        lost = int(np.isin(self.affected, lost_ids).sum()) if len(lost_ids) else 0
        end = self.at_s + (self.recover_s if self.recover_s is not None else max(eng.env.now - self.at_s, 0))
        span = max(end - self.at_s, eng.scenario.interval_s)
        return {"id": self.id, "target": self.target, "kind": self.kind, "at_s": self.at_s,
                "detect_s": self.detect_s, "recover_s": self.recover_s,
                "requests_affected": len(self.affected), "requeued": self.requeued,
                "recomputed": self.recomputed, "lost": lost,
                "goodput_before": _mean_in(t, goodput, self.at_s - min(span, BEFORE_S), self.at_s),
                "goodput_during": _mean_in(t, goodput, self.at_s, end),
                "active": self.active, "note": self.note}


def _mean_in(t: np.ndarray, v: np.ndarray, t0: float, t1: float) -> float | None:
    """Mean of v over the intervals ending in (t0, t1], to 2 decimals; None ("not measured", never
    NaN in JSON or a page) when no interval ended in that window."""
    sel = (t > t0) & (t <= t1 + 1e-9)
    return round(float(v[sel].mean()), 2) if sel.any() else None


class FaultManager:
    """Validates, schedules and applies faults for one engine; keeps a record of each."""

    def __init__(self, eng: "Engine", policy: Policy | None = None):
        self.eng = eng
        self.policy = policy or Policy.load()
        self.faults: list[Fault] = []
        self.injected = 0             # faults ever injected (ids are 1..injected)
        self.totals: dict[str, dict] = {}   # kind -> aggregates of faults dropped from `faults`
        self._random_gen = 0          # bumping it stops the running random-failure process

    # ---- validation ------------------------------------------------------------------------
    def check(self, spec: dict) -> Fault:
        eng = self.eng
        if not isinstance(spec, dict):
            raise ValueError(f"fault = {brief(spec)}: allowed a table of {', '.join(_FAULT_KEYS)}")
        spec = dict(spec)
        kind = spec.pop("kind", None)
        if not isinstance(kind, str) or kind not in KINDS:       # the fault-file loader's message
            raise ValueError(f"fault kind = {brief(kind)}: allowed {', '.join(KINDS)}")
        target = spec.pop("target", None)
        if not isinstance(target, str) or not target:
            raise ValueError(f"fault target = {brief(target)}: required, e.g. {EXAMPLES[kind]!r}")
        try:
            canonical = eng.topo.validate_target(target)
        except (TopologyError, KeyError) as exc:
            raise ValueError(f"fault target = {target!r}: {exc}") from None
        what = "link:" + self._link_kind(canonical) if "--" in canonical else parse(canonical)["kind"]
        if what not in KINDS[kind]:
            raise ValueError(f"fault target = {target!r} is a {what.replace('link:', '')} "
                             f"{'link' if what.startswith('link:') else 'element'}; {kind} needs a "
                             f"{' or '.join(KINDS[kind])} (e.g. {EXAMPLES[kind]!r})")
        at = _number(spec.pop("at_s", None), "at_s", eng.env.now, -math.inf, math.inf,
                     "a finite time in seconds")
        if at < eng.env.now - 1e-9:
            raise ValueError(f"fault at_s = {at}: in the past (now {eng.env.now:.3f} s)")
        dur = spec.pop("duration_s", None)
        if dur is not None:
            dur = _number(dur, "duration_s", None, 1e-9, 30 * 86400, "0 < duration_s <= 2,592,000 s")
        factor = _number(spec.pop("factor", None), "factor", 0.5, 0.0, 0.999999,
                         "0 <= factor < 1 (fraction of capacity kept)")
        period = _number(spec.pop("period_s", None), "period_s", 10.0, 0.1, 3600, "0.1 to 3600 s")
        if spec:
            raise ValueError(f"fault: unknown field(s) {', '.join(spec)} (allowed: kind, target, "
                             f"at_s, duration_s, factor, period_s)")
        return Fault(self.injected + 1, kind, canonical, at, dur, factor, period)

    def _link_kind(self, link: str) -> str:
        eid = self.eng.topo.edge(link)
        return self.eng.topo.link_arrays().ends[eid][3]

    # ---- scheduling ----------------------------------------------------------------------------
    def inject(self, spec: dict) -> Fault:
        f = self.check(spec)
        self.injected += 1
        self.faults.append(f)
        self._prune()
        self.eng.env.process(self._run(f))
        when = "now" if f.at_s <= self.eng.env.now + 1e-9 else f"at {f.at_s:g} s"
        self.eng.log("fault", f"#{f.id} {f.kind} on {f.target} scheduled {when}")
        return f

    def _prune(self) -> None:
        """Fold the oldest closed faults beyond MAX_RECORDS into the per-kind totals."""
        closed = [f for f in self.faults if f.recover_s is not None and not f.active]
        old = {id(f) for f in closed[:max(0, len(closed) - MAX_RECORDS)]}
        if not old:
            return
        for f in self.faults:
            if id(f) in old:
                t = self.totals.setdefault(f.kind, {"faults": 0, "requests_affected": 0,
                                                    "requeued": 0, "recomputed": 0})
                t["faults"] += 1
                t["requests_affected"] += len(f.affected)
                t["requeued"] += f.requeued
                t["recomputed"] += f.recomputed
        self.faults = [f for f in self.faults if id(f) not in old]

    def _run(self, f: Fault):
        eng, pol = self.eng, self.policy
        yield eng.env.timeout(max(0.0, f.at_s - eng.env.now))
        f.at_s, f.active = eng.env.now, True
        eng.log("fault", f"#{f.id} {f.kind} on {f.target}")
        if f.kind in NETWORK:
            yield from self._network(f, pol)
        else:
            yield from self._compute(f, pol)
        f.active = False
        eng.log("recover", f"#{f.id} {f.kind} on {f.target} recovered after {f.recover_s:.1f} s")

    def _network(self, f: Fault, pol: Policy):
        """Capacity drops at once; retransmissions until the fabric reroutes; detection (if the
        fault lasts that long) schedules the repair; the part comes back at the end."""
        eng, topo = self.eng, self.eng.topo
        f.nodes = self._nodes_of(f)
        f.affected = eng.in_flight_on_nodes(f.nodes)
        end = f.duration_s if f.duration_s is not None else pol.detect_s + pol.network_repair_s
        if f.kind == "optical_degrade":
            topo.degrade(f.target, f.factor)
            f.rerouted = True       # a slow link still carries traffic: no retransmissions
        else:
            topo.fail(f.target)
        eng.network_changed()
        if f.kind == "optical_flap":
            yield from self._flap(f, pol, end)
        else:
            yield from self._until(f, min(pol.reroute_s, end))
            f.rerouted = True
            eng.network_changed()
            if end >= pol.detect_s:
                yield from self._until(f, pol.detect_s)
                self._detected(f, pol, "repair scheduled")
        yield from self._until(f, end)
        topo.restore(f.target)
        f.recover_s = eng.env.now - f.at_s
        eng.network_changed()

    def _until(self, f: Fault, t: float):
        """Wait until `t` seconds after the fault."""
        yield self.eng.env.timeout(max(0.0, f.at_s + t - self.eng.env.now))

    def _detected(self, f: Fault, pol: Policy, what: str) -> None:
        f.detect_s = pol.detect_s
        self.eng.log("detect", f"#{f.id} {f.kind} on {f.target} detected; {what}")

    def _flap(self, f: Fault, pol: Policy, end: float):
        """Down and up every half period, each down edge paying retransmissions until rerouted;
        detection isolates the link (kept down) until the end of the fault."""
        eng, topo = self.eng, self.eng.topo
        half = f.period_s / 2
        stop = min(pol.detect_s, end)
        t = 0.0                              # the link went down at t (seconds after the fault)
        while True:
            yield from self._until(f, min(t + pol.reroute_s, t + half, stop))
            f.rerouted = True
            eng.network_changed()
            if t + half >= stop:
                break
            yield from self._until(f, t + half)
            topo.restore(f.target)
            eng.network_changed()
            if t + 2 * half >= stop:
                break
            yield from self._until(f, t + 2 * half)
            t += 2 * half
            topo.fail(f.target)
            f.rerouted = False
            eng.network_changed()
        if end >= pol.detect_s:
            yield from self._until(f, pol.detect_s)
            topo.fail(f.target)
            f.rerouted = True
            eng.network_changed()
            self._detected(f, pol, "flapping link isolated until repaired")

    def _remaining(self, f: Fault, repair_s: float) -> float:
        elapsed = self.eng.env.now - f.at_s
        total = f.duration_s if f.duration_s is not None else elapsed + repair_s
        return max(0.0, total - elapsed)

    def _compute(self, f: Fault, pol: Policy):
        eng = self.eng
        dies = eng.dies_of(f.target)
        servers = eng.servers_of(f.target)
        f.nodes = self._nodes_of(f)
        eng.topo.fail(f.target)
        hit = eng.instances_with(dies)
        f.affected = eng.in_flight_on(hit)
        for inst in hit:                   # hung: collectives cannot finish with a dead rank
            inst.down[f.id] = f"#{f.id} {f.kind} {f.target}"
        lost_blocks = sum(eng.ems.fail_server(s) for s in servers) if eng.ems else 0
        if servers:
            f.note = f"EMS lost {lost_blocks} blocks on {len(servers)} server(s)"
        eng.network_changed()
        yield eng.env.timeout(pol.detect_s)
        self._detected(f, pol, "recovering")
        waits = []
        for inst in hit:
            dead = np.intersect1d(inst.dies, dies)
            spare = eng.spare_redundant(inst)
            if inst.kind == "decode" and pol.redundant_experts and len(dead) <= spare \
                    and len(dead) < len(inst.dies):
                n, r = eng.shrink_decode(inst, dead)
                f.requeued += n
                f.recomputed += r
                waits.append((inst, pol.expert_reload_s, "redundant expert took over"))
            else:
                n, r = eng.evict(inst)
                f.requeued += n
                f.recomputed += r
                waits.append((inst, pol.restart_s(), f"restart, weights from {pol.weights_from}"))
        for inst, secs, how in waits:
            eng.log("recover", f"{inst.name}: {how} ({secs:.0f} s)")
        yield eng.env.timeout(max((w[1] for w in waits), default=0.0))
        for inst, _, _ in waits:
            inst.down.pop(f.id, None)      # up again unless another open fault holds it
            inst.wake()
        f.recover_s = eng.env.now - f.at_s
        # the hardware itself (and the EMS servers) come back after repair
        yield eng.env.timeout(self._remaining(f, pol.hardware_repair_s))
        eng.topo.restore(f.target)
        for s in servers:
            eng.ems.restore_server(s)
        eng.network_changed()

    def _nodes_of(self, f: Fault) -> tuple:
        """Nodes whose UB uplinks or NICs the fault touches (all nodes for L2 and sub-plane)."""
        if f.kind in ("l2", "subplane", "rdma_plane"):
            return tuple(range(self.eng.system.nodes))
        ends = f.target.split("--")
        out = {parse(e).get("node") for e in ends}
        return tuple(sorted(n for n in out if n is not None))

    # ---- random failures -----------------------------------------------------------------------
    def set_random(self, hours_per_sim_s: float) -> None:
        """Run random failures at this failure-clock speed from now on (0 stops them)."""
        self._random_gen += 1
        if hours_per_sim_s > 0:
            self.eng.env.process(self._random(hours_per_sim_s, self._random_gen))

    def _random(self, hours_per_sim_s: float, gen: int):
        """Random failures per component class at the catalog's MTBF (assumptions), with time
        compressed by `hours_per_sim_s` so that failures are seen in a demo."""
        eng = self.eng
        classes = random_classes(eng.topo)
        mtbf = defaults()["mtbf_hours"]
        total = sum(len(v) / mtbf[k] for k, v in classes.items() if v)
        while True:
            gap_h = eng.rng.exponential(1.0 / total)
            yield eng.env.timeout(gap_h / hours_per_sim_s)
            if gen != self._random_gen:
                return
            weights = np.array([len(v) / mtbf[k] for k, v in classes.items()])
            k = list(classes)[int(eng.rng.choice(len(classes), p=weights / weights.sum()))]
            target = classes[k][int(eng.rng.integers(len(classes[k])))]
            self.inject({"kind": k, "target": target})


def random_classes(topo) -> dict[str, list[str]]:
    """The parts random failures can hit, per fault kind with a catalog MTBF. NPUs and nodes are
    not graph elements (the graph holds dies), so they come from the die ids and the node count."""
    links = topo.link_arrays().ends
    return {"optical_link": [topo.link_id(e) for e, end in enumerate(links) if end[3] == "l1-l2"],
            "npu": list(dict.fromkeys(d.rsplit("/", 1)[0] for d in topo.die_ids)),
            "cpu": topo.ids("cpu"), "l1": topo.ids("l1"), "l2": topo.ids("l2"),
            "node": [f"n{i:02d}" for i in range(topo.system.nodes)]}


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
    if not isinstance(spec, dict) or set(spec) - {"hours_per_sim_s"}:
        raise CatalogError(f"random = {str(spec)[:60]}: allowed a table {{hours_per_sim_s = <number>}}")
    h = spec.get("hours_per_sim_s", 1.0)
    if isinstance(h, bool) or not isinstance(h, (int, float)) or not 0 <= h <= RANDOM_MAX:
        raise CatalogError(f"random.hours_per_sim_s = {str(h)[:40]}: allowed a number 0 <= x <= {RANDOM_MAX:g} "
                           f"(failure-clock hours per simulated second; 0 = off)")
    return {"hours_per_sim_s": float(h)}


MAX_FAULT_FILE_BYTES = 1 << 20   # input bounds (assumptions): a hand-written scenario is a few KB
MAX_FILE_FAULTS = 1000           # scheduled faults one file may hold
_FILE_KEYS = {"scenario", "seed", "duration_s", "policy", "fault", "random", "description"}
_FAULT_KEYS = ("kind", "target", "at_s", "duration_s", "factor", "period_s")


def load_fault_file(path: str | Path) -> dict:
    """A fault scenario file: scenario, seed, duration_s, [policy], [[fault]] (clear errors).

    Read bounded (a regular file of at most MAX_FAULT_FILE_BYTES); the file must schedule at least
    one fault or a random-failure process, and a fault must land before the file's duration_s.
    Whether a target exists is checked when the engine injects it (it needs the topology)."""
    p = Path(path)
    if not p.exists():
        named = CATALOG_DIR / "faults" / f"{path}.toml"
        if "/" not in str(path) and named.is_file():
            p = named
        else:
            demos = ", ".join(sorted(x.stem for x in (CATALOG_DIR / "faults").glob("*.toml")))
            raise CatalogError(f"faults = {str(path)!r}: no such file (demos: {demos})")
    raw = read_regular_file(p, MAX_FAULT_FILE_BYTES, "fault file", CatalogError)
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{p.name}: not UTF-8 text (byte {exc.start}); a fault file is TOML") from None
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{p.name}: not valid TOML ({exc})") from None
    except RecursionError:
        raise CatalogError(f"{p.name}: TOML nested too deeply") from None
    extra = set(data) - _FILE_KEYS
    if extra:
        raise CatalogError(f"{p.name}: unknown key(s) {', '.join(sorted(extra))} "
                           f"(allowed: {', '.join(sorted(_FILE_KEYS))})")
    _check_file_header(p.name, data)
    faults = data.get("fault", [])
    if not isinstance(faults, list) or not all(isinstance(x, dict) for x in faults):
        raise CatalogError(f"{p.name}: [[fault]] must be a list of tables")
    if len(faults) > MAX_FILE_FAULTS:
        raise CatalogError(f"{p.name}: {len(faults)} faults: allowed at most {MAX_FILE_FAULTS:,} per file")
    for i, x in enumerate(faults, 1):
        _check_file_fault(f"{p.name}: fault {i}", x, data.get("duration_s"))
    policy = data.get("policy", {})
    if not isinstance(policy, dict):
        raise CatalogError(f"{p.name}: policy = {policy!r}: must be a table of policy fields")
    try:
        Policy.load(**policy)
        if "random" in data:
            data["random"] = check_random(data["random"])
    except CatalogError as exc:
        raise CatalogError(f"{p.name}: {exc}") from None
    if not faults and not data.get("random", {}).get("hours_per_sim_s"):
        raise CatalogError(f"{p.name}: no faults (add a [[fault]] table with kind, target and at_s, "
                           f"or random = {{hours_per_sim_s = <number>}})")
    return {"path": str(p), **data}


def _check_file_header(name: str, data: dict) -> None:
    """Types of the top-level keys (their ranges are the scenario's, checked when it loads)."""
    for key, ok, allowed in (("scenario", lambda v: isinstance(v, str) and v.strip(), "a scenario name"),
                             ("description", lambda v: isinstance(v, str), "a string"),
                             ("seed", lambda v: type(v) is int and v >= 0, "an integer >= 0"),
                             ("duration_s", lambda v: type(v) in (int, float) and 0 < v <= 30 * 86400,
                              "a number of seconds > 0 and <= 2,592,000")):
        if key in data and not ok(data[key]):
            raise CatalogError(f"{name}: {key} = {brief(data[key])}: allowed {allowed}")


def _check_file_fault(where: str, x: dict, duration_s) -> None:
    """What a fault table can be checked for without a topology: fields, kind, target, numbers."""
    unknown = set(x) - set(_FAULT_KEYS)
    if unknown:
        raise CatalogError(f"{where}: unknown field(s) {', '.join(sorted(unknown))} "
                           f"(allowed: {', '.join(_FAULT_KEYS)})")
    if "at_s" not in x:
        raise CatalogError(f"{where}: at_s missing (seconds from the start)")
    at = x["at_s"]
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not 0 <= at < math.inf:
        raise CatalogError(f"{where}: at_s = {brief(at)}: allowed a number >= 0 (finite)")
    if type(duration_s) in (int, float) and at >= duration_s:
        raise CatalogError(f"{where}: at_s = {at:g} is not before the end of the run (duration_s = "
                           f"{duration_s:g}); allowed 0 <= at_s < duration_s")
    if not isinstance(x.get("kind"), str) or x["kind"] not in KINDS:
        raise CatalogError(f"{where}: kind = {brief(x.get('kind'))}: allowed {', '.join(KINDS)}")
    if not isinstance(x.get("target"), str) or not x["target"].strip():
        raise CatalogError(f"{where}: target = {brief(x.get('target'))}: required, a part name "
                           f"such as {EXAMPLES[x['kind']]!r}")
    for key in ("duration_s", "factor", "period_s"):
        v = x.get(key, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise CatalogError(f"{where}: {key} = {brief(v)}: allowed a finite number")
