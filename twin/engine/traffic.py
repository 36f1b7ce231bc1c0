"""Per-link utilisation derived from per-node traffic: traffic spreads evenly over live paths.

UB inter-node traffic of a node spreads over its live L1-L2 optical uplinks (the flat fabric
sprays over every sub-plane and L2 chip), so one link's load is the node's traffic times its
share of the node's live uplink capacity. On an nD-FullMesh the mesh links that leave a node play
the uplinks' part (each counted for its first end's node), and those inside it the access links'. RDMA traffic loads the node's NICs the same way.

A GPU cluster has no UB: the engine's scale-up bucket (expert all-to-all) crosses servers over
RDMA and stays inside a server on NVLink, so a node's off-diagonal traffic loads its NICs (with the
KV transfers) and its diagonal traffic loads its GPU-NVSwitch links.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from twin.topology import parse
from twin.engine.ports import TrafficView

KINDS = ("l1-l2", "die-l1", "cpu-l1", "d2d", "die-nic", "nic-leaf", "leaf-spine", "host-vpc",
         "vpc-switch", "switch-storage", "gpu-nvswitch")


@lru_cache(maxsize=4)
def _link_index(system: str, ends: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Per eid: kind code and the node the link belongs to (-1 when it has none)."""
    kind = np.full(len(ends), -1, dtype=np.int64)
    node = np.full(len(ends), -1, dtype=np.int64)
    for eid, (u, v, plane, k) in enumerate(ends):
        kind[eid] = KINDS.index(k) if k in KINDS else -1
        mesh = plane == "ub" and kind[eid] < 0
        nu = parse(u).get("node")
        nv = parse(v).get("node") if nu is None or mesh else None   # (the second end only when it counts)
        n = nu if nu is not None else nv
        if n is not None:
            node[eid] = n
        if mesh:                              # an nD-FullMesh: links leaving the node count as its uplinks,
            kind[eid] = KINDS.index("l1-l2" if nu is not None and nv is not None and nu != nv else "die-l1")   # the rest as access
    return kind, node


def reports(eng: TrafficView) -> dict:
    """Snapshot field: each link's utilisation over the last interval."""
    return {"link_util": lambda: link_utilisation(eng)}


def link_utilisation(eng: TrafficView) -> np.ndarray:
    topo, m = eng.topo, eng.metrics
    la = topo.link_arrays()
    kind, node = _link_index(eng.dep.system, tuple(la.ends))
    cap = np.asarray(la.capacity_gbps, dtype=float)
    util = np.zeros(len(cap), dtype=np.float32)
    mat = m.last_node_gbps
    inter = mat.copy()
    np.fill_diagonal(inter, 0.0)
    out_ub, in_ub = inter.sum(axis=1), inter.sum(axis=0)
    node_ub = np.maximum(out_ub, in_ub)
    total_node = np.maximum(mat.sum(axis=1), mat.sum(axis=0))
    rdma = np.maximum(*m.last_rdma_gbps)
    if topo.kind != "supernode":          # no UB: inter-node all-to-all rides the NICs
        rdma = rdma + node_ub

    def per_node(sel: np.ndarray, load: np.ndarray) -> None:
        live_cap = np.bincount(node[sel], weights=cap[sel], minlength=len(load))
        share = np.divide(load, live_cap, out=np.zeros_like(load), where=live_cap > 0)
        util[sel] = share[node[sel]] * (cap[sel] > 0)

    per_node(kind == KINDS.index("l1-l2"), node_ub)
    per_node(kind == KINDS.index("die-l1"), total_node)
    per_node(kind == KINDS.index("die-nic"), rdma)
    per_node(kind == KINDS.index("nic-leaf"), rdma)
    per_node(kind == KINDS.index("gpu-nvswitch"), np.diag(mat).copy())
    return util
