"""Topology of a system: graph builders, routing and capacity under failures.

One builder turns a catalog `System` into a networkx graph, for both kinds:

* ``supernode`` (CloudMatrix384): dies, CPUs, 7 L1 UB chips per node, 7 sub-planes x 16 L2 chips,
  optical L1-L2 links, plus the RDMA (scale-out) and VPC (datacenter) planes.
* ``cluster`` (8-GPU servers): GPUs on an NVSwitch per server, plus the same RDMA and VPC planes.

Why the structure/state split: the graph and its per-link arrays are built once per system and
shared (`topology(name)` caches them); each `Topology` object only holds failure state in numpy
arrays, so a fault never rebuilds anything and the engine can keep per-link arrays indexed by the
stable edge index ``eid``.

Why structural routing: the engine routes often, and UB paths in a supernode are fully determined by
the fabric shape (die -> L1(k) -> L2(k, j) -> L1(k) -> die for every live k, j), so routes are
computed with numpy over those index arrays from the live capacities, not by graph search. The
RDMA, VPC and NVLink planes are trees (host -> NIC -> leaf -> spine), routed through their lowest
common ancestor. A networkx search is kept only as a fallback for unusual endpoint pairs.

Units: every ``capacity_gbps`` is GB/s one way (links are full duplex, each direction has it);
catalog NIC speeds (``rdma_nic_gbps``, ``vpc_gbps``, chip ``rdma_gbps``) are Gbps and are converted.

Modelling assumptions not in the catalog (documented here because they are shapes, not numbers):
the RDMA fabric is one leaf switch per compute rack (a node is its own rack when the system has no
``compute_racks``) under one logical non-blocking spine; a leaf's uplink equals the sum of its NICs;
host-to-VPC-card links and the object-storage link never limit (the card and the service do).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

import networkx as nx
import numpy as np

from twin.config import Chip, System, catalog

BITS_PER_BYTE = 8            # unit conversion: catalog NIC speeds are Gbps, link capacities GB/s
ROUTE_CACHE_LIMIT = 200_000  # software bound on cached routes per failure version (memory, not physics)

PLANES = ("ub", "d2d", "rdma", "vpc", "nvlink")
PLANE_ALIASES = ("scaleup",)  # "scaleup" = ub on a supernode, nvlink on a cluster
SWITCH_KINDS = frozenset({"l1", "l2", "rdma_switch", "vpc_switch", "nvswitch"})
TREE_PLANES = ("rdma", "vpc", "nvlink")

VPC_SWITCH = "vpc/switch"
STORAGE = "storage/obs"
RDMA_CORE_RACK = "net-rdma"  # where the spine sits: outside every compute rack, so its links are optical
DC_RACK = "net-dc"            # datacenter network row: VPC switch and object storage


# ----------------------------------------------------------------------------------------------
# ids


def node_label(node: int) -> str:
    """Id of a server node ("n07"); also a failure group meaning everything on that node."""
    return f"n{node:02d}"


def die_id(node: int, npu: int, die: int) -> str:
    """A die: the unit of compute ("n07/npu3/d1"). On a cluster, npu = GPU and die is always 0."""
    return f"n{node:02d}/npu{npu}/d{die}"


def npu_id(node: int, npu: int) -> str:
    """An accelerator package ("n07/npu3"): a failure group of its dies, not a graph node."""
    return f"n{node:02d}/npu{npu}"


def cpu_id(node: int, cpu: int) -> str:
    return f"n{node:02d}/cpu{cpu}"


def l1_id(node: int, k: int) -> str:
    """L1 UB switch chip k of a node; it belongs to sub-plane k."""
    return f"n{node:02d}/l1-{k}"


def l2_id(subplane: int, j: int) -> str:
    return f"sp{subplane}/l2-{j}"


def subplane_id(k: int) -> str:
    """Failure group: the L2 chips of sub-plane k."""
    return f"sp{k}"


def rdma_nic_id(node: int, npu: int) -> str:
    return f"n{node:02d}/rdma{npu}"


def vpc_nic_id(node: int) -> str:
    return f"n{node:02d}/vpc"


def nvswitch_id(node: int) -> str:
    return f"n{node:02d}/nvswitch"


def rack_id(rack: int) -> str:
    return f"r{rack:02d}"


def comm_rack_id(rack: int) -> str:
    return f"c{rack:02d}"


def leaf_id(rack: int) -> str:
    return f"rdma/leaf-r{rack:02d}"


def spine_id(index: int = 0) -> str:
    return f"rdma/spine-{index}"


def link_id(u: str, v: str) -> str:
    """A link's string id ("n07/l1-4--sp4/l2-11"); node ids never contain "--"."""
    return f"{u}--{v}"


_ID_FORMS: tuple[tuple[str, str, str], ...] = (
    ("die", r"n(?P<node>\d+)/npu(?P<npu>\d+)/d(?P<die>\d+)", "n07/npu3/d1"),
    ("npu", r"n(?P<node>\d+)/npu(?P<npu>\d+)", "n07/npu3 (group: its dies)"),
    ("cpu", r"n(?P<node>\d+)/cpu(?P<cpu>\d+)", "n07/cpu2"),
    ("l1", r"n(?P<node>\d+)/l1-(?P<subplane>\d+)", "n07/l1-4"),
    ("rdma_nic", r"n(?P<node>\d+)/rdma(?P<npu>\d+)", "n07/rdma3"),
    ("vpc_nic", r"n(?P<node>\d+)/vpc", "n07/vpc"),
    ("nvswitch", r"n(?P<node>\d+)/nvswitch", "n07/nvswitch"),
    ("node", r"n(?P<node>\d+)", "n07 (group: the whole node)"),
    ("l2", r"sp(?P<subplane>\d+)/l2-(?P<index>\d+)", "sp4/l2-11"),
    ("subplane", r"sp(?P<subplane>\d+)", "sp4 (group: its L2 chips)"),
    ("rack", r"r(?P<rack>\d+)", "r02 (group: a compute rack)"),
    ("comm_rack", r"c(?P<rack>\d+)", "c01 (group: a communication rack)"),
    ("rdma_switch", r"rdma/leaf-r(?P<rack>\d+)", "rdma/leaf-r02"),
    ("rdma_switch", r"rdma/spine-(?P<index>\d+)", "rdma/spine-0"),
    ("vpc_switch", re.escape(VPC_SWITCH), VPC_SWITCH),
    ("storage", re.escape(STORAGE), STORAGE),
    ("link", r"(?P<u>.+?)--(?P<v>.+)", "n07/l1-4--sp4/l2-11 (a link)"),
)
_ID_RES = tuple((kind, re.compile(rx + r"\Z"), ex) for kind, rx, ex in _ID_FORMS)


