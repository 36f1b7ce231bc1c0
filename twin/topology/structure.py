"""The immutable structure of a system's topology: graph, per-link arrays, routing index arrays.

Built once per system and shared by every `Topology` (failure state) and `StaticTopology` (what the
dashboard draws). Modelling assumptions are listed in the package docstring (`twin.topology`).
This module is one builder (~300 lines) on purpose: the per-plane loops share their index arrays.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from functools import cached_property

import networkx as nx
import numpy as np

from twin.model.config import Chip, System, check_fabric

from twin.topology.ids import (STORAGE, VPC_SWITCH, comm_rack_id, cpu_id, die_id, l1_id, l2_id, leaf_id,
                  node_label, npu_id, nvswitch_id, rack_id, rdma_nic_id, spine_id, subplane_id, vpc_nic_id)

BITS_PER_BYTE = 8            # unit conversion: catalog NIC speeds are Gbps, link capacities GB/s
SWITCH_KINDS = frozenset({"l1", "l2", "rdma_switch", "vpc_switch", "nvswitch"})
TREE_PLANES = ("rdma", "vpc", "nvlink")
RDMA_CORE_RACK = "net-rdma"  # where the spine sits: outside every compute rack, so its links are optical
DC_RACK = "net-dc"            # datacenter network row: VPC switch and object storage


class _Builder:
    """Accumulates nodes and edges in plain lists (one column per link attribute); the networkx graph
    is made from them only when someone asks for it (`Structure.graph`)."""

    def __init__(self, all_optical: bool = False) -> None:
        self.all_optical = all_optical   # a link between two nodes is optical even inside a rack
        self.ids: list[str] = []
        self.index: dict[str, int] = {}
        self.nattrs: list[dict] = []
        self.eu: list[int] = []
        self.ev: list[int] = []
        self.eplane: list[str] = []
        self.ekind: list[str] = []
        self.ecap: list[float] = []
        self.elat: list[float] = []
        self.eoptical: list[bool] = []

    def node(self, nid: str, kind: str, rack: str, **attrs) -> int:
        i = len(self.ids)
        self.ids.append(nid)
        self.index[nid] = i
        self.nattrs.append({"kind": kind, "rack": rack, **attrs})
        return i

    def edge(self, u: int, v: int, plane: str, kind: str, capacity: float, latency: float) -> int:
        eid = len(self.eu)
        a, b = self.nattrs[u], self.nattrs[v]
        cross = self.all_optical and a.get("node", b.get("node")) != b.get("node", a.get("node"))
        self.eu.append(u)
        self.ev.append(v)
        self.eplane.append(plane)
        self.ekind.append(kind)
        self.ecap.append(float(capacity))
        self.elat.append(float(latency))
        self.eoptical.append(a["rack"] != b["rack"] or cross)
        return eid


def frozen(a) -> np.ndarray:
    arr = np.asarray(a)
    arr.flags.writeable = False
    return arr


class Structure:
    """Everything that does not change with failures: graph, per-link arrays, routing index arrays."""

    def __init__(self, name: str, system: System, chip: Chip, cpu_chip: Chip | None):
        check_fabric(system, chip.dies_per_package, name)
        self.name, self.system, self.chip, self.cpu_chip = name, system, chip, cpu_chip
        s = system
        self.fabric = s.ub_fabric
        b = _Builder(s.all_optical)
        nodes, npn, dpp, cpn = s.nodes, s.npus_per_node, chip.dies_per_package, s.cpus_per_node
        self.dies_per_package = dpp
        self.n_racks = s.compute_racks or nodes
        per_rack = math.ceil(nodes / self.n_racks)
        self.rack_of_node = frozen([n // per_rack for n in range(nodes)])
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
        self.die_idx, self.cpu_idx, self.d2d_eid = frozen(die_idx), frozen(cpu_idx), d2d_eid
        parent = {p: {} for p in TREE_PLANES}  # plane -> child nidx -> (parent nidx, eid)

        # scale-up plane
        self.ub_access: dict[int, np.ndarray] = {}  # UB endpoint nidx -> eid to L1 chip k, per k (Clos)
        self.node_up = np.zeros((nodes, 0), dtype=np.int64)  # per node: eids of its inter-node UB links
        if self.fabric == "ub-clos-2tier":
            self._build_ub(b, die_idx, cpu_idx)
        elif self.fabric == "nd-fullmesh":
            self._build_mesh(b, die_idx, cpu_idx)
        else:
            nv_gbps = s.nvlink_gbps or chip.nvlink_gbps
            nv_lat = max(0.0, (s.nvlink_latency_us - sw) / 2)  # GPU -> NVSwitch -> GPU = nvlink_latency_us
            for n in range(nodes):
                rk = rack_id(int(self.rack_of_node[n]))
                nvs = b.node(nvswitch_id(n), "nvswitch", rk, node=n)
                for g in die_idx[n].ravel():
                    parent["nvlink"][int(g)] = (nvs, b.edge(int(g), nvs, "nvlink", "gpu-nvswitch", nv_gbps, nv_lat))

        if s.unified_scaleout:   # scale-out and datacenter traffic ride UB: no NIC, no VPC card (a what-if)
            self.leaf_up = self.vpc_up = frozen(np.zeros(0, dtype=np.int64))
            self.nic_up = self.vpc_host = frozen(np.zeros((nodes, 0), dtype=np.int64))
            self.nic_host = frozen(np.zeros((nodes, 0, dpp), dtype=np.int64))
        else:
            self._build_rdma(b, die_idx, parent)
            self._build_vpc(b, die_idx, cpu_idx, parent)

        # flat arrays
        self.ids = b.ids
        self.index = b.index
        self.nkind = [a["kind"] for a in b.nattrs]
        self.nnode = frozen([a.get("node", -1) for a in b.nattrs])
        self.is_switch = frozen([k in SWITCH_KINDS for k in self.nkind])
        self.eu, self.ev = frozen(np.array(b.eu, dtype=np.int64)), frozen(np.array(b.ev, dtype=np.int64))
        self.base = frozen(b.ecap)
        self.lat = frozen(b.elat)
        self.eplane = b.eplane
        self.ekind = b.ekind
        self.optical = frozen(b.eoptical)
        self._nattrs = b.nattrs
        self.ends = list(zip([b.ids[u] for u in b.eu], [b.ids[v] for v in b.ev], b.eplane, b.ekind))
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

        self.groups = self._groups(b)
        self.counts = self._counts()
        self.examples = self._examples()

    def _build_rdma(self, b: _Builder, die_idx: np.ndarray, parent: dict) -> None:
        """RDMA plane: die -> NIC (one per package) -> leaf (one per rack) -> spine."""
        s, chip = self.system, self.chip
        nodes, npn, dpp = s.nodes, s.npus_per_node, die_idx.shape[2]
        L, sw = s.link_latency_us, s.switch_latency_us
        nic_gbps = s.rdma_nic_gbps / BITS_PER_BYTE
        die_nic_gbps = chip.rdma_gbps / BITS_PER_BYTE if chip.rdma_gbps else nic_gbps
        tree = 4 * L + 3 * sw  # NIC-leaf, leaf-spine, spine-leaf, leaf-NIC links; 3 switches
        rdma_host_lat = max(0.0, (s.rdma_latency_us - tree) / 2)  # cross-rack path = rdma_latency_us
        spine = b.node(spine_id(0), "rdma_switch", RDMA_CORE_RACK, role="spine")
        leaves, leaf_up = [], []
        for r in range(self.n_racks):
            in_rack = int(np.sum(self.rack_of_node == r))
            lf = b.node(leaf_id(r), "rdma_switch", rack_id(r), role="leaf", rack_index=r)
            e = b.edge(lf, spine, "rdma", "leaf-spine", in_rack * npn * nic_gbps, L)
            parent["rdma"][lf] = (spine, e)
            leaves.append(lf)
            leaf_up.append(e)
        self.leaf_up = frozen(leaf_up)
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
        self.nic_up, self.nic_host = frozen(nic_up), frozen(nic_host)

    def _build_vpc(self, b: _Builder, die_idx: np.ndarray, cpu_idx: np.ndarray, parent: dict) -> None:
        """VPC plane: dies and CPUs -> the node's VPC card -> datacenter VPC switch (object storage hangs off it)."""
        s, nodes = self.system, self.system.nodes
        L, sw = s.link_latency_us, s.switch_latency_us
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
        self.vpc_up, self.vpc_host = frozen(vpc_up), frozen(np.array(vpc_host, dtype=np.int64))

    @cached_property
    def edge_index(self) -> dict[tuple[int, int], int]:
        """(u, v) and (v, u) node indices -> eid; made on first use (an 8K-NPU system has ~10^5 links)."""
        out: dict[tuple[int, int], int] = {}
        for e, (u, v) in enumerate(zip(self.eu.tolist(), self.ev.tolist())):
            out[(u, v)] = e
            out[(v, u)] = e
        return out

    @cached_property
    def graph(self) -> nx.Graph:
        """The frozen networkx graph, made on first use: routing and the engine read the arrays instead."""
        g = nx.Graph(name=self.name, system_kind=self.system.kind)
        g.add_nodes_from(zip(self.ids, self._nattrs))
        g.add_edges_from((u, v, {"plane": p, "medium": "optical" if o else "electrical", "capacity_gbps": c,
                                 "latency_us": la, "eid": e, "kind": k})
                         for e, ((u, v, p, k), c, la, o) in enumerate(zip(self.ends, self.base.tolist(),
                                                                          self.lat.tolist(), self.optical.tolist())))
        return nx.freeze(g)

    def _build_ub(self, b: _Builder, die_idx: np.ndarray, cpu_idx: np.ndarray) -> None:
        """UB fabric: every die and CPU to each L1 chip of its node; L1 chip k to all L2 chips of sub-plane k."""
        s, chip = self.system, self.chip
        K, J, nodes = s.l1_per_node, s.l2_per_subplane, s.nodes
        L = s.link_latency_us
        l2 = np.zeros((K, J), dtype=np.int64)
        total = K * J
        comm = max(1, s.comm_racks)
        for k in range(K):
            for j in range(J):
                rk = comm_rack_id((k * J + j) * comm // total)
                l2[k, j] = b.node(l2_id(k, j), "l2", rk, subplane=k, index=j)
        self.l2_idx = frozen(l2)
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
                self.ub_access[int(g)] = frozen(acc)
            if cpu_l1_gbps > 0:
                for c in cpu_idx[n]:
                    acc = [b.edge(int(c), int(l1[n, k]), "ub", "cpu-l1", cpu_l1_gbps, L) for k in range(K)]
                    self.ub_access[int(c)] = frozen(acc)
            for k in range(K):
                for j in range(J):
                    l1l2[n, k, j] = b.edge(int(l1[n, k]), int(l2[k, j]), "ub", "l1-l2", s.l1_l2_link_gbps, L)
        self.l1_idx, self.l1l2, self.die_acc = frozen(l1), frozen(l1l2), frozen(die_acc)
        self.node_up = frozen(l1l2.reshape(nodes, K * J))

    def _build_mesh(self, b: _Builder, die_idx: np.ndarray, cpu_idx: np.ndarray) -> None:
        """UB-Mesh nD-FullMesh: dies numbered in (node, npu, die) order get mixed-radix coordinates over
        mesh_dims (innermost first); along each dimension every die is linked to every die that differs
        from it in that coordinate only. Links: dies x sum(d - 1) / 2, never dies^2. A CPU reaches the UB
        plane through each die of its node (assumption: UB-Mesh pools CPUs on the same bus, no L1 chip)."""
        s, L = self.system, self.system.link_latency_us
        flat = die_idx.ravel()
        n_dies, dims = len(flat), s.mesh_dims
        strides = np.cumprod((1, *dims[:-1]))
        self.mesh_strides = frozen(strides)
        self.die_flat = frozen(flat)                                  # mesh position -> graph index
        self.die_lin = np.full(len(b.ids), -1, dtype=np.int64)        # graph index -> mesh position
        self.die_lin[flat] = np.arange(n_dies)
        self.die_lin = frozen(self.die_lin)
        pos = np.arange(n_dies)
        mesh_eid = []
        for i, (d, gbps) in enumerate(zip(dims, s.mesh_link_gbps)):
            coord = (pos // strides[i]) % d
            eid = np.full((n_dies, d), -1, dtype=np.int64)  # eid[g, c]: link from die g to its peer at coordinate c
            for g in range(n_dies):
                a = int(coord[g])
                for c in range(a + 1, d):
                    h = g + (c - a) * int(strides[i])
                    eid[g, c] = eid[h, a] = b.edge(int(flat[g]), int(flat[h]), "ub", f"mesh-d{i}", gbps, L)
            mesh_eid.append(frozen(eid))
        self.mesh_eid = tuple(mesh_eid)
        per_node = die_idx.shape[1] * die_idx.shape[2]
        inner = 0   # dimensions that stay inside a node: check_fabric makes their product a node's dies
        while int(np.prod(dims[:inner])) < per_node:
            inner += 1
        self.mesh_inner_dims = inner
        if inner < len(dims):   # links along the outer dimensions leave the node; -1 marks a die's own coordinate
            up = np.concatenate([self.mesh_eid[i].reshape(s.nodes, -1) for i in range(inner, len(dims))], axis=1)
            self.node_up = frozen(up[up >= 0].reshape(s.nodes, -1))
        cpu_gbps = self.cpu_chip.ub_gbps / per_node if self.cpu_chip and s.cpu_l1_links else 0.0
        if cpu_gbps > 0:
            for n in range(s.nodes):
                for c in cpu_idx[n]:
                    for g in die_idx[n].ravel():
                        b.edge(int(c), int(g), "ub", "cpu-die", cpu_gbps, L)

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
        return {g: frozen(np.array(m, dtype=np.int64)) for g, m in groups.items()}

    def _counts(self) -> dict[str, int]:
        s = self.system
        kinds = Counter(self.nkind)
        out = {"node": s.nodes, "rack": self.n_racks, "comm_rack": s.comm_racks if s.kind == "supernode" else 0,
               "subplane": s.subplanes if s.kind == "supernode" else 0,
               "npu": s.nodes * s.npus_per_node}
        for k in ("die", "cpu", "l1", "l2", "nvswitch", "rdma_nic", "rdma_switch", "vpc_nic", "vpc_switch", "storage"):
            out[k] = kinds.get(k, 0)
        out["rdma_leaf"] = self.n_racks
        out["rdma_spine"] = out["rdma_switch"] - self.n_racks
        out.update({f"link:{k}": n for k, n in Counter(self.ekind).items()})
        out.update({f"plane:{p}": n for p, n in Counter(self.eplane).items()})
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

