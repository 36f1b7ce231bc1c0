"""The seams of the engine: each component touches only what its port declares and each port declares
only what its components touch (both read from their source), the Engine satisfies every port, the snapshot is assembled from the declared reporters (the same fields
as the hand-built snapshot had), and extensions register through the engine's registry."""
import ast
from pathlib import Path
from typing import Protocol

import numpy as np
import pytest

from twin.engine import Engine, ports
from twin.engine.registry import Extensions, Reporters
from twin.engine.snapshot import Snapshot

ROOT = Path(__file__).resolve().parent.parent

# component module (or "module::Class") -> the port it receives the engine through
PORT_OF = {"twin/cloud/live.py::SetCoPool": ports.CommandTarget, "twin/engine/pools.py": ports.InstanceHost, "twin/engine/deadlines.py": ports.QueueView,
           "twin/engine/traffic.py": ports.TrafficView, "twin/engine/network.py": ports.NetworkHost,
           "twin/engine/transfer.py": ports.NetworkHost, "twin/engine/faults/manager.py": ports.FaultHost,
           "twin/engine/faults/recovery.py": ports.FaultHost, "twin/engine/faults/random.py": ports.FaultHost,
           "twin/engine/commands.py": ports.CommandTarget, "twin/engine/report.py": ports.ReportSource,
           "twin/engine/handover.py": ports.ExtensionHost, "twin/engine/external.py": ports.ExtensionHost,
           "twin/cloud/copool.py": ports.ExtensionHost}


def members(port) -> set[str]:
    """The attributes and methods a port declares, its facets' included."""
    out = set()
    for cls in port.__mro__:
        if cls in (object, Protocol):
            continue
        out |= set(vars(cls).get("__annotations__", {}))
        out |= {k for k, v in vars(cls).items() if callable(v) and not k.startswith("_")}
    return out


def engine_reads(where: str) -> set[str]:
    """Attributes a module (or one class of it, "path::Class") reads off the engine: `eng.x` and
    `self.eng.x`."""
    path, _, cls = where.partition("::")
    tree = ast.parse((ROOT / path).read_text())
    if cls:
        tree = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            v = node.value
            if (isinstance(v, ast.Name) and v.id == "eng") or (
                    isinstance(v, ast.Attribute) and v.attr == "eng" and isinstance(v.value, ast.Name)
                    and v.value.id == "self"):
                out.add(node.attr)
    return out


@pytest.mark.parametrize("where", sorted(PORT_OF))
def test_a_component_touches_only_what_its_port_declares(where):
    reads = engine_reads(where)
    assert reads, where                      # the reader found its uses
    assert sorted(reads - members(PORT_OF[where])) == []


def test_a_port_declares_only_what_its_components_touch():
    used: dict = {}
    for where, port in PORT_OF.items():
        used.setdefault(port, set()).update(engine_reads(where))
    assert {p.__name__: sorted(members(p) - u) for p, u in used.items() if members(p) - u} == {}


def test_the_engine_satisfies_every_port():
    eng = Engine("default", seed=0, duration_s=1)
    assert callable(eng.reports)           # it reports too (registry.Reporting)
    for port in set(PORT_OF.values()):
        assert sorted(m for m in members(port) if not hasattr(eng, m)) == [], port.__name__


def test_the_snapshot_is_assembled_from_the_declared_reporters():
    eng = Engine("default", seed=0)
    eng.run(20)
    owner = eng.reporters.owner
    assert set(owner) == set(eng.reporters.fields) - {"cloud"}     # all but the co-pool day's field
    assert owner["kpis"] == "report" and owner["history"] == "metrics" and owner["link_util"] == "traffic"
    assert owner["faults"] == owner["fault_archive"] == owner["fault_summary"] == "faults"
    assert owner["system"] == owner["partitioned"] == "network" and owner["cache"] == "cache"
    snap = eng.snapshot()
    assert (snap.version, snap.sim_time, snap.scenario, snap.seed) == (1, 20.0, "default", 0)
    assert snap.cloud is None and snap.system.name == "cloudmatrix384" and snap.kpis["sim_time"] == 20.0
    assert snap.die_pool == tuple(eng.die_pool) and snap.history["t"] == list(eng.metrics.history["t"])
    np.testing.assert_array_equal(snap.node_traffic, eng.metrics.last_node_gbps)


class _Day:
    """A stand-in extension with a report."""

    def reports(self):
        return {"cloud": lambda: {"day": 1}}


def test_an_extension_registers_and_its_reports_join_the_snapshot():
    eng = Engine("default", seed=0)
    day = eng.extensions.add("day", _Day())
    assert eng.extensions.get("day") is day and "day" in eng.extensions and eng.extensions.get("x") is None
    assert eng.snapshot().cloud == {"day": 1}
    with pytest.raises(ValueError, match="extension 'day': already registered on this engine"):
        eng.extensions.add("day", _Day())
    with pytest.raises(ValueError, match="reports 'cloud': already reported by day"):
        eng.extensions.add("other", _Day())


def test_reporters_refuse_an_unknown_or_a_second_field():
    rep = Reporters(Snapshot)
    rep.declare("a", {"version": lambda: 1})
    with pytest.raises(ValueError, match=r"b reports 'nope': not a field of Snapshot \(allowed: version, "):
        rep.declare("b", {"nope": lambda: 1})
    with pytest.raises(ValueError, match="b reports 'version': already reported by a"):
        rep.declare("b", {("sim_time", "version"): lambda: (0.0, 2)})
    rep.declare("c", {("sim_time", "seed"): lambda: (2.5, 7)})
    assert rep.collect() == {"version": 1, "sim_time": 2.5, "seed": 7}


def test_a_slot_extension_is_set_on_its_host():
    class Host:
        external = None
    host = Host()
    ext = Extensions(host, Reporters(Snapshot), slots=("external",))
    part = ext.add("external", object())
    assert host.external is part
    ext.add("other", object())
    assert not hasattr(host, "other")
