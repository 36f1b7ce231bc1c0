"""What a topology is without any failure state: ids, targets, link statics, counts.

`StaticTopology` answers every question that does not depend on failures (which ids exist, which
link joins two elements, what a fault target resolves to, healthy capacities). The engine's
`Topology` extends it with failure state and routing; the dashboard only ever holds the static
part, handed over in the engine's snapshot together with the live capacities (`twin.engine.snapshot`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from twin.topology.ids import UnknownElementError, link_id, node_label, parse, subplane_id
from twin.topology.structure import Structure


@dataclass(frozen=True)
class LinkArrays:
    """Per-link arrays indexed by eid: live capacity (failures and degradation applied) and statics."""

    capacity_gbps: np.ndarray
    base_gbps: np.ndarray
    latency_us: np.ndarray
    optical: np.ndarray
    ends: list[tuple[str, str, str, str]]  # (u, v, plane, kind), for the UI
    version: int  # failure version the capacities belong to; arrays are read-only (copy to write)



class StaticTopology:
    """A system's structure (shared, immutable): ids, targets and healthy link arrays."""

    def __init__(self, structure: Structure):
        self._s = structure
        self.name = structure.name
        self.system = structure.system
        self.kind = structure.system.kind

    @property
    def graph(self):
        """The shared, frozen networkx graph (made on first use)."""
        return self._s.graph

    @classmethod
    def of(cls, structure: Structure) -> "StaticTopology":
        """The one static topology of a structure (kept on it: every holder shares it)."""
        st = structure.__dict__.get("static")
        if st is None:
            st = structure.static = cls(structure)
        return st

    @property
    def static(self) -> "StaticTopology":
        """The failure-free part (itself here; a `Topology` returns its shared static twin)."""
        return StaticTopology.of(self._s)

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

    def node_ids(self) -> list[str]:
        """Server node ids ("n00", "n01", ...), in node order."""
        return [node_label(n) for n in range(self.system.nodes)]

    def node_racks(self) -> np.ndarray:
        """The compute rack of each node (index), in node order: nodes of a rack are consecutive."""
        return self._s.rack_of_node

    def subplane_ids(self) -> list[str]:
        """UB sub-plane ids ("sp0", ...); none on a cluster."""
        return [subplane_id(k) for k in range(self.system.subplanes)] if self.kind == "supernode" else []

    def npu_ids(self) -> list[str]:
        """Accelerator package ids ("n07/npu3"), in die order."""
        return list(dict.fromkeys(d.rsplit("/", 1)[0] for d in self.die_ids))

    def dies_per_package(self) -> int:
        return self._s.dies_per_package

    def link_arrays(self) -> LinkArrays:
        """Per-link arrays with healthy capacities (a `Topology` returns live ones)."""
        s = self._s
        return LinkArrays(s.base, s.base, s.lat, s.optical, s.ends, 0)

    def counts(self) -> dict[str, int]:
        """Component and link counts by kind (static: failures do not change them)."""
        return dict(self._s.counts)