class TopologyError(ValueError):
    """A bad topology request (unknown plane, endpoint not on a plane, bad factor); says what is allowed."""


class UnknownElementError(TopologyError, KeyError):
    """An id that names no element; the message names it and lists valid forms."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


def parse(element: str) -> dict:
    """Split an id into its kind and integer fields, by syntax only (existence: `validate_target`)."""
    if isinstance(element, str):
        for kind, rx, _ in _ID_RES:
            m = rx.match(element)
            if m:
                out: dict = {"kind": kind}
                for key, val in m.groupdict().items():
                    out[key] = val if key in ("u", "v") else int(val)
                return out
    forms = "; ".join(ex for _, _, ex in _ID_FORMS)
    raise UnknownElementError(f"topology id {element!r} is not well formed (allowed forms: {forms})")


# ----------------------------------------------------------------------------------------------
# structure (immutable, shared)


class _Builder:
    """Accumulates nodes and edges in plain lists; the graph is created in one go at the end."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.index: dict[str, int] = {}
        self.nattrs: list[dict] = []
        self.eu: list[int] = []
        self.ev: list[int] = []
        self.eattrs: list[dict] = []

    def node(self, nid: str, kind: str, rack: str, **attrs) -> int:
        i = len(self.ids)
        self.ids.append(nid)
        self.index[nid] = i
        self.nattrs.append({"kind": kind, "rack": rack, **attrs})
        return i

    def edge(self, u: int, v: int, plane: str, kind: str, capacity: float, latency: float) -> int:
        eid = len(self.eu)
        medium = "optical" if self.nattrs[u]["rack"] != self.nattrs[v]["rack"] else "electrical"
        self.eu.append(u)
        self.ev.append(v)
        self.eattrs.append({"plane": plane, "medium": medium, "capacity_gbps": float(capacity),
                            "latency_us": float(latency), "eid": eid, "kind": kind})
        return eid


def _frozen(a) -> np.ndarray:
    arr = np.asarray(a)
    arr.flags.writeable = False
    return arr


