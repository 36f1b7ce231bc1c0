"""The fault kinds: one declaration per kind, read by every consumer (fault files and their check,
the manager, the network state, the random-failure model, the Failures page, the fault table, the
incident report, the docs and `python -m twin faults --kinds`). A new kind is one `register(...)`
here (plus its effect in the engine if it needs new physics); its words are N_ msgids, so both
languages come from the i18n catalog.

`stops` says whether the part stops (health zero: a fail-stop) or keeps running slowly (a gray
failure); `health` says what the fault does to the part's health: {aspect: field} sets that aspect
(compute, hbm, cpu, link) to the fault's field value (its `factor`), "flap" takes a link down and
up every half period; None for a stop."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from twin.i18n import N_

COMMON = ("kind", "target", "at_s", "duration_s")     # the fields every fault has


@dataclass(frozen=True)
class Field:
    """A kind-specific number of a fault: its bounds (inclusive), default, help and allowed words."""
    name: str
    lo: float
    hi: float
    default: float
    help: str          # N_ msgid: what it means (the page's tooltip)
    allowed_text: str  # what the error message says is allowed

    def check(self, value) -> float:
        """The value as a float, or a ValueError naming the field and what is allowed."""
        if isinstance(value, bool):
            raise ValueError(f"fault {self.name} = {value!r}: not a number (allowed: {self.allowed_text})")
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"fault {self.name} = {value!r}: not a number (allowed: {self.allowed_text})") from None
        if not math.isfinite(x) or not self.lo <= x <= self.hi:
            raise ValueError(f"fault {self.name} = {value!r}: allowed {self.allowed_text}")
        return x

    def as_dict(self) -> dict:
        return {"name": self.name, "lo": self.lo, "hi": self.hi, "default": self.default, "help": self.help,
                "allowed": self.allowed_text}


@dataclass(frozen=True)
class FaultKind:
    name: str
    targets: tuple[str, ...]       # element kinds it may target ("link:l1-l2" = an optical L1-L2 link)
    example: str                   # a target on the default supernode
    label: str                     # N_: the dropdown's and the table's words ("L2 UB switch lost")
    short: str                     # N_: two or three words for a label on a chart ("L2 lost")
    help: str                      # N_: what happens, in a sentence
    recover: str                   # N_: how it ends
    stops: bool = True             # False: a gray failure, the part keeps running slowly
    health: dict | None = None     # what it does to health (see the module's docstring); None for a stop
    detect: str = "policy"         # "policy": after Policy.detect_s; "telemetry": by the detector
    fields: tuple[Field, ...] = ()
    network: bool = False          # a part of the fabric: capacity drops, traffic reroutes
    ub: bool = False               # a UB path the all-to-all keeps spraying until rerouted (retransmissions)
    all_nodes: bool = False        # every node's uplinks go through it (an L2, a sub-plane, the RDMA spine)

    def __post_init__(self):
        if self.detect not in ("policy", "telemetry"):
            raise ValueError(f"fault kind {self.name}: detect = {self.detect!r}: allowed 'policy' or 'telemetry'")
        if not self.targets:
            raise ValueError(f"fault kind {self.name}: targets: at least one element kind")
        if self.stops != (self.health is None):
            raise ValueError(f"fault kind {self.name}: a kind that stops its part has no health effect, "
                             f"a gray one has one (stops = {self.stops}, health = {self.health!r})")
        names = [f.name for f in self.fields]
        clash = set(names) & set(COMMON)
        if clash or len(set(names)) != len(names):
            raise ValueError(f"fault kind {self.name}: fields {', '.join(names)}: each once, none of "
                             f"{', '.join(COMMON)}")

    def keys(self) -> tuple[str, ...]:
        """The fields a fault of this kind may have."""
        return COMMON + tuple(f.name for f in self.fields)

    def field(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)

    def as_dict(self) -> dict:
        """The declaration as plain data (`python -m twin faults --kinds --json`)."""
        return {"name": self.name, "targets": list(self.targets), "example": self.example, "label": self.label,
                "help": self.help, "recover": self.recover, "stops": self.stops, "gray": not self.stops,
                "health": self.health, "detect": self.detect, "network": self.network,
                "fields": [f.as_dict() for f in self.fields]}


KINDS: dict[str, FaultKind] = {}


def register(k: FaultKind) -> FaultKind:
    """Declare a kind; its name must be new."""
    if k.name in KINDS:
        raise ValueError(f"fault kind {k.name!r} is already registered")
    KINDS[k.name] = k
    return k


def unregister(name: str) -> None:
    """Drop a kind (a test's own declaration)."""
    KINDS.pop(name, None)


def kind(name: str) -> FaultKind:
    """A kind by name; ValueError listing the kinds if there is none."""
    if not isinstance(name, str) or name not in KINDS:
        raise ValueError(f"fault kind = {str(name)[:40]!r}: allowed {', '.join(KINDS)}")
    return KINDS[name]


def network(name: str) -> bool:
    return KINDS[name].network


def ub(name: str) -> bool:
    return KINDS[name].ub


def fault_keys() -> tuple[str, ...]:
    """Every field a fault of some kind may have (the common ones first)."""
    return tuple(dict.fromkeys(x for k in KINDS.values() for x in k.keys())) or COMMON


def picked(element: str) -> str | None:
    """The fault kind chosen when a part of this element kind is clicked: the first declared kind
    that stops it (else the first that targets it)."""
    hits = [k for k in KINDS.values() if element in k.targets]
    return next((k.name for k in hits if k.stops), hits[0].name if hits else None)


def parts(topo, name: str) -> list[str]:
    """Every valid target of a kind on a topology (static or live: only ids are read), in
    topology order. NPUs, nodes and sub-planes are not graph elements: they come from their lists."""
    out: list[str] = []
    for el in KINDS[name].targets:
        if el == "die":
            out += topo.die_ids
        elif el == "npu":
            out += topo.npu_ids()
        elif el == "node":
            out += topo.node_ids()
        elif el == "subplane":
            out += topo.subplane_ids()
        elif el.startswith("link:"):
            out += [topo.link_id(e) for e, end in enumerate(topo.link_arrays().ends) if end[3] == el[5:]]
        else:
            out += topo.ids(el)
    return out


# ---- the declarations ------------------------------------------------------------------------------

LINK = "n20/l1-3--sp3/l2-7"
_PART_REPAIR = N_("detected after the policy's detect time; the work moves to a redundant expert or the "
                  "instance restarts; the hardware is repaired minutes later")
_NET_REPAIR = N_("traffic reroutes within seconds; detected after the policy's detect time, then repaired")
_GRAY_END = N_("runs slowly until the fault ends, unless the detector flags it and the gray policy moves the "
               "work off it")


def _factor(what: str, help_: str) -> Field:
    return Field("factor", 1e-6, 0.999999, 0.5, help_, f"0 < factor < 1 (fraction of {what} kept)")


for _k in (
    FaultKind("npu_die", ("die",), "n20/npu3/d1", N_("NPU die lost"), N_("die lost"),
              N_("One die of an NPU stops: the instances on it hang until recovery."), _PART_REPAIR),
    FaultKind("npu", ("npu",), "n20/npu3", N_("NPU (both dies) lost"), N_("NPU lost"),
              N_("An NPU package stops, both its dies."), _PART_REPAIR),
    FaultKind("cpu", ("cpu",), "n05/cpu2", N_("Kunpeng CPU lost (EMS server)"), N_("CPU lost"),
              N_("A Kunpeng CPU stops: the EMS cache blocks in its DRAM are lost."), _PART_REPAIR),
    FaultKind("node", ("node",), "n20", N_("node power loss"), N_("node down"),
              N_("A whole node loses power: its dies, CPUs, switches and NICs."), _PART_REPAIR),
    FaultKind("optical_link", ("link:l1-l2",), LINK, N_("optical link down"), N_("link down"),
              N_("An optical L1-L2 link goes dark."), _NET_REPAIR, network=True, ub=True),
    FaultKind("optical_degrade", ("link:l1-l2",), LINK, N_("optical link degraded"), N_("link slow"),
              N_("An optical link keeps running at a fraction of its capacity (bit errors, a weak laser)."),
              N_("stays slow until detected and repaired"), stops=False, health={"link": "factor"},
              fields=(Field("factor", 0.0, 0.999999, 0.5,
                            N_("optical_degrade: fraction of the link's capacity that remains (0 <= f < 1)"),
                            "0 <= factor < 1 (fraction of capacity kept)"),), network=True),
    FaultKind("optical_flap", ("link:l1-l2",), LINK, N_("optical link flapping"), N_("link flaps"),
              N_("An optical link goes down and up once per period."),
              N_("detection isolates the link until it is repaired"), stops=False, health={"link": "flap"},
              fields=(Field("period_s", 0.1, 3600, 10.0, N_("optical_flap: down and up once per period (0.1 to 3600 s)"),
                            "0.1 to 3600 s"),), network=True, ub=True),
    FaultKind("l1", ("l1",), "n20/l1-3", N_("L1 UB switch lost"), N_("L1 lost"),
              N_("An L1 UB switch in a node stops."), _NET_REPAIR, network=True, ub=True),
    FaultKind("l2", ("l2",), "sp2/l2-5", N_("L2 UB switch lost"), N_("L2 lost"),
              N_("An L2 UB switch stops: every node loses a share of its UB bandwidth."), _NET_REPAIR,
              network=True, ub=True, all_nodes=True),
    FaultKind("subplane", ("subplane",), "sp4", N_("UB sub-plane lost"), N_("plane lost"),
              N_("A whole UB sub-plane stops (its L2 switches and optical links)."), _NET_REPAIR,
              network=True, ub=True, all_nodes=True),
    FaultKind("rdma_nic", ("rdma_nic",), "n20/rdma3", N_("RDMA NIC lost"), N_("NIC lost"),
              N_("An RDMA NIC stops."), _NET_REPAIR, network=True),
    FaultKind("rdma_plane", ("rdma_switch",), "rdma/spine-0", N_("RDMA switch lost"), N_("RDMA switch lost"),
              N_("An RDMA switch stops."), _NET_REPAIR, network=True, all_nodes=True),
    FaultKind("vpc", ("vpc_nic",), "n20/vpc", N_("VPC card (QingTian) lost"), N_("VPC card lost"),
              N_("A node's VPC card (QingTian) stops."), _NET_REPAIR, network=True),
    # gray failures: the part keeps running, slowly (thermal throttling, power capping, corrected ECC errors)
    FaultKind("straggler", ("die", "npu"), "n36/npu3/d1", N_("NPU die or NPU running slow"), N_("slow die"),
              N_("A die or NPU runs at a fraction of its speed (thermal throttling, power capping: its cores, "
                 "and the loads they issue to HBM, at a lower clock); its synchronous group waits for it."),
              _GRAY_END, stops=False, health={"compute": "factor", "hbm": "factor"},
              detect="telemetry", fields=(_factor("speed", N_("fraction of the part's speed kept, for its compute "
                                                               "and its HBM reads (0 < f < 1)")),)),
    FaultKind("hbm_degrade", ("die",), "n36/npu3/d1", N_("HBM bandwidth degraded"), N_("slow HBM"),
              N_("A die's HBM delivers a fraction of its bandwidth (corrected ECC errors, a throttled stack)."),
              _GRAY_END, stops=False, health={"hbm": "factor"}, detect="telemetry",
              fields=(_factor("HBM bandwidth", N_("fraction of the die's HBM bandwidth kept (0 < f < 1)")),)),
    FaultKind("node_throttle", ("node",), "n20", N_("node throttled"), N_("node slow"),
              N_("Every die of a node runs at a fraction of its speed (a power or cooling limit), its compute "
                 "and its HBM reads alike."),
              _GRAY_END, stops=False, health={"compute": "factor", "hbm": "factor"}, detect="telemetry",
              fields=(_factor("speed", N_("fraction of the node's speed kept, for its dies' compute and HBM "
                                          "reads (0 < f < 1)")),)),
    FaultKind("cpu_slow", ("cpu",), "n05/cpu2", N_("Kunpeng CPU running slow (EMS)"), N_("slow CPU"),
              N_("A Kunpeng CPU and its DRAM serve the EMS cache at a fraction of their speed."), _GRAY_END,
              stops=False, health={"cpu": "factor"}, detect="telemetry",
              fields=(_factor("CPU and DRAM speed", N_("fraction of the CPU's and its DRAM's speed kept "
                                                        "(0 < f < 1)")),)),
):
    register(_k)
