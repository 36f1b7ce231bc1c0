"""A topology with failure state: fail, restore and degrade parts; live capacities; routing; and
the health of parts that keep running slowly (gray failures): a die's compute speed and HBM
bandwidth, a CPU's speed (its DRAM and the EMS server on it), as fractions of a healthy part's.

Cheap to create: the structure is shared (`structure.Structure`); failures live in numpy arrays here,
never in the graph.
"""
from __future__ import annotations

import numpy as np

from twin.topology.routes import Routing
from twin.topology.static import LinkArrays, StaticTopology
from twin.topology.structure import Structure
from twin.topology.ids import TopologyError


# health aspect -> the element kind that carries it (a group target sets it on its elements of that kind)
HEALTH_ASPECTS = {"compute": "die", "hbm": "die", "cpu": "cpu"}


class Topology(Routing, StaticTopology):
    """A system's topology plus its failure state.

    ``graph`` is the shared networkx graph (read-only: failures live in arrays here, never in it).
    ``version`` increases on every fail/restore/degrade so callers can cache against it.
    """

    def __init__(self, structure: Structure):
        super().__init__(structure)
        self.version = 0
        self.reset()

    # ---- failure state

    def reset(self) -> None:
        """Heal everything."""
        N, E = len(self._s.ids), len(self._s.ekind)
        self._nfail = np.zeros(N, dtype=bool)
        self._nfac = np.ones(N)
        self._efail = np.zeros(E, dtype=bool)
        self._efac = np.ones(E)
        self._health = {a: np.ones(N) for a in HEALTH_ASPECTS}
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
        for arr in self._health.values():
            arr[nodes] = 1.0
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

    def set_health(self, target, aspect: str, factor: float) -> str:
        """Run the `aspect` (compute, hbm, cpu) of the target's parts of that kind (a die, the dies
        of an NPU or node, a CPU) at `factor` (0 < factor <= 1) of a healthy part's; restore()
        heals it."""
        if aspect not in HEALTH_ASPECTS:
            raise TopologyError(f"health aspect {aspect!r}: allowed {', '.join(HEALTH_ASPECTS)}")
        if not (isinstance(factor, (int, float, np.floating)) and 0.0 < float(factor) <= 1.0):
            raise TopologyError(f"health factor {factor!r} for {target!r}: allowed a number in (0, 1] "
                                "(fraction of a healthy part's speed)")
        nodes, _ = self._resolve(target)
        want = HEALTH_ASPECTS[aspect]
        nodes = np.array([i for i in nodes if self._s.nkind[i] == want], dtype=np.int64)
        if not len(nodes):
            raise TopologyError(f"health {aspect} on {target!r}: it holds no {want}")
        self._health[aspect][nodes] = float(factor)
        self._changed()
        return self.validate_target(target)

    def die_health(self, aspect: str) -> np.ndarray:
        """Health `aspect` (compute, hbm) of every die, in die-index order (read-only)."""
        key = ("die_health", aspect)
        if key not in self._cache:
            arr = self._health[aspect][[self._s.index[d] for d in self.die_ids]]
            arr.flags.writeable = False
            self._cache[key] = arr
        return self._cache[key]

    def slow_parts(self, aspect: str) -> dict[str, float]:
        """{part id: factor} of the parts whose `aspect` runs below full health."""
        arr = self._health[aspect]
        return {self._s.ids[i]: float(arr[i]) for i in np.flatnonzero(arr < 1.0)}

    @property
    def health(self) -> dict[str, dict[str, float]]:
        """Every part not at full health: {part id: {aspect: factor}}; a degraded link's aspect is
        its bandwidth (the fraction `degrade` kept). Empty when every part is healthy."""
        out: dict[str, dict[str, float]] = {}
        for aspect in self._health:
            for part, f in self.slow_parts(aspect).items():
                out.setdefault(part, {})[aspect] = f
        for e in np.flatnonzero(self._efac < 1.0):
            out.setdefault(self.link_id(int(e)), {})["bandwidth"] = float(self._efac[e])
        return dict(sorted(out.items()))

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