class _Structure:
    """Everything that does not change with failures: graph, per-link arrays, routing index arrays."""

    def __init__(self, name: str, system: System, chip: Chip, cpu_chip: Chip | None):
        self.name, self.system, self.chip, self.cpu_chip = name, system, chip, cpu_chip
        s = system
        b = _Builder()
        nodes, npn, dpp, cpn = s.nodes, s.npus_per_node, chip.dies_per_package, s.cpus_per_node
        self.dies_per_package = dpp
        self.n_racks = s.compute_racks or nodes
        per_rack = math.ceil(nodes / self.n_racks)
        self.rack_of_node = _frozen([n // per_rack for n in range(nodes)])
        L, sw = s.link_latency_us, s.switch_latency_us

        # hosts: dies (with die-to-die links inside a package) and CPUs
        die_idx = np.zeros((nodes, npn, dpp), dtype=np.int64)
        cpu_idx = np.zeros((nodes, cpn), dtype=np.int64)
        d2d_eid: dict[int, dict[int, int]] = {}
        for n in range(nodes):
            rk = rack_id(int(self.rack_of_node[n]))
            for p in range(npn):
                for d in range(dpp):
                    die_idx[n, p, d] = b.node(die_id(n, p, d), "die", rk, node=n, npu=p, die=d)
                for d1 in range(dpp):
                    for d2 in range(d1 + 1, dpp):
                        u, v = int(die_idx[n, p, d1]), int(die_idx[n, p, d2])
                        e = b.edge(u, v, "d2d", "d2d", chip.die_to_die_gbps, L)
                        d2d_eid.setdefault(u, {})[v] = e
                        d2d_eid.setdefault(v, {})[u] = e
            for c in range(cpn):
                cpu_idx[n, c] = b.node(cpu_id(n, c), "cpu", rk, node=n, cpu=c)
        self.die_idx, self.cpu_idx, self.d2d_eid = _frozen(die_idx), _frozen(cpu_idx), d2d_eid
        parent = {p: {} for p in TREE_PLANES}  # plane -> child nidx -> (parent nidx, eid)

        # scale-up plane
        self.ub_access: dict[int, np.ndarray] = {}  # UB endpoint nidx -> eid to L1 chip k, per k
        if s.kind == "supernode":
            self._build_ub(b, die_idx, cpu_idx)
        else:
            nv_gbps = s.nvlink_gbps or chip.nvlink_gbps
            nv_lat = max(0.0, (s.nvlink_latency_us - sw) / 2)  # GPU -> NVSwitch -> GPU = nvlink_latency_us
            for n in range(nodes):
                rk = rack_id(int(self.rack_of_node[n]))
                nvs = b.node(nvswitch_id(n), "nvswitch", rk, node=n)
                for g in die_idx[n].ravel():
                    parent["nvlink"][int(g)] = (nvs, b.edge(int(g), nvs, "nvlink", "gpu-nvswitch", nv_gbps, nv_lat))

        # RDMA plane: die -> NIC (one per package) -> leaf (one per rack) -> spine
        nic_gbps = s.rdma_nic_gbps / BITS_PER_BYTE
        die_nic_gbps = chip.rdma_gbps / BITS_PER_BYTE if chip.rdma_gbps else nic_gbps
        fabric = 4 * L + 3 * sw  # NIC-leaf, leaf-spine, spine-leaf, leaf-NIC links; 3 switches
        rdma_host_lat = max(0.0, (s.rdma_latency_us - fabric) / 2)  # cross-rack path = rdma_latency_us
        spine = b.node(spine_id(0), "rdma_switch", RDMA_CORE_RACK, role="spine")
        leaves, leaf_up = [], []
        for r in range(self.n_racks):
            in_rack = int(np.sum(self.rack_of_node == r))
            lf = b.node(leaf_id(r), "rdma_switch", rack_id(r), role="leaf", rack_index=r)
            e = b.edge(lf, spine, "rdma", "leaf-spine", in_rack * npn * nic_gbps, L)
            parent["rdma"][lf] = (spine, e)
            leaves.append(lf)
            leaf_up.append(e)
        self.leaf_up = _frozen(leaf_up)
        nic_up = np.zeros((nodes, npn), dtype=np.int64)
        nic_host = np.zeros((nodes, npn, dpp), dtype=np.int64)
        for n in range(nodes):
            r = int(self.rack_of_node[n])
            for p in range(npn):
                nic = b.node(rdma_nic_id(n, p), "rdma_nic", rack_id(r), node=n, npu=p)
                nic_up[n, p] = b.edge(nic, leaves[r], "rdma", "nic-leaf", nic_gbps, L)
                parent["rdma"][nic] = (leaves[r], int(nic_up[n, p]))
                for d in range(dpp):
                    g = int(die_idx[n, p, d])
                    nic_host[n, p, d] = b.edge(g, nic, "rdma", "die-nic", die_nic_gbps, rdma_host_lat)
                    parent["rdma"][g] = (nic, int(nic_host[n, p, d]))
        self.nic_up, self.nic_host = _frozen(nic_up), _frozen(nic_host)

        # VPC plane: dies and CPUs -> the node's VPC card -> datacenter VPC switch (object storage hangs off it)
        vpc = s.vpc_gbps / BITS_PER_BYTE
        vpc_host_lat = max(0.0, (s.vpc_latency_us - (2 * L + sw)) / 2)  # host-to-host = vpc_latency_us
        vsw = b.node(VPC_SWITCH, "vpc_switch", DC_RACK)
        obs = b.node(STORAGE, "storage", DC_RACK)
        parent["vpc"][obs] = (vsw, b.edge(obs, vsw, "vpc", "switch-storage", nodes * vpc, L))
        vpc_up, vpc_host = [], []
        for n in range(nodes):
            card = b.node(vpc_nic_id(n), "vpc_nic", rack_id(int(self.rack_of_node[n])), node=n)
            vpc_up.append(b.edge(card, vsw, "vpc", "vpc-switch", vpc, L))
            parent["vpc"][card] = (vsw, vpc_up[-1])
            hosts = []
            for h in [*die_idx[n].ravel(), *cpu_idx[n]]:
                hosts.append(b.edge(int(h), card, "vpc", "host-vpc", vpc, vpc_host_lat))
                parent["vpc"][int(h)] = (card, hosts[-1])
            vpc_host.append(hosts)
        self.vpc_up, self.vpc_host = _frozen(vpc_up), _frozen(np.array(vpc_host, dtype=np.int64))

        # flat arrays
        self.ids = b.ids
        self.index = b.index
        self.nkind = [a["kind"] for a in b.nattrs]
        self.nnode = _frozen([a.get("node", -1) for a in b.nattrs])
        self.is_switch = _frozen([k in SWITCH_KINDS for k in self.nkind])
        self.eu, self.ev = _frozen(np.array(b.eu, dtype=np.int64)), _frozen(np.array(b.ev, dtype=np.int64))
        self.base = _frozen([a["capacity_gbps"] for a in b.eattrs])
        self.lat = _frozen([a["latency_us"] for a in b.eattrs])
        self.eplane = [a["plane"] for a in b.eattrs]
        self.ekind = [a["kind"] for a in b.eattrs]
        self.optical = _frozen([a["medium"] == "optical" for a in b.eattrs])
        self.edge_index: dict[tuple[int, int], int] = {}
        for e, (u, v) in enumerate(zip(b.eu, b.ev)):
            self.edge_index[(u, v)] = e
            self.edge_index[(v, u)] = e
        self.ends = [(b.ids[u], b.ids[v], a["plane"], a["kind"]) for u, v, a in zip(b.eu, b.ev, b.eattrs)]
        self.die_ids = [b.ids[i] for i in die_idx.ravel()]
        self.cpu_ids = [b.ids[i] for i in cpu_idx.ravel()]

        # tree planes as arrays: parent nidx, eid to parent, depth
        N = len(b.ids)
        self.parent, self.parent_eid, self.depth = {}, {}, {}
        for plane, pmap in parent.items():
            par = np.full(N, -1, dtype=np.int64)
            pe = np.full(N, -1, dtype=np.int64)
            for c, (p, e) in pmap.items():
                par[c], pe[c] = p, e
            depth = np.full(N, -1, dtype=np.int64)
            members = set(pmap) | {p for p, _ in pmap.values()}
            for i in members:
                d, j = 0, i
                while par[j] >= 0:
                    j, d = par[j], d + 1
                depth[i] = d
            self.parent[plane], self.parent_eid[plane], self.depth[plane] = par, pe, depth

        self.graph = nx.Graph(name=name, system_kind=s.kind)
        self.graph.add_nodes_from(zip(b.ids, b.nattrs))
        self.graph.add_edges_from((b.ids[u], b.ids[v], a) for u, v, a in zip(b.eu, b.ev, b.eattrs))
        nx.freeze(self.graph)
        self.groups = self._groups(b)
        self.counts = self._counts()
        self.examples = self._examples()

    def _build_ub(self, b: _Builder, die_idx: np.ndarray, cpu_idx: np.ndarray) -> None:
        """UB fabric: every die and CPU to each L1 chip of its node; L1 chip k to all L2 chips of sub-plane k."""
        s, chip = self.system, self.chip
        K, J, nodes = s.l1_per_node, s.l2_per_subplane, s.nodes
        if K != s.subplanes:
            raise TopologyError(f"{self.name}: l1_per_node = {K} must equal subplanes = {s.subplanes} "
                                "(L1 chip k of every node belongs to sub-plane k)")
        L = s.link_latency_us
        l2 = np.zeros((K, J), dtype=np.int64)
        total = K * J
        comm = max(1, s.comm_racks)
        for k in range(K):
            for j in range(J):
                rk = comm_rack_id((k * J + j) * comm // total)
                l2[k, j] = b.node(l2_id(k, j), "l2", rk, subplane=k, index=j)
        self.l2_idx = _frozen(l2)
        die_l1_gbps = chip.ub_links * chip.ub_link_gbps / K  # a die's UB links spread evenly over the L1 chips
        # a CPU's UB bandwidth spread evenly over the L1 chips (one graph edge per CPU-L1 pair carries all
        # cpu_l1_links physical links; cpu_l1_links = 0 leaves the CPUs off the UB plane)
        cpu_l1_gbps = self.cpu_chip.ub_gbps / K if self.cpu_chip and s.cpu_l1_links else 0.0
        l1l2 = np.zeros((nodes, K, J), dtype=np.int64)
        die_acc = np.zeros((nodes, die_idx.shape[1] * die_idx.shape[2], K), dtype=np.int64)
        l1 = np.zeros((nodes, K), dtype=np.int64)
        for n in range(nodes):
            rk = rack_id(int(self.rack_of_node[n]))
            for k in range(K):
                l1[n, k] = b.node(l1_id(n, k), "l1", rk, node=n, subplane=k)
            for i, g in enumerate(die_idx[n].ravel()):
                acc = [b.edge(int(g), int(l1[n, k]), "ub", "die-l1", die_l1_gbps, L) for k in range(K)]
                die_acc[n, i] = acc
                self.ub_access[int(g)] = _frozen(acc)
            if cpu_l1_gbps > 0:
                for c in cpu_idx[n]:
                    acc = [b.edge(int(c), int(l1[n, k]), "ub", "cpu-l1", cpu_l1_gbps, L) for k in range(K)]
                    self.ub_access[int(c)] = _frozen(acc)
            for k in range(K):
                for j in range(J):
                    l1l2[n, k, j] = b.edge(int(l1[n, k]), int(l2[k, j]), "ub", "l1-l2", s.l1_l2_link_gbps, L)
        self.l1_idx, self.l1l2, self.die_acc = _frozen(l1), _frozen(l1l2), _frozen(die_acc)

    def _groups(self, b: _Builder) -> dict[str, np.ndarray]:
        """Failure groups: a node, an NPU package, a sub-plane's L2 chips, a rack."""
        groups: dict[str, list[int]] = {}
        for i, a in enumerate(b.nattrs):
            if "node" in a:
                groups.setdefault(node_label(a["node"]), []).append(i)
            if a["kind"] == "die":
                groups.setdefault(npu_id(a["node"], a["npu"]), []).append(i)
            if a["kind"] == "l2":
                groups.setdefault(subplane_id(a["subplane"]), []).append(i)
            if re.fullmatch(r"[rc]\d+", a["rack"]):
                groups.setdefault(a["rack"], []).append(i)
        return {g: _frozen(np.array(m, dtype=np.int64)) for g, m in groups.items()}

    def _counts(self) -> dict[str, int]:
        s = self.system
        kinds: dict[str, int] = {}
        for k in self.nkind:
            kinds[k] = kinds.get(k, 0) + 1
        out = {"node": s.nodes, "rack": self.n_racks, "comm_rack": s.comm_racks if s.kind == "supernode" else 0,
               "subplane": s.subplanes if s.kind == "supernode" else 0,
               "npu": s.nodes * s.npus_per_node}
        for k in ("die", "cpu", "l1", "l2", "nvswitch", "rdma_nic", "rdma_switch", "vpc_nic", "vpc_switch", "storage"):
            out[k] = kinds.get(k, 0)
        out["rdma_leaf"] = self.n_racks
        out["rdma_spine"] = out["rdma_switch"] - self.n_racks
        for k in self.ekind:
            out[f"link:{k}"] = out.get(f"link:{k}", 0) + 1
        for p in self.eplane:
            out[f"plane:{p}"] = out.get(f"plane:{p}", 0) + 1
        out["links"] = len(self.ekind)
        out["optical_links"] = int(self.optical.sum())
        out["electrical_links"] = out["links"] - out["optical_links"]
        out["graph_nodes"] = len(self.ids)
        return out

    def _examples(self) -> str:
        seen: dict[str, str] = {}
        for nid, k in zip(self.ids, self.nkind):
            seen.setdefault(k, nid)
        groups = [g for g in ("n00", "n00/npu0", "sp0", "r00") if g in self.groups]
        return ", ".join([*seen.values(), *(f"{g} (group)" for g in groups),
                          f"a link as eid 0..{len(self.ekind) - 1}, (u, v) or 'u--v'"])


# ----------------------------------------------------------------------------------------------
# routes


_NO_PATHS = _frozen(np.zeros((0, 0), dtype=np.int64))
_NO_GBPS = _frozen(np.zeros(0))


@dataclass(frozen=True, eq=False)
class Route:
    """Parallel paths between two elements on one plane, under the failure state it was computed for.

    ``path_eids[i]`` lists the links of path i from src to dst; ``path_gbps[i]`` is its bottleneck;
    ``flow_gbps[i]`` is how a max-flow split puts traffic on it (shared access links make the sum of
    bottlenecks an over-estimate); ``bandwidth_gbps`` is that max flow (GB/s one way). ``hops`` counts
    links; ``latency_us`` = link latencies + switch_latency_us per switch traversed. A cut gives
    ``partitioned=True``, bandwidth 0, latency inf and a ``message`` saying why.
    """

    src: str
    dst: str
    plane: str
    path_eids: np.ndarray
    path_gbps: np.ndarray
    flow_gbps: np.ndarray
    bandwidth_gbps: float
    hops: int
    switches: int
    latency_us: float
    version: int
    partitioned: bool = False
    message: str = ""

    @property
    def n_paths(self) -> int:
        return int(self.path_eids.shape[0])

    @property
    def paths(self) -> list[tuple[int, ...]]:
        return [tuple(int(e) for e in row) for row in self.path_eids]

    def link_shares(self) -> tuple[np.ndarray, np.ndarray]:
        """(eids, fraction of this route's traffic on each): what a max-min fair-share solver needs."""
        if self.bandwidth_gbps <= 0 or not math.isfinite(self.bandwidth_gbps) or self.n_paths == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        eids = self.path_eids.ravel()
        w = np.repeat(self.flow_gbps / self.bandwidth_gbps, self.path_eids.shape[1])
        uniq, inv = np.unique(eids, return_inverse=True)
        return uniq, np.bincount(inv, weights=w)

    def to_dict(self) -> dict:
        """JSON-friendly summary (no per-path arrays)."""
        return {"src": self.src, "dst": self.dst, "plane": self.plane, "paths": self.n_paths,
                "bandwidth_gbps": self.bandwidth_gbps if math.isfinite(self.bandwidth_gbps) else None, "hops": self.hops, "switches": self.switches,
                "latency_us": self.latency_us if math.isfinite(self.latency_us) else None,
                "partitioned": self.partitioned, "message": self.message}


@dataclass(frozen=True)
class LinkArrays:
    """Per-link arrays indexed by eid: live capacity (failures and degradation applied) and statics."""

    capacity_gbps: np.ndarray
    base_gbps: np.ndarray
    latency_us: np.ndarray
    optical: np.ndarray
    ends: list[tuple[str, str, str, str]]  # (u, v, plane, kind), for the UI
    version: int  # failure version the capacities belong to; arrays are read-only (copy to write)


# ----------------------------------------------------------------------------------------------
# topology with failure state


class Topology:
    """A system's topology plus its failure state. Cheap to create: the structure is shared.

    ``graph`` is the shared networkx graph (read-only: failures live in arrays here, never in it).
    ``version`` increases on every fail/restore/degrade so callers can cache against it.
    """

    def __init__(self, structure: _Structure):
        self._s = structure
        self.name = structure.name
        self.system = structure.system
        self.kind = structure.system.kind
        self.graph = structure.graph
        self.version = 0
        self.reset()

    # ---- ids and targets

    @property
    def die_ids(self) -> list[str]:
        """Every die id, in die-index order (node, npu, die): index i here is die i for the engine."""
        return self._s.die_ids

    @property
    def cpu_ids(self) -> list[str]:
        return self._s.cpu_ids

    def ids(self, kind: str | None = None) -> list[str]:
        """Graph node ids, optionally of one kind (die, cpu, l1, l2, rdma_nic, ...)."""
        s = self._s
        return list(s.ids) if kind is None else [i for i, k in zip(s.ids, s.nkind) if k == kind]

    def _unknown(self, target, why: str = "") -> UnknownElementError:
        why = f" ({why})" if why else ""
        return UnknownElementError(f"unknown topology element {target!r} in {self.name}{why}; "
                                   f"valid ids look like: {self._s.examples}")

    def _nidx(self, element: str) -> int:
        i = self._s.index.get(element) if isinstance(element, str) else None
        if i is None:
            raise self._unknown(element, self._range_hint(element))
        return i

    def _range_hint(self, element) -> str:
        try:
            p = parse(element)
        except UnknownElementError:
            return "not a well-formed id"
        s = self.system
        if p.get("node", 0) >= s.nodes:
            return f"node index {p['node']} out of range 0..{s.nodes - 1}"
        if p["kind"] in ("die", "npu", "rdma_nic") and p["npu"] >= s.npus_per_node:
            return f"npu index {p['npu']} out of range 0..{s.npus_per_node - 1}"
        if p["kind"] == "die" and p["die"] >= self._s.dies_per_package:
            return f"die index {p['die']} out of range 0..{self._s.dies_per_package - 1}"
        if p["kind"] == "cpu" and p["cpu"] >= s.cpus_per_node:
            return f"cpu index {p['cpu']} out of range 0..{s.cpus_per_node - 1}"
        return f"no {p['kind']} with this id in a {self.kind}"

    def edge(self, link) -> int:
        """The eid of a link given as eid, (u, v) or 'u--v'."""
        s = self._s
        if isinstance(link, (int, np.integer)) and not isinstance(link, bool):
            if 0 <= int(link) < len(s.ekind):
                return int(link)
            raise self._unknown(link, f"edge index out of range 0..{len(s.ekind) - 1}")
        if isinstance(link, str) and "--" in link:
            p = parse(link)
            link = (p["u"], p["v"])
        if isinstance(link, tuple) and len(link) == 2:
            e = s.edge_index.get((self._nidx(link[0]), self._nidx(link[1])))
            if e is None:
                raise self._unknown(link, "these two elements are not directly linked")
            return e
        raise self._unknown(link)

    def link_id(self, eid: int) -> str:
        u, v, _, _ = self._s.ends[eid]
        return link_id(u, v)

    def _resolve(self, target) -> tuple[np.ndarray, np.ndarray]:
        """A target -> (node indices, edge indices)."""
        s = self._s
        empty = np.zeros(0, dtype=np.int64)
        if isinstance(target, str) and target in s.index:
            return np.array([s.index[target]]), empty
        if isinstance(target, str) and target in s.groups:
            return s.groups[target], empty
        if isinstance(target, (int, np.integer, tuple)) or (isinstance(target, str) and "--" in target):
            return empty, np.array([self.edge(target)])
        raise self._unknown(target, self._range_hint(target))

    def validate_target(self, target) -> str:
        """Canonical id of a fault target (element, group or link); raises UnknownElementError if none."""
        nodes, edges = self._resolve(target)
        if len(edges):
            return self.link_id(int(edges[0]))
        return target

    # ---- failure state

    def reset(self) -> None:
        """Heal everything."""
        N, E = len(self._s.ids), len(self._s.ekind)
        self._nfail = np.zeros(N, dtype=bool)
        self._nfac = np.ones(N)
        self._efail = np.zeros(E, dtype=bool)
        self._efac = np.ones(E)
        self._changed()

    def _changed(self) -> None:
        self.version += 1
        self._eff: np.ndarray | None = None
        self._cache: dict = {}

    def fail(self, target) -> str:
        """Fail an element, a group (n07, n07/npu3, sp4, r02) or a link; returns the canonical id."""
        nodes, edges = self._resolve(target)
        self._nfail[nodes] = True
        self._efail[edges] = True
        self._changed()
        return self.validate_target(target)

    def restore(self, target) -> str:
        """Undo fail and degrade on the target."""
        nodes, edges = self._resolve(target)
        self._nfail[nodes] = False
        self._nfac[nodes] = 1.0
        self._efail[edges] = False
        self._efac[edges] = 1.0
        self._changed()
        return self.validate_target(target)

    def degrade(self, target, factor: float) -> str:
        """Keep `factor` (0..1) of the capacity of a link, or of every link touching an element/group."""
        if not (isinstance(factor, (int, float, np.floating)) and 0.0 <= float(factor) <= 1.0):
            raise TopologyError(f"degrade factor {factor!r} for {target!r}: allowed a number 0..1 "
                                "(fraction of capacity kept)")
        nodes, edges = self._resolve(target)
        self._nfac[nodes] = float(factor)
        self._efac[edges] = float(factor)
        self._changed()
        return self.validate_target(target)

    @property
    def failed(self) -> set[str]:
        """Failed elements (node ids) and links ('u--v')."""
        s = self._s
        return ({s.ids[i] for i in np.flatnonzero(self._nfail)}
                | {self.link_id(int(e)) for e in np.flatnonzero(self._efail)})

    @property
    def degraded(self) -> dict[str, float]:
        s = self._s
        out = {s.ids[i]: float(self._nfac[i]) for i in np.flatnonzero(self._nfac < 1.0)}
        out.update({self.link_id(int(e)): float(self._efac[e]) for e in np.flatnonzero(self._efac < 1.0)})
        return out

    def state(self) -> dict:
        """JSON-friendly failure state (for snapshots and replay)."""
        return {"system": self.name, "version": self.version, "failed": sorted(self.failed),
                "degraded": dict(sorted(self.degraded.items()))}

    def alive(self, element: str) -> bool:
        return not self._nfail[self._nidx(element)]

    def clone(self) -> "Topology":
        """Same structure, copied failure state (for what-if sweeps)."""
        t = Topology(self._s)
        t._nfail, t._nfac = self._nfail.copy(), self._nfac.copy()
        t._efail, t._efac = self._efail.copy(), self._efac.copy()
        t._changed()
        return t

    @property
    def capacity(self) -> np.ndarray:
        """Live capacity per eid (GB/s): base x degradation, 0 when the link or an end has failed."""
        if self._eff is None:
            s = self._s
            nf = self._nfac * ~self._nfail
            eff = s.base * self._efac * ~self._efail * nf[s.eu] * nf[s.ev]
            eff.flags.writeable = False
            self._eff = eff
        return self._eff

    def link_arrays(self) -> LinkArrays:
        s = self._s
        return LinkArrays(self.capacity, s.base, s.lat, s.optical, s.ends, self.version)

    def counts(self) -> dict[str, int]:
        """Component and link counts by kind (static: failures do not change them)."""
        return dict(self._s.counts)

    # ---- routing

    def _plane(self, plane: str) -> str:
        if plane == "scaleup":
            return "ub" if self.kind == "supernode" else "nvlink"
        own = {"supernode": ("ub", "d2d", "rdma", "vpc"), "cluster": ("nvlink", "rdma", "vpc")}[self.kind]
        if self._s.dies_per_package == 1:
            own = tuple(p for p in own if p != "d2d")
        if plane not in own:
            raise TopologyError(f"plane {plane!r} not in {self.name} ({self.kind}); allowed: "
                                f"{', '.join(own)}, or 'scaleup'")
        return plane

    def route(self, src: str, dst: str, plane: str = "scaleup") -> Route:
        """Parallel paths src -> dst on a plane under the current failures; cached per failure version."""
        key = (src, dst, plane)
        r = self._cache.get(key) if isinstance(src, str) and isinstance(dst, str) else None
        if r is None:
            if len(self._cache) >= ROUTE_CACHE_LIMIT:
                self._cache.clear()
            r = self._route(self._nidx(src), self._nidx(dst), self._plane(plane))
            self._cache[key] = r
        return r

    def _mk(self, si: int, di: int, plane: str, path_eids: np.ndarray, switches: int,
            flow: np.ndarray | None = None) -> Route:
        s = self._s
        cap = self.capacity
        pg = cap[path_eids].min(axis=1)
        flow = pg if flow is None else flow
        bw = float(flow.sum())
        if bw <= 0:
            return self._cut(si, di, plane, "every path is cut")
        lat = round(float(s.lat[path_eids[0]].sum()) + switches * self.system.switch_latency_us, 9)
        return Route(s.ids[si], s.ids[di], plane, _frozen(path_eids), _frozen(pg), _frozen(flow), bw,
                     int(path_eids.shape[1]), switches, lat, self.version)

    def _cut(self, si: int, di: int, plane: str, why: str) -> Route:
        s = self._s
        return Route(s.ids[si], s.ids[di], plane, _NO_PATHS, _NO_GBPS, _NO_GBPS, 0.0, 0, 0, math.inf,
                     self.version, True, f"partitioned: no live {plane} path {s.ids[si]} -> {s.ids[di]} ({why})")

    def _route(self, si: int, di: int, plane: str) -> Route:
        s = self._s
        if si == di:
            return Route(s.ids[si], s.ids[di], plane, _NO_PATHS, _NO_GBPS, _NO_GBPS, math.inf, 0, 0, 0.0,
                         self.version, False, "same element: no network transfer")
        for i in (si, di):
            if self._nfail[i]:
                return self._cut(si, di, plane, f"{s.ids[i]} has failed")
        if plane in ("d2d", "ub"):
            e = s.d2d_eid.get(si, {}).get(di)
            if e is not None and (plane == "d2d" or self.capacity[e] > 0):
                return self._mk(si, di, plane, np.array([[e]]), 0)
            if plane == "d2d":
                if e is None:
                    raise TopologyError(f"d2d route {s.ids[si]} -> {s.ids[di]}: the two dies are not in "
                                        "the same package (allowed: dies of one NPU, e.g. n07/npu3/d0 -> n07/npu3/d1)")
                return self._cut(si, di, plane, f"die-to-die link {self.link_id(e)} is down")
            if si in s.ub_access and di in s.ub_access:
                return self._route_ub(si, di)
            return self._route_generic(si, di, plane)
        return self._route_tree(si, di, plane)

    def _route_ub(self, si: int, di: int) -> Route:
        """Structural UB routing: all 7 sub-planes (and, across nodes, all their L2 chips) in parallel."""
        s = self._s
        cap = self.capacity
        acc_s, acc_d = s.ub_access[si], s.ub_access[di]
        cs, cd = cap[acc_s], cap[acc_d]
        access = np.minimum(cs, cd)
        a, b = int(s.nnode[si]), int(s.nnode[di])
        if a == b:  # same node: die -> L1(k) -> die for every live k
            ks = np.flatnonzero(access > 0)
            if len(ks) == 0:
                return self._cut(si, di, "ub", "every L1 access link is down")
            return self._mk(si, di, "ub", np.stack([acc_s[ks], acc_d[ks]], axis=1), 1)
        fab = self._pair_fabric(a, b)  # (K, J) min of the two L1-L2 links via each L2 chip
        pathcap = np.minimum(fab, access[:, None])
        ks, js = np.nonzero(pathcap > 0)
        if len(ks) == 0:
            return self._cut(si, di, "ub", "no sub-plane has a live L1-L2-L1 path")
        fab_k = fab.sum(axis=1)
        flow_k = np.minimum(access, fab_k)
        scale = np.divide(flow_k, fab_k, out=np.zeros_like(fab_k), where=fab_k > 0)
        flow = (fab * scale[:, None])[ks, js]
        paths = np.stack([acc_s[ks], s.l1l2[a, ks, js], s.l1l2[b, ks, js], acc_d[ks]], axis=1)
        return self._mk(si, di, "ub", paths, 3, flow)

    def _pair_fabric(self, a: int, b: int) -> np.ndarray:
        key = ("fabric", min(a, b), max(a, b))
        f = self._cache.get(key)
        if f is None:
            cap = self.capacity
            f = np.minimum(cap[self._s.l1l2[a]], cap[self._s.l1l2[b]])
            self._cache[key] = f
        return f

    def _route_tree(self, si: int, di: int, plane: str) -> Route:
        """RDMA / VPC / NVLink: up from both ends to the lowest common switch."""
        s = self._s
        par, pe, depth = s.parent[plane], s.parent_eid[plane], s.depth[plane]
        for i in (si, di):
            if depth[i] < 0:
                raise TopologyError(f"{s.ids[i]} ({s.nkind[i]}) is not on the {plane} plane of {self.name}")
        up_s, up_d, x, y = [], [], si, di
        while depth[x] > depth[y]:
            up_s.append(pe[x]); x = par[x]
        while depth[y] > depth[x]:
            up_d.append(pe[y]); y = par[y]
        while x != y and par[x] >= 0 and par[y] >= 0:
            up_s.append(pe[x]); x = par[x]
            up_d.append(pe[y]); y = par[y]
        if x != y:
            why = "the nvlink plane does not span nodes; use plane 'rdma'" if plane == "nvlink" else "not connected"
            return self._cut(si, di, plane, why)
        eids = np.array([[*up_s, *reversed(up_d)]], dtype=np.int64)
        cap = self.capacity[eids[0]]
        if (cap <= 0).any():
            return self._cut(si, di, plane, f"link {self.link_id(int(eids[0][np.argmin(cap)]))} is down")
        nodes = self._walk(si, eids[0])
        return self._mk(si, di, plane, eids, int(sum(s.is_switch[n] for n in nodes[1:-1])))

    def _walk(self, si: int, eids: Iterable[int]) -> list[int]:
        s = self._s
        nodes = [si]
        for e in eids:
            u, v = int(s.eu[e]), int(s.ev[e])
            nodes.append(v if u == nodes[-1] else u)
        return nodes

    def path_nodes(self, route: Route, i: int = 0) -> list[str]:
        """Element ids along path i of a route, src first."""
        return [self._s.ids[n] for n in self._walk(self._nidx(route.src), route.path_eids[i])]

    def _route_generic(self, si: int, di: int, plane: str) -> Route:
        """Fallback for rare endpoint pairs (e.g. to a switch): one shortest live path via networkx."""
        s = self._s
        cap = self.capacity
        planes = {plane, "d2d"} if plane == "ub" else {plane}

        def weight(u, v, d):
            return 1 if d["plane"] in planes and cap[d["eid"]] > 0 else None

        try:
            nodes = nx.shortest_path(self.graph, s.ids[si], s.ids[di], weight=weight)
        except nx.NetworkXNoPath:
            return self._cut(si, di, plane, "no live path")
        idx = [s.index[n] for n in nodes]
        eids = np.array([[s.edge_index[(u, v)] for u, v in zip(idx, idx[1:])]], dtype=np.int64)
        return self._mk(si, di, plane, eids, int(sum(s.is_switch[n] for n in idx[1:-1])))

    # ---- aggregate capacities for the performance model

    def _node(self, node) -> int:
        if isinstance(node, str):
            p = parse(node) if node.startswith("n") else None
            if p is None or p["kind"] != "node":
                raise self._unknown(node, "expected a node such as n07 or its index")
            node = p["node"]
        if not (isinstance(node, (int, np.integer)) and 0 <= node < self.system.nodes):
            raise self._unknown(node, f"node index out of range 0..{self.system.nodes - 1}")
        return int(node)

    def _need_ub(self, what: str) -> None:
        if self.kind != "supernode":
            raise TopologyError(f"{what}: {self.name} is a {self.kind} without a UB plane "
                                "(use plane 'rdma' for its inter-node capacity)")

    def node_uplink_gbps(self, node, healthy: bool = False) -> float:
        """A node's live inter-node UB capacity: the sum of its L1-L2 links (3,136 GB/s when healthy)."""
        self._need_ub("node_uplink_gbps")
        arr = self._s.base if healthy else self.capacity
        return float(arr[self._s.l1l2[self._node(node)]].sum())

    def ub_bandwidth_fraction(self, nodes: Iterable | None = None) -> float:
        """Live / healthy inter-node UB capacity (L1-L2 links) over a set of nodes (default all)."""
        self._need_ub("ub_bandwidth_fraction")
        idx = np.arange(self.system.nodes) if nodes is None else np.array([self._node(n) for n in nodes], dtype=np.int64)
        if len(idx) == 0:
            return 1.0
        e = self._s.l1l2[idx]
        return float(self.capacity[e].sum() / self._s.base[e].sum())

    def node_pair_bandwidth(self, a, b, plane: str | None = None) -> float:
        """Max GB/s between all accelerators of node a and of node b (default: ub on a supernode, rdma
        on a cluster). UB: per sub-plane, min(access of a, access of b, sum over L2 chips of the smaller
        of the two L1-L2 links), summed; a == b gives the node's total L1 access capacity."""
        plane = plane or ("ub" if self.kind == "supernode" else "rdma")
        plane = self._plane(plane)
        a, b = self._node(a), self._node(b)
        cap, s = self.capacity, self._s
        if plane == "ub":
            acc_a = cap[s.die_acc[a]].sum(axis=0)
            if a == b:
                return float(acc_a.sum())
            acc_b = cap[s.die_acc[b]].sum(axis=0)
            return float(np.minimum(np.minimum(acc_a, acc_b), self._pair_fabric(a, b).sum(axis=1)).sum())
        if plane == "rdma":
            bw = min(self.rdma_bandwidth(a), self.rdma_bandwidth(b))
            ra, rb = int(s.rack_of_node[a]), int(s.rack_of_node[b])
            if ra != rb:
                bw = min(bw, float(cap[s.leaf_up[ra]]), float(cap[s.leaf_up[rb]]))
            return bw
        if plane == "vpc":
            return min(self.vpc_bandwidth(a), self.vpc_bandwidth(b))
        if plane == "nvlink":
            if a != b:
                return 0.0
            return float(cap[[s.parent_eid["nvlink"][g] for g in s.die_idx[a].ravel()]].sum())
        raise TopologyError(f"node_pair_bandwidth: plane {plane!r} has no node-level capacity (allowed: ub, rdma, vpc, nvlink)")

    def rdma_bandwidth(self, node) -> float:
        """A node's live scale-out capacity: per NIC, min(NIC uplink, its dies' links), summed."""
        n, cap, s = self._node(node), self.capacity, self._s
        return float(np.minimum(cap[s.nic_up[n]], cap[s.nic_host[n]].sum(axis=-1)).sum())

    def vpc_bandwidth(self, node) -> float:
        """A node's live VPC capacity: its card's uplink, limited by what its hosts can still reach."""
        n, cap, s = self._node(node), self.capacity, self._s
        return float(min(cap[s.vpc_up[n]], cap[s.vpc_host[n]].sum()))


# ----------------------------------------------------------------------------------------------
# construction, caching, summaries, layout


def build(system: System, name: str = "custom") -> Topology:
    """Build a topology for any System (not cached); the catalog supplies its chips."""
    cat = catalog()
    chip = cat.chip(system.accelerator)
    cpu = cat.chip(system.cpu) if system.cpu else None
    return Topology(_Structure(name, system, chip, cpu))


@lru_cache(maxsize=None)
def _structure(system_name: str) -> _Structure:
    cat = catalog()
    system = cat.system(system_name)
    return _Structure(system_name, system, cat.chip(system.accelerator),
                      cat.chip(system.cpu) if system.cpu else None)


def topology(system_name: str) -> Topology:
    """A fresh (healthy) Topology for a catalog system; the structure is built once per process."""
    return Topology(_structure(system_name))


def topology_summary(system_name: str) -> dict:
    """JSON-friendly summary for the CLI: {"system", "kind", "counts", ...}."""
    t = topology(system_name)
    out = {"system": system_name, "kind": t.kind, "counts": t.counts(),
           "planes": sorted({p for p in t._s.eplane})}
    if t.kind == "supernode":
        out["node_uplink_gbps"] = t.node_uplink_gbps(0, healthy=True)
    out["node_rdma_gbps"] = t.rdma_bandwidth(0)
    out["node_vpc_gbps"] = t.vpc_bandwidth(0)
    return out


def layout_positions(system: str | Topology, detail: bool = False) -> dict[str, tuple[float, float]]:
    """(x, y) for drawing. Aggregated view: nodes stacked in their rack columns, sub-planes in a row
    above, RDMA leaves below each rack and the spine below them, VPC switch and storage at the side.
    With detail=True every graph element is placed around its node or sub-plane as well."""
    t = topology(system) if isinstance(system, str) else system
    s, sysm = t._s, t.system
    col, row = 10.0, 4.0  # drawing grid, arbitrary units
    per_rack = math.ceil(sysm.nodes / s.n_racks)
    pos: dict[str, tuple[float, float]] = {}
    for n in range(sysm.nodes):
        r = int(s.rack_of_node[n])
        pos[node_label(n)] = (r * col, (n - r * per_rack) * row)
    for r in range(s.n_racks):
        pos[rack_id(r)] = (r * col, -row)
        pos[leaf_id(r)] = (r * col, -2 * row)
    width = (s.n_racks - 1) * col
    pos[spine_id(0)] = (width / 2, -3 * row)
    top = (per_rack + 1) * row
    if sysm.kind == "supernode":
        for k in range(sysm.subplanes):
            pos[subplane_id(k)] = (width * (k + 0.5) / sysm.subplanes, top)
    pos[VPC_SWITCH] = (width + col, top / 2)
    pos[STORAGE] = (width + 2 * col, top / 2)
    if not detail:
        return pos
    frac = 0.8  # spread of an element cloud around its anchor, as a fraction of the grid cell
    for nid, a in t.graph.nodes(data=True):
        if nid in pos:
            continue
        k = a["kind"]
        if k == "l2":
            x0, y0 = pos[subplane_id(a["subplane"])]
            pos[nid] = (x0 + (a["index"] / max(1, sysm.l2_per_subplane - 1) - 0.5) * col / sysm.subplanes * frac,
                        y0 + row / 2)
            continue
        x0, y0 = pos[node_label(a["node"])]
        if k == "die":
            i = a["npu"] * s.dies_per_package + a["die"]
            m = sysm.npus_per_node * s.dies_per_package
            pos[nid] = (x0 + (i / max(1, m - 1) - 0.5) * col * frac, y0)
        elif k in ("l1", "nvswitch"):
            i = a.get("subplane", 0)
            pos[nid] = (x0 + (i / max(1, sysm.l1_per_node - 1) - 0.5) * col * frac if k == "l1" else x0, y0 + row / 3)
        elif k == "cpu":
            pos[nid] = (x0 + (a["cpu"] / max(1, sysm.cpus_per_node - 1) - 0.5) * col * frac / 2, y0 - row / 3)
        elif k == "rdma_nic":
            pos[nid] = (x0 + (a["npu"] / max(1, sysm.npus_per_node - 1) - 0.5) * col * frac, y0 - row / 3)
        elif k == "vpc_nic":
            pos[nid] = (x0 + col * frac / 2, y0 - row / 3)
    return pos
