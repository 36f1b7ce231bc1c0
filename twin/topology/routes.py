"""Routing under failures: parallel paths on a plane, and the node-level capacities the perf model reads.

Why structural routing: the engine routes often, and UB paths in a supernode are fully determined by
the fabric shape (die -> L1(k) -> L2(k, j) -> L1(k) -> die for every live k, j), so routes are
computed with numpy over those index arrays from the live capacities, not by graph search. The
RDMA, VPC and NVLink planes are trees (host -> NIC -> leaf -> spine), routed through their lowest
common ancestor. A networkx search is kept only as a fallback for unusual endpoint pairs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import networkx as nx
import numpy as np

from twin.topology.ids import TopologyError, parse
from twin.topology.structure import frozen

ROUTE_CACHE_LIMIT = 200_000  # software bound on cached routes per failure version (memory, not physics)

_NO_PATHS = frozen(np.zeros((0, 0), dtype=np.int64))
_NO_GBPS = frozen(np.zeros(0))


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


class Routing:
    """Routing methods of `Topology` (uses its structure `_s`, live `capacity`, `_nfail` and `_cache`)."""

    def _plane(self, plane: str) -> str:
        if plane == "scaleup":
            return "ub" if self.kind == "supernode" else "nvlink"
        own = {"supernode": ("ub", "d2d", "rdma", "vpc"), "cluster": ("nvlink", "rdma", "vpc")}[self.kind]
        if self._s.dies_per_package == 1:
            own = tuple(p for p in own if p != "d2d")
        if self.system.unified_scaleout:
            own = tuple(p for p in own if p not in ("rdma", "vpc"))
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
        return Route(s.ids[si], s.ids[di], plane, frozen(path_eids), frozen(pg), frozen(flow), bw,
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
            if s.fabric == "nd-fullmesh" and s.die_lin[si] >= 0 and s.die_lin[di] >= 0:
                return self._route_mesh(si, di)
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

    def _route_mesh(self, si: int, di: int) -> Route:
        """nD-FullMesh: the minimal paths that fix the differing coordinates in each cyclic order of them.
        These h paths (h = differing dimensions = hops) are link-disjoint (each starts and ends on a
        different dimension), so each carries its own bottleneck; every die between is a relay counted
        as a switch hop (assumption: the NPU's UB port forwards like a switch chip). When all of them are
        cut, the shortest live detour (UB-Mesh's All-Path-Routing also uses non-minimal paths)."""
        s = self._s
        g, t = int(s.die_lin[si]), int(s.die_lin[di])
        dims, strides = s.system.mesh_dims, s.mesh_strides
        src = [(g // int(strides[i])) % d for i, d in enumerate(dims)]
        dst = [(t // int(strides[i])) % d for i, d in enumerate(dims)]
        diff = [i for i in range(len(dims)) if src[i] != dst[i]]
        paths = []
        for r in range(len(diff)):
            x, row = g, []
            for i in diff[r:] + diff[:r]:
                row.append(int(s.mesh_eid[i][x, dst[i]]))
                x += (dst[i] - (x // int(strides[i])) % dims[i]) * int(strides[i])
            paths.append(row)
        eids = np.array(paths, dtype=np.int64)
        live = self.capacity[eids].min(axis=1) > 0
        if not live.any():
            return self._route_generic(si, di, "ub")
        return self._mk(si, di, "ub", eids[live], len(diff) - 1)

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
        relays = s.fabric == "nd-fullmesh"   # a die between two mesh links forwards like a switch (_route_mesh)
        return self._mk(si, di, plane, eids, int(sum(s.is_switch[n] or (relays and s.nkind[n] == "die")
                                                     for n in idx[1:-1])))

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
        """A node's live inter-node UB capacity: the sum of its L1-L2 links (3,136 GB/s when healthy), or
        on an nD-FullMesh of its links along the dimensions that leave the node."""
        self._need_ub("node_uplink_gbps")
        arr = self._s.base if healthy else self.capacity
        return float(arr[self._s.node_up[self._node(node)]].sum())

    def ub_bandwidth_fraction(self, nodes: Iterable | None = None) -> float:
        """Live / healthy inter-node UB capacity (L1-L2 links, or mesh links leaving the node) over a set of
        nodes (default all)."""
        self._need_ub("ub_bandwidth_fraction")
        idx = np.arange(self.system.nodes) if nodes is None else np.array([self._node(n) for n in nodes], dtype=np.int64)
        if len(idx) == 0:
            return 1.0
        e = self._s.node_up[idx]
        return float(self.capacity[e].sum() / self._s.base[e].sum())

    def node_pair_bandwidth(self, a, b, plane: str | None = None) -> float:
        """Max GB/s between all accelerators of node a and of node b (default: ub on a supernode, rdma
        on a cluster). UB: per sub-plane, min(access of a, access of b, sum over L2 chips of the smaller
        of the two L1-L2 links), summed; a == b gives the node's total L1 access capacity."""
        plane = plane or ("ub" if self.kind == "supernode" else "rdma")
        plane = self._plane(plane)
        a, b = self._node(a), self._node(b)
        cap, s = self.capacity, self._s
        if plane == "ub" and s.fabric == "nd-fullmesh":   # an upper bound: the mesh's path diversity assumed to carry it
            if a == b:
                mine = np.asarray(s.nnode)[s.eu] == a
                return float(cap[mine & (np.asarray(s.nnode)[s.ev] == a) & (np.asarray(s.eplane) == "ub")].sum())
            return min(float(cap[s.node_up[a]].sum()), float(cap[s.node_up[b]].sum()))
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
        self._plane("rdma")
        n, cap, s = self._node(node), self.capacity, self._s
        return float(np.minimum(cap[s.nic_up[n]], cap[s.nic_host[n]].sum(axis=-1)).sum())

    def vpc_bandwidth(self, node) -> float:
        """A node's live VPC capacity: its card's uplink, limited by what its hosts can still reach."""
        self._plane("vpc")
        n, cap, s = self._node(node), self.capacity, self._s
        return float(min(cap[s.vpc_up[n]], cap[s.vpc_host[n]].sum()))

