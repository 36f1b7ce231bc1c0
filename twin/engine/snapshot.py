"""The read-only view of a running engine that the dashboard and the CLI consume.

An engine publishes a new Snapshot (with a higher `version`) after every `advance()`. Consumers
must treat it as immutable: it holds copies, never live SimPy objects.

The snapshot is the whole truth a page draws (the Mesa rule): which system runs and what its
fabrics are called (`SystemInfo`, with the shared failure-free topology to draw it from), the live
capacity of every link (failures and degradations applied), failed and degraded parts, fault
records and their windows. No page rebuilds a topology or replays faults to find out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from twin.model.config import catalog
from twin.topology import StaticTopology

# what each plane of a topology is called on screen
PLANE_LABEL = {"ub": "UB", "d2d": "die-to-die", "rdma": "RDMA", "vpc": "VPC", "nvlink": "NVLink"}


@dataclass(frozen=True, eq=False)
class SystemInfo:
    """The system a twin runs, as the dashboard names and draws it."""
    name: str                     # catalog system name ("cloudmatrix384", "gpu-cluster-h800")
    kind: str                     # "supernode" or "cluster"
    title: str                    # e.g. "CloudMatrix384 supernode" / "GPU cluster: 18 x 8 H800"
    nodes: int
    accelerator: str              # "NPU" or "GPU": what one package is called
    scaleup: str                  # the scale-up fabric: "UB" or "NVLink"
    planes: dict                  # plane key -> label, only the planes this system has
    topology: StaticTopology      # the shared, failure-free structure (ids, graph, link statics)

    @property
    def supernode(self) -> bool:
        return self.kind == "supernode"


@lru_cache(maxsize=16)
def system_info(static: StaticTopology) -> SystemInfo:
    """Names and fabric labels of a system (built once per structure)."""
    s = static.system
    chip = catalog().chip(s.accelerator)
    acc = "NPU" if chip.kind == "npu" else "GPU"
    present = {plane for _u, _v, plane, _k in static.link_arrays().ends}
    planes = {k: v for k, v in PLANE_LABEL.items() if k in present}
    if static.kind == "supernode":
        title = f"{static.name}: supernode of {s.nodes} nodes x {s.npus_per_node} {acc}s, {s.subplanes} UB sub-planes"
    else:
        title = (f"{static.name}: GPU cluster of {s.nodes} servers x {s.npus_per_node} {chip.vendor} "
                 f"{s.accelerator.upper()} GPUs, NVLink inside a server, RDMA between servers")
    return SystemInfo(static.name, static.kind, title, s.nodes, acc,
                      "UB" if static.kind == "supernode" else "NVLink", planes, static)


TOPOLOGY_FIELDS = ("system", "link_capacity", "failed", "degraded", "health")


def topology_fields(topo) -> tuple:
    """The values of TOPOLOGY_FIELDS, the snapshot fields that describe the live topology of an
    engine: the system, live capacity per link (read-only, replaced on every failure change), failed
    and degraded parts, and the health of every part not at full health (gray failures)."""
    return (system_info(topo.static), topo.capacity, tuple(sorted(topo.failed)),
            dict(sorted(topo.degraded.items())), topo.health)

# Decode useful work is measured against the model's tok/s per NPU at the deployment's batch cap
# (batch_per_die x dies per NPU: 96 per NPU in the paper's deployment) at the context of the paper's
# decode row (reference row 4: batch 96 per NPU, 4K KV: 1,943 tok/s per NPU at 49.4 ms TPOT) and of
# the Trade-offs curve, on a healthy fabric.
DECODE_OP_CTX = 4096


# Names of the per-interval series in Snapshot.history (one float per interval of sim time).
HISTORY_KEYS = (
    "t",                      # interval end, sim seconds
    "input_tps", "output_tps",                  # tokens/s, whole deployment
    "input_tps_per_npu", "output_tps_per_npu",  # per NPU of the prefill / decode pool
    "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
    "ttft_hit_p50_ms", "ttft_miss_p50_ms",      # TTFT with / without a cache hit (>= half the prompt from
    #                                             EMS), rolling over metrics.HIT_WINDOW intervals, min HIT_MIN
    "slo_attainment",                           # fraction of completions meeting TTFT and TPOT SLOs
    "block_hit_ratio", "token_hit_ratio",       # EMS, over lookups in the interval
    "ems_dram_gb", "ems_ssd_gb",                # EMS occupancy per tier
    "ub_bytes_per_hit_mb",                      # bytes moved over UB (or VPC) per cache-hit request
    "queue_prefill", "queue_decode",            # requests waiting
    "util_prefill", "util_decode",              # busy fraction of each pool: a step runs, whatever its batch
    "decode_batch_per_npu",
    "decode_model_tps_per_npu",                 # model: tok/s per NPU if steps of this batch ran back to back
    "decode_useful",                            # useful work: output_tps_per_npu / decode_op_tps_per_npu

    "ub_gbps", "rdma_gbps", "vpc_gbps",         # plane traffic, GB/s
    "ub_across_gbps",                           # ... of ub_gbps, between two nodes (GPU cluster: over RDMA;
    #                                             NaN on a supernode, where all of it is UB)
    "arrived", "completed", "in_flight", "rejected",   # cumulative counters at interval end
    "timed_out",                                # ... of requests whose client gave up waiting for prefill
    "goodput_tps",                              # output tokens/s of requests meeting their SLOs
    "finished_output_tps",                      # output tokens/s of every request finished (the same
    #                                             basis as goodput: a request's tokens count when it ends)
)


@dataclass(frozen=True)
class Snapshot:
    version: int
    sim_time: float
    scenario: str
    deployment: str
    seed: int
    kpis: dict                    # latest values of HISTORY_KEYS (over the last window) plus totals and
    #                               "decode_op_tps_per_npu" (model: the decode operating point, DECODE_OP_CTX)
    history: dict                 # key -> list[float], bounded to the last `history_len` intervals
    plane_gbps: dict              # {"ub": .., "rdma": .., "vpc": ..} over the last interval
    link_util: np.ndarray         # float32 by topology eid, 0..1 (can exceed 1 only if overloaded)
    node_traffic: np.ndarray      # nodes x nodes, GB/s over the last interval (expert all-to-all,
    #                               KV transfers, EMS loads), row = source node
    die_util: np.ndarray          # float32 per die (topology die order), busy fraction last interval
    die_pool: tuple               # per die: "prefill", "decode" or "" (idle)
    events: tuple                 # recent dicts {"t", "kind", "message"}, oldest first
    faults: tuple                 # dicts, one per fault: the newest SNAPSHOT_FAULTS (twin.engine.faults.manager)
    failed: tuple                 # failed element ids (topology ids)
    partitioned: bool = False
    message: str = ""             # human-readable state (e.g. why the system is partitioned)
    cache: dict = field(default_factory=dict)   # EMS stats
    fault_summary: dict = field(default_factory=dict)   # Engine.fault_summary(): counts of all faults
    system: SystemInfo | None = None        # what runs (topology_fields); None only in hand-made test snapshots
    link_capacity: np.ndarray | None = None  # live GB/s per topology eid (failures and degradation applied)
    degraded: dict = field(default_factory=dict)   # element or link id -> fraction of capacity kept
    health: dict = field(default_factory=dict)     # part id -> {aspect: fraction of healthy speed} for every
    #                               part not at full health (compute, hbm, cpu; a link's bandwidth); {} if healthy
    cloud: dict | None = None     # a co-pool day running on the engine (twin.cloud.live.view), else None
    incidents: dict = field(default_factory=dict)  # fault id -> its KPI series from a minute before it to a
    #                               minute past service back, and that window (twin.engine.faults.aftermath)
    fault_archive: tuple = ()     # reports of the recorded faults older than `faults`, oldest first: the two
    #                               together are every report the run keeps (FaultManager.snapshot_reports)

    def latest(self, key: str, default: float = 0.0) -> float:
        return float(self.kpis.get(key, default))

    def fabric_gbps(self) -> dict:
        """Traffic per fabric over the last interval, named as the system names it.

        The engine counts MoE all-to-all and EMS loads in one scale-up bucket ("ub"). On a supernode
        that is the UB plane. On a GPU cluster the node-to-node matrix says where it went: within a
        server over NVLink (the diagonal), between servers over RDMA (the rest), added to the RDMA
        KV transfers."""
        pg = self.plane_gbps or {}
        if self.system is None or self.system.supernode:
            return {"UB": pg.get("ub", 0.0), "RDMA": pg.get("rdma", 0.0), "VPC": pg.get("vpc", 0.0)}
        mat = np.asarray(self.node_traffic, dtype=float)
        total = float(mat.sum())
        within = float(np.trace(mat)) if mat.size else 0.0
        scaleup = pg.get("ub", 0.0)
        across = scaleup * (1 - within / total) if total > 0 else 0.0
        return {"NVLink": scaleup - across, "RDMA": pg.get("rdma", 0.0) + across, "VPC": pg.get("vpc", 0.0)}
