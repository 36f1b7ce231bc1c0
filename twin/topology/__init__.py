"""Topology of a system: graph builders, routing and capacity under failures.

One builder turns a catalog `System` into a networkx graph, for both kinds:

* ``supernode``: dies, CPUs and a UB fabric described in the catalog (`systems.toml`), one of
  ``ub-clos-2tier`` (CloudMatrix384: L1 UB chips per node, sub-planes of L2 chips, optical L1-L2 links)
  or ``nd-fullmesh`` (UB-Mesh: dies fully meshed along each dimension of ``mesh_dims``), plus the RDMA
  (scale-out) and VPC (datacenter) planes.
* ``cluster`` (8-GPU servers): GPUs on an NVSwitch per server, plus the same RDMA and VPC planes.

Why the structure/state split: the graph and its per-link arrays are built once per system and
shared (`topology(name)` caches them); each `Topology` object only holds failure state in numpy
arrays, so a fault never rebuilds anything and the engine can keep per-link arrays indexed by the
stable edge index ``eid``.

Units: every ``capacity_gbps`` is GB/s one way (links are full duplex, each direction has it);
catalog NIC speeds (``rdma_nic_gbps``, ``vpc_gbps``, chip ``rdma_gbps``) are Gbps and are converted.

The package: `ids` (every component id, generated and parsed), `structure` (the immutable graph
builder, from the catalog's description), `static` (ids, targets, link statics: what the dashboard
draws), `state` (failure state), `routes` (routing and node-level capacities) and `summary` (counts
per level and bisection bandwidth, for `python -m twin topology`).

Modelling assumptions not in the catalog (documented here because they are shapes, not numbers):
the RDMA fabric is one leaf switch per compute rack (a node is its own rack when the system has no
``compute_racks``) under one logical non-blocking spine; a leaf's uplink equals the sum of its NICs;
host-to-VPC-card links and the object-storage link never limit (the card and the service do).
"""
from __future__ import annotations

from functools import lru_cache

from twin.model.config import System, catalog

from twin.topology.ids import (STORAGE, VPC_SWITCH, TopologyError, UnknownElementError, comm_rack_id, cpu_id, die_id,
                  kind_of, l1_id, l2_id, leaf_id, link_id, node_label, node_of, npu_id, nvswitch_id, parse,
                  rack_id, rdma_nic_id, spine_id, subplane_id, subplane_of, vpc_nic_id)
from twin.topology.routes import ROUTE_CACHE_LIMIT, Route
from twin.topology.state import Topology
from twin.topology.static import LinkArrays, StaticTopology
from twin.topology.structure import BITS_PER_BYTE, SWITCH_KINDS, TREE_PLANES, Structure
from twin.topology.summary import bisection_gbps, summary

__all__ = ["BITS_PER_BYTE", "LinkArrays", "PLANES", "PLANE_ALIASES", "ROUTE_CACHE_LIMIT", "Route", "STORAGE",
           "SWITCH_KINDS", "StaticTopology", "Structure", "TREE_PLANES", "Topology", "TopologyError",
           "UnknownElementError", "VPC_SWITCH", "bisection_gbps", "build", "comm_rack_id", "cpu_id", "die_id", "kind_of", "l1_id",
           "l2_id", "leaf_id", "link_id", "node_label", "node_of", "npu_id", "nvswitch_id", "parse", "rack_id",
           "rdma_nic_id", "spine_id", "static", "subplane_id", "subplane_of", "topology", "topology_summary",
           "vpc_nic_id"]

PLANES = ("ub", "d2d", "rdma", "vpc", "nvlink")
PLANE_ALIASES = ("scaleup",)  # "scaleup" = ub on a supernode, nvlink on a cluster

def build(system: System, name: str = "custom") -> Topology:
    """Build a topology for any System (not cached); the catalog supplies its chips."""
    cat = catalog()
    chip = cat.chip(system.accelerator)
    cpu = cat.chip(system.cpu) if system.cpu else None
    return Topology(Structure(name, system, chip, cpu))


@lru_cache(maxsize=None)
def _structure(system_name: str) -> Structure:
    cat = catalog()
    system = cat.system(system_name)
    return Structure(system_name, system, cat.chip(system.accelerator),
                      cat.chip(system.cpu) if system.cpu else None)


def topology(system_name: str) -> Topology:
    """A fresh (healthy) Topology for a catalog system; the structure is built once per process."""
    return Topology(_structure(system_name))


def topology_summary(system_name: str) -> dict:
    """JSON-friendly summary for the CLI: {"system", "kind", "fabric", "npus", ..., "bisection_gbps", "counts"}."""
    t = topology(system_name)
    out = summary(system_name, t._s, t.counts())
    out.update(counts=t.counts(), planes=sorted(set(t._s.eplane)))
    if t.kind == "supernode":
        out["node_uplink_gbps"] = t.node_uplink_gbps(0, healthy=True)
    if not t.system.unified_scaleout:
        out["node_rdma_gbps"] = t.rdma_bandwidth(0)
        out["node_vpc_gbps"] = t.vpc_bandwidth(0)
    return out

def static(system_name: str) -> StaticTopology:
    """The failure-free topology of a catalog system (shared; built once per process)."""
    return StaticTopology.of(_structure(system_name))
