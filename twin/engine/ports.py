"""The narrow interfaces (ports) through which the engine's components see it, never the whole Engine.

Each component names the port it needs, and a port declares exactly what its components read or
call (tests/test_ports.py checks both ways against their source). `Engine` satisfies them all
structurally (typing.Protocol): nothing changes at run time, a component can be driven by any object
with those members, and a reader sees what it touches. This module imports only leaf modules, so no
component's import leads back to the core.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from twin.engine.registry import Extensions

if TYPE_CHECKING:
    import numpy as np

    from twin.engine.accounting import Accounting
    from twin.engine.clock import Clock
    from twin.engine.metrics import Metrics
    from twin.engine.requests import RequestTable
    from twin.engine.scheduling import Policies
    from twin.engine.timing import StepTimes
    from twin.topology import Topology

# Types of engine parts this module cannot import without a circle (they import their port).
Scenario = Any          # twin.engine.scenario.Scenario
Deployment = Any        # twin.model.config deployment
System = Any            # twin.model.config system
Predictor = Any         # twin.predict TimePredictor
Instance = Any          # twin.engine.pools PrefillInstance / DecodeInstance


class Logged(Protocol):
    """The clock and the event log (the engine's `log`: a line, a msgid template and its values)."""
    env: Clock

    def log(self, kind: str, message: str, /, **args) -> None: ...


class InstanceHost(Protocol):
    """A prefill or decode instance (pools.py): the step machinery around it."""
    env: Clock
    req: RequestTable
    dep: Deployment
    pm: Predictor
    dies_per_node: int
    kv_capacity_tokens: float
    policies: Policies
    timing: StepTimes
    metrics: Metrics
    acct: Accounting
    ems: Any                      # twin.engine.ems.pool.EMS or None
    deadlines: Any                # twin.engine.deadlines.Deadlines
    kv: Any                       # twin.engine.transfer.KvTransfers
    health: int                   # bumped whenever an instance is held down or released
    interval_end: float
    external: Any                 # the "external" extension slot (twin.engine.external) or None
    lazy_decode: Instance | None  # the decode instance that takes arrivals itself, or None
    faults: Any                   # twin.engine.faults.FaultManager: its gray bookkeeping logs decode steps

    def take_ticks(self, upto: float, inclusive: bool = True) -> None: ...

    def finish(self, ids: np.ndarray) -> None: ...

    def requeue(self, ids: np.ndarray) -> tuple[int, int]: ...


class QueueView(Logged, Protocol):
    """Client deadlines (deadlines.py): the queues and the request table."""
    scenario: Scenario
    req: RequestTable
    instances: list[Instance]


class TrafficView(Protocol):
    """Per-link utilisation (traffic.py)."""
    topo: Topology
    metrics: Metrics
    dep: Deployment


class NetworkHost(Logged, Protocol):
    """What follows a topology change (network.py) and moves KV (transfer.py)."""
    topo: Topology
    system: System
    dep: Deployment
    pm: Predictor
    dies_per_node: int
    kv_bytes: float
    instances: list[Instance]
    decode: list[Instance]
    policies: Policies
    faults: Any                   # twin.engine.faults.FaultManager
    kv: Any
    acct: Accounting
    req: RequestTable
    partitioned: bool
    message: str
    ems: Any                      # twin.engine.ems.pool.EMS or None
    ems_node: dict

    def live(self) -> tuple[list, list]: ...


class FaultHost(Logged, Protocol):
    """What the fault manager (faults/) strikes, recovers and reads."""
    scenario: Scenario
    rng: np.random.Generator
    topo: Topology
    system: System
    dep: Deployment
    pm: Predictor
    req: RequestTable
    metrics: Metrics
    ems: Any
    ems_node: dict
    instances: list[Instance]
    prefill: list[Instance]
    die_pool: list[str]

    def catch_up(self) -> None: ...

    def requeue(self, ids: np.ndarray) -> tuple[int, int]: ...

    def network_changed(self) -> None: ...

    def lost_ids(self) -> np.ndarray: ...


class CommandTarget(Protocol):
    """What a typed command (commands.py, twin.cloud.live.SetCoPool) changes when it lands."""
    faults: Any
    extensions: Extensions

    def log(self, kind: str, message: str, /, **args) -> None: ...

    def set_rate(self, rate: float) -> None: ...

    def capacity_rps(self, input_mean: float | None = None, output_mean: float | None = None) -> float: ...


class ReportSource(Protocol):
    """The engine-wide reports (report.py): metrics, pools, the run's identity and state."""
    env: Clock
    scenario: Scenario
    seed: int
    version: int
    dep: Deployment
    topo: Topology
    req: RequestTable
    metrics: Metrics
    decode_rate: Any              # report.DecodeRate: model tok/s per decode NPU, memoised
    ems: Any
    source: Any
    kv: Any
    instances: list[Instance]
    prefill: list[Instance]
    decode: list[Instance]
    die_pool: list[str]
    drained: dict | None
    arrivals_on: bool

    def catch_up(self) -> None: ...


class ExtensionHost(Logged, Protocol):
    """An extension registered on the engine (the co-pool scheduler, outside requests) and the
    hand-over it uses (handover.py)."""
    scenario: Scenario
    dep: Deployment
    pm: Predictor
    kv_bytes: float
    req: RequestTable
    metrics: Metrics
    kv: Any
    source: Any
    incoming: Any                 # twin.engine.source.Staged
    prefill: list[Instance]
    decode: list[Instance]
    extensions: Extensions

    def catch_up(self) -> None: ...

    def live(self) -> tuple[list, list]: ...

    def schedule_prefill(self, rid: int, wake: bool = True, live: list | None = None) -> Instance: ...

    def bring_online(self, inst: Instance, key: str) -> None: ...

    def restart_arrivals(self) -> None: ...
