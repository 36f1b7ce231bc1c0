"""The read-only view of a running engine that the dashboard and the CLI consume.

An engine publishes a new Snapshot (with a higher `version`) after every `advance()`. Consumers
must treat it as immutable: it holds copies, never live SimPy objects.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Names of the per-interval series in Snapshot.history (one float per interval of sim time).
HISTORY_KEYS = (
    "t",                      # interval end, sim seconds
    "input_tps", "output_tps",                  # tokens/s, whole deployment
    "input_tps_per_npu", "output_tps_per_npu",  # per NPU of the prefill / decode pool
    "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
    "ttft_hit_p50_ms", "ttft_miss_p50_ms",      # TTFT with / without a cache hit (>= half the prompt from EMS)
    "slo_attainment",                           # fraction of completions meeting TTFT and TPOT SLOs
    "block_hit_ratio", "token_hit_ratio",       # EMS, over lookups in the interval
    "ems_dram_gb", "ems_ssd_gb",                # EMS occupancy per tier
    "ub_bytes_per_hit_mb",                      # bytes moved over UB (or VPC) per cache-hit request
    "queue_prefill", "queue_decode",            # requests waiting
    "util_prefill", "util_decode",              # busy fraction of each pool
    "decode_batch_per_npu",
    "ub_gbps", "rdma_gbps", "vpc_gbps",         # plane traffic, GB/s
    "arrived", "completed", "in_flight", "rejected",   # cumulative counters at interval end
    "goodput_tps",                              # output tokens/s of requests meeting their SLOs
)


@dataclass(frozen=True)
class Snapshot:
    version: int
    sim_time: float
    scenario: str
    deployment: str
    seed: int
    kpis: dict                    # latest values of HISTORY_KEYS (over the last window) plus totals
    history: dict                 # key -> list[float], bounded to the last `history_len` intervals
    plane_gbps: dict              # {"ub": .., "rdma": .., "vpc": ..} over the last interval
    link_util: np.ndarray         # float32 by topology eid, 0..1 (can exceed 1 only if overloaded)
    node_traffic: np.ndarray      # nodes x nodes, GB/s over the last interval (expert all-to-all,
    #                               KV transfers, EMS loads), row = source node
    die_util: np.ndarray          # float32 per die (topology die order), busy fraction last interval
    die_pool: tuple               # per die: "prefill", "decode" or "" (idle)
    events: tuple                 # recent dicts {"t", "kind", "message"}, oldest first
    faults: tuple                 # dicts, one per fault: the newest SNAPSHOT_FAULTS (twin.engine.core)
    failed: tuple                 # failed element ids (topology ids)
    partitioned: bool = False
    message: str = ""             # human-readable state (e.g. why the system is partitioned)
    cache: dict = field(default_factory=dict)   # EMS stats
    fault_summary: dict = field(default_factory=dict)   # Engine.fault_summary(): counts of all faults

    def latest(self, key: str, default: float = 0.0) -> float:
        return float(self.kpis.get(key, default))
