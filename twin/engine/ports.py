"""The narrow interfaces (ports) through which the engine's components see it, never the whole Engine.

Each component names the port it needs; `Engine` satisfies them all structurally (typing.Protocol),
so a component is tested on any object with those attributes, and a reader sees what it touches.
The ports are built from a few facets (clock and log, requests, pools, hardware); this module
imports only leaf modules, so no component's import leads back to the core.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from twin.engine.registry import Extensions, Reporter, Reporters

if TYPE_CHECKING:
    import numpy as np

    from twin.engine.accounting import Accounting
    from twin.engine.clock import Clock
    from twin.engine.metrics import Metrics
    from twin.engine.requests import RequestTable
    from twin.engine.scheduling import Policies
    from twin.engine.timing import StepTimes
    from twin.topology import Topology

class Reporting(Protocol):
    """A part of the engine that declares the snapshot fields it reports (twin.engine.registry)."""

    def reports(self) -> dict[str | tuple[str, ...], Reporter]: ...


# ---- facets -------------------------------------------------------------------------------------
class Timed(Protocol):
    """The clock and the event log."""
    env: Clock
    scenario: Any                 # twin.engine.scenario.Scenario

    def log(self, kind: str, message: str, /, **args) -> None: ...


class Hardware(Protocol):
    """What runs: deployment, system, live topology, the time predictor and the KV sizes it implies."""
    dep: Any                      # twin.config deployment
    system: Any                   # twin.config system
    topo: Topology
    pm: Any                       # the time predictor (twin.predict)
    dies_per_node: int
    kv_bytes: float
    kv_capacity_tokens: float


class Requests(Protocol):
    """The request table, kept exact by `catch_up`, and the one way a request completes."""
    req: RequestTable

    def catch_up(self) -> None: ...

    def finish(self, ids: np.ndarray) -> None: ...


class Pools(Protocol):
    """The prefill and decode instances, which of them serve, and the scheduler's entry points."""
    prefill: list
    decode: list
    instances: list
    policies: Policies
    health: int                   # bumped whenever an instance is held down or released
    kv: Any                       # twin.engine.transfer.KvTransfers

    def live(self) -> tuple[list, list]: ...

    def schedule_prefill(self, rid: int, wake: bool = True, live: list | None = None) -> Any: ...

    def requeue(self, ids: np.ndarray) -> tuple[int, int]: ...

    def bring_online(self, inst, key: str) -> None: ...


# ---- the ports components receive ------------------------------------------------------------------
class InstanceHost(Timed, Hardware, Requests, Pools, Protocol):
    """What a prefill or decode instance (pools.py) uses: the step machinery around it."""
    metrics: Metrics
    acct: Accounting
    timing: StepTimes
    deadlines: Any                # twin.engine.deadlines.Deadlines
    ems: Any                      # twin.ems.EMS or None
    interval_end: float
    external: Any                 # the "external" extension (twin.engine.external) or None
    lazy_decode: Any              # the decode instance that takes arrivals itself, or None

    def take_ticks(self, upto: float, inclusive: bool = True) -> None: ...


class QueueView(Timed, Requests, Protocol):
    """What client deadlines (deadlines.py) read: queues and the request table."""
    instances: list


class TrafficView(Protocol):
    """What per-link utilisation (traffic.py) reads."""
    topo: Topology
    metrics: Metrics
    dep: Any


class NetworkHost(Timed, Hardware, Protocol):
    """What follows a topology change (network.py, transfer.py): instances, flows, partition state."""
    instances: list
    decode: list
    policies: Policies
    faults: Any                   # twin.engine.faults.FaultManager
    kv: Any
    acct: Accounting
    req: RequestTable
    partitioned: bool
    message: str

    def live(self) -> tuple[list, list]: ...


class FaultHost(Timed, Hardware, Requests, Pools, Protocol):
    """What the fault manager (faults/) strikes and reads."""
    rng: np.random.Generator
    metrics: Metrics
    ems: Any
    ems_node: dict
    die_pool: list

    def network_changed(self) -> None: ...

    def lost_ids(self) -> np.ndarray: ...


class CommandTarget(Timed, Protocol):
    """What a typed command (commands.py) changes when it lands."""
    faults: Any
    extensions: Extensions

    def set_rate(self, rate: float) -> None: ...

    def capacity_rps(self, input_mean: float | None = None, output_mean: float | None = None) -> float: ...


class ReportSource(Timed, Hardware, Requests, Pools, Protocol):
    """What the engine-wide reports (report.py) read: metrics, pools, the run's identity and state."""
    seed: int
    metrics: Metrics
    source: Any
    die_pool: list
    drained: dict | None
    arrivals_on: bool
    version: int
    decode_rate: Any              # report.DecodeRate: model tok/s per decode NPU, memoised
    ems: Any


class ExtensionHost(Timed, Hardware, Requests, Pools, Protocol):
    """What an extension registered on the engine (the co-pool scheduler, outside requests) may use."""
    metrics: Metrics
    source: Any
    incoming: Any                 # twin.engine.source.Staged
    reporters: Reporters
    extensions: Extensions

    def restart_arrivals(self) -> None: ...
