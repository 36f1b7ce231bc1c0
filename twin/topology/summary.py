"""What `python -m twin topology` prints: counts per level, links by kind and medium, bisection bandwidth.

Bisection is worked out from the fabric's shape, never by a cut search over the graph (an 8K-NPU
system has ~10^5 links): GB/s one way across the cheapest balanced cut of the scale-up fabric.
"""
from __future__ import annotations

from twin.topology.structure import Structure

SWITCH_LEVELS = ("l1", "l2", "nvswitch", "rdma_leaf", "rdma_spine", "vpc_switch")


def bisection_gbps(s: Structure) -> tuple[float, str]:
    """(GB/s one way, how it was obtained) across a balanced cut of the scale-up fabric.

    * ub-clos-2tier: every L2 chip reaches every node, so the cheapest balanced cut severs the
      L1-L2 links of half the nodes: floor(nodes / 2) x a node's uplink.
    * nd-fullmesh: cutting dimension i (even size d) in two halves severs, in each of the N / d full
      meshes along it, (d / 2)^2 links: the smallest such cut over the dimensions (an upper bound on the
      true bisection; dimensions of odd size cannot be halved and are skipped unless all are odd).
    * cluster: scale-out over RDMA under a non-blocking spine: floor(nodes / 2) x a node's NICs.
    """
    sysm = s.system
    half = sysm.nodes // 2
    if s.fabric == "ub-clos-2tier":
        return half * float(s.base[s.node_up[0]].sum()), "floor(nodes/2) x node L1-L2 uplink"
    if s.fabric == "nd-fullmesh":
        n = len(s.die_ids)
        cuts = [(n // d) * (d // 2) * (d - d // 2) * g for d, g in zip(sysm.mesh_dims, sysm.mesh_link_gbps)]
        even = [c for c, d in zip(cuts, sysm.mesh_dims) if d % 2 == 0] or cuts
        return float(min(even)), "smallest halving cut along one mesh dimension"
    return half * float(s.base[s.nic_up[0]].sum()), "floor(nodes/2) x node RDMA NICs"


def summary(name: str, s: Structure, counts: dict) -> dict:
    """The figures of one system's topology, JSON-friendly."""
    sysm = s.system
    bis, how = bisection_gbps(s)
    links = {k.removeprefix("link:"): v for k, v in counts.items() if k.startswith("link:")}
    return {"system": name, "kind": sysm.kind, "fabric": s.fabric or "nvlink", "label": sysm.label or "catalog",
            "accelerator": sysm.accelerator + (" (prediction)" if s.chip.label else ""),
            "npus": counts["npu"], "dies": counts["die"], "cpus": counts["cpu"], "nodes": counts["node"],
            "racks": {"compute": counts["rack"], "communication": counts["comm_rack"]},
            "switches": {k: counts[k] for k in SWITCH_LEVELS if counts.get(k)},
            "links": {"total": counts["links"], "optical": counts["optical_links"],
                      "electrical": counts["electrical_links"], "by_kind": links},
            "bisection_gbps": round(bis, 3), "bisection": how,
            **({"mesh_dims": list(sysm.mesh_dims)} if s.fabric == "nd-fullmesh" else {})}
