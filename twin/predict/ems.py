"""Physical cost of loading a prefix's cached KV from EMS into one die before its prefill.

Four parts (ref 3 EMS and data paths; hardware rows of ref 1 and chips.toml):
- partial-block recompute: EMS keys whole blocks (the hash of a block's tokens and its prefix), so a
  reused prefix that ends inside a block finds only the blocks before it; the rest of that block is
  computed again (`whole_block_reuse`);
- lookup: one metadata round trip per block to the server consistent hashing names, at the plane's
  latency (the server checks its LRU tiers);
- transfer: the blocks' bytes at the slower of (a) the die's share of the plane (UB: measured
  NPU-CPU read; VPC: the node's Qingtian card shared by its dies) and (b) the EMS servers, each of
  which reads a block from its tier (DRAM of its socket, or its SSD) and then sends it through its
  software data plane (`server_gbps`: the one calibrated constant, fitted to the 90% reuse row);
  the servers of the pool share the prefill dies' load evenly: the CPU side's queueing is that share
  (every die of a batch loads at once, so each server's sockets serve `1 / servers_per_die` dies'
  blocks one after another);
- overlap: loads are issued layer by layer, so all but the first layer's transfer hides under the
  prefill compute when the compute is longer (assumption: layer-wise loading; the paper's KV moves
  asynchronously).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

US = 1e-6
BLOCK_TOKENS = 512      # ref 3: EMS blocks hold 128-512 tokens; assumption: the paper's deployment the largest


def whole_block_reuse(reuse: float, prompt: float, block_tokens: int | None = BLOCK_TOKENS) -> float:
    """The share of a `prompt`-token prompt EMS serves when a share `reuse` of its tokens is a cached
    prefix: whole blocks only (the partial block is recomputed). None: `reuse` already counts whole
    blocks (the engine's EMS looks blocks up itself)."""
    if block_tokens is None or reuse <= 0:
        return reuse
    return math.floor(reuse * prompt / block_tokens + 1e-9) * block_tokens / prompt


@dataclass(frozen=True)
class EmsPath:
    plane_gbps: float          # the die's share of the plane (GB/s), after health
    plane_latency_us: float
    dram_gbps: float           # one server socket's DRAM read bandwidth
    ssd_gbps: float            # one server's SSD tier read bandwidth
    server_gbps: float         # one server's software data plane (calibrated)
    servers_per_die: float     # EMS servers per prefill die loading at the same time

    def gbps(self, ssd_fraction: float) -> float:
        """A server reads a block from its tier, then its data plane sends it (store and forward)."""
        per_byte = (1 - ssd_fraction) / self.dram_gbps + ssd_fraction / self.ssd_gbps + 1 / self.server_gbps
        return min(self.plane_gbps, self.servers_per_die / per_byte)


def load_seconds(path: EmsPath, nbytes: float, blocks: float, layers: int, compute_s: float,
                 ssd_fraction: float = 0.0) -> dict[str, float]:
    """Exposed seconds of each part (lookup, transfer) for one die's prefix."""
    if path.plane_gbps <= 0:
        return {"ems_lookup": math.inf, "ems_transfer": math.inf}
    lookup = blocks * 2 * path.plane_latency_us * US
    transfer = nbytes / (path.gbps(ssd_fraction) * 1e9)
    exposed = transfer / layers + max(0.0, transfer * (layers - 1) / layers - compute_s)
    return {"ems_lookup": lookup, "ems_transfer": exposed}
