"""MoE all-to-all (dispatch or combine) time per fabric, seen by one rank.

UB (supernode): every rank reaches every other over the same switched fabric, so a token is written
once to each distinct remote rank holding one of its top-k experts; the time is a software cost
(alpha + per-token packing, plus beta log2 EP for dispatch's count exchange) plus bytes over the
die's measured UB bandwidth (write for dispatch, read for combine's pull) plus, for combine, the
top-k reduction of the returned bytes on the vector cores, plus the switch path. Its constants are calibrated on the paper's UB table (ref 4 MoE communication).

NVLink + RDMA (GPU cluster): DeepEP's kernels (ref G 3: deepseek-ai/DeepEP docs/legacy.md).
- normal kernels (prefill): a token crosses RDMA once per distinct remote *node* and is forwarded
  over NVLink inside that node to the GPUs that hold its experts; time = the slower of the two legs.
  Routing is node-limited (DeepSeek-V3 group-limited gating, at most 4 nodes per token). Each
  remote node is reached through one peer GPU, and one peer connection does not fill the NIC.
- low-latency kernels (decode): one message per (token, expert) straight to the expert's rank,
  pure RDMA for remote ranks, NVLink for ranks of the same NVLink domain, plus a fixed cost.
A system whose NVLink domain spans every rank (GB200 NVL72) never touches RDMA.
The link efficiencies and the low-latency fixed cost are calibrated on DeepEP's published H800
tables; nothing is fitted to a serving throughput.

Gradient all-reduce (training, twin/cloud): a ring. UB: one flat ring over every rank at the die's
measured UB write bandwidth (ref 1 Measured UB); cluster: reduce-scatter over NVLink inside a domain,
all-reduce of the 1/g shard over RDMA across domains, all-gather over NVLink, at the link
efficiencies calibrated on DeepEP (perf.toml [nvlink_rdma]).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from twin.model.rules import remote_ranks

US = 1e-6
# DeepEP kernel generations on a GPU fabric, each with its source (a pool's `a2a_kernel` names one).
# V1 (NVSHMEM): a normal kernel sends each remote node's share through one peer connection, which
# cannot fill the NIC ([nvlink_rdma] rdma_peer_gbps, fitted to V1's EP16 row); V2 (ElasticBuffer on
# NCCL Gin) has no such cap: its published EP 8 x 2 figure is about twice V1's EP16.
KERNELS = {
    "normal": "DeepEP V1 normal (deepseek-ai/DeepEP docs/legacy.md; ref G 3)",
    "low-latency": "DeepEP V1 low-latency (deepseek-ai/DeepEP docs/legacy.md; ref G 3)",
    "normal-v2": "DeepEP V2 ElasticBuffer, NCCL Gin (deepseek-ai/DeepEP README at 0297fc8)",
}
PEER_CAPPED = ("normal",)      # the kernels whose RDMA rate is capped per peer connection (V1)


def distinct(bins: float, draws: int) -> float:
    """Expected number of distinct bins hit by `draws` uniform draws over `bins` bins."""
    return bins * (1 - (1 - 1 / bins) ** draws) if bins >= 1 else 0.0


@dataclass(frozen=True)
class Traffic:
    """One all-to-all as one rank sees it."""
    ep: int
    tokens: float            # tokens per rank
    bytes_per_token: float
    top_k: int


def ub_allreduce_seconds(nbytes: float, ranks: int, gbps: float, latency_us: float) -> float:
    """Flat ring all-reduce of `nbytes` per rank over UB at `gbps` per rank (GB/s)."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    if gbps <= 0:
        return math.inf
    return 2 * (ranks - 1) / ranks * nbytes / (gbps * 1e9) + 2 * (ranks - 1) * latency_us * US


def ub_seconds(tr: Traffic, kc: dict, per_die_gbps: float, rank_dies: int, vector_scale: float,
               path_us: float, ub_health: float, combine: bool = False) -> float:
    """UB all-to-all: software cost + bytes to distinct remote ranks over the rank's UB bandwidth.

    The two kernels differ where their work differs. Dispatch first tells every peer how many tokens
    to expect (a count exchange, log2(EP) rounds: beta_us each); combine reuses that layout, so it
    has no such term, but it reduces the top-k BF16 returns of every token on the rank's vector
    cores, a per-byte cost on top of the wire (combine_reduce_gbps per die).
    """
    if ub_health <= 0:
        return math.inf
    nbytes = tr.tokens * remote_ranks(tr.ep, tr.top_k) * tr.bytes_per_token
    fixed = (kc["alpha_us"] + kc["per_token_us"] * tr.tokens / rank_dies / vector_scale
             + (0.0 if combine else kc["beta_us"] * math.log2(max(tr.ep, 1)))) * US
    reduce = nbytes / (kc["combine_reduce_gbps"] * 1e9 * rank_dies * vector_scale) if combine else 0.0
    return fixed + nbytes / (per_die_gbps * rank_dies * 1e9 * ub_health) + reduce + path_us * US


@dataclass(frozen=True)
class ClusterFabric:
    """A GPU system's planes as the all-to-all sees them (per GPU, one way)."""
    gpus_per_domain: int     # GPUs sharing one NVLink domain (8 in an HGX node, 72 in NVL72)
    nvlink_gbps: float       # GB/s per GPU
    rdma_gbps: float         # GB/s per GPU (NIC)
    nvlink_latency_us: float
    rdma_latency_us: float
    rdma_health: float = 1.0
    extra_latency_us: float = 0.0

    def legs(self, tr: Traffic, kernel: str, k: dict) -> tuple[float, float, float]:
        """(NVLink bytes, RDMA bytes, fixed seconds) per rank for one all-to-all."""
        if kernel not in KERNELS:
            raise ValueError(f"kernel = {kernel!r}: allowed {', '.join(KERNELS)}")
        g = min(self.gpus_per_domain, tr.ep)
        domains = math.ceil(tr.ep / g)
        if kernel == "low-latency":     # one message per (token, expert); own rank's share stays put
            msgs = tr.tokens * tr.top_k * tr.bytes_per_token
            local = (g - 1) / tr.ep
            remote = (tr.ep - g) / tr.ep
            return msgs * local, msgs * remote, k["ll_fixed_us"] * US
        if domains == 1:                # one NVLink domain: distinct remote ranks over NVLink
            ranks = distinct(g, tr.top_k) * (g - 1) / g
            return tr.tokens * ranks * tr.bytes_per_token, 0.0, 0.0
        m = min(domains, k["node_limit"])          # nodes a token may reach
        nodes = distinct(m, tr.top_k)              # distinct nodes per token (own node included)
        remote_nodes = nodes * (domains - 1) / domains
        ranks = distinct(m * g, tr.top_k)          # distinct GPUs per token over those nodes
        nvl = tr.tokens * ranks * (g - 1) / g * tr.bytes_per_token   # forwarded inside each node
        return nvl, tr.tokens * remote_nodes * tr.bytes_per_token, 0.0

    def rdma_rate(self, tr: Traffic, kernel: str, k: dict) -> float:
        """Bytes/s one GPU's NIC moves. A normal kernel sends each remote node's share to one peer
        GPU there (the same local index), so a GPU keeps domains - 1 connections busy; in DeepEP V1
        each carries at most rdma_peer_gbps, which caps the NIC when there are few remote nodes
        (EP16: one peer); V2 fills the NIC from one peer.
        Low-latency kernels talk to every remote rank directly (EP - 8 peers on HGX). The NIC's rate
        falls by rdma_qp_penalty per doubling of the peers it keeps queue pairs with (connection
        state no longer fits the NIC's cache): 248 peers at EP256 cost ~9%, 7 peers ~3%."""
        g = min(self.gpus_per_domain, tr.ep)
        peers = tr.ep - g if kernel == "low-latency" else math.ceil(tr.ep / g) - 1
        nic = (self.rdma_gbps * 1e9 * k["rdma_efficiency"]
               / (1 + k["rdma_qp_penalty"] * math.log2(max(peers, 1))))
        if kernel in PEER_CAPPED:     # a V1 kernel's property, not the NIC's
            nic = min(nic, peers * k["rdma_peer_gbps"] * 1e9)
        return nic * max(self.rdma_health, 1e-12)

    def seconds(self, tr: Traffic, kernel: str, k: dict) -> float:
        if tr.ep <= 1:
            return 0.0
        nvl, rdma, fixed = self.legs(tr, kernel, k)
        if rdma and self.rdma_health <= 0:
            return math.inf
        t_nvl = nvl / (self.nvlink_gbps * 1e9 * k["nvlink_efficiency"])
        t_rdma = rdma / self.rdma_rate(tr, kernel, k) if rdma else 0.0
        lat = self.rdma_latency_us if rdma else self.nvlink_latency_us
        return fixed + max(t_nvl, t_rdma) + (lat + self.extra_latency_us) * US

    def allreduce_seconds(self, nbytes: float, ranks: int, k: dict) -> float:
        """Hierarchical ring all-reduce of `nbytes` per rank: NVLink, then RDMA across domains."""
        if ranks <= 1 or nbytes <= 0:
            return 0.0
        g = min(self.gpus_per_domain, ranks)
        domains = math.ceil(ranks / g)
        t = 2 * (g - 1) / g * nbytes / (self.nvlink_gbps * 1e9 * k["nvlink_efficiency"])
        if domains > 1:
            if self.rdma_health <= 0:
                return math.inf
            t += (2 * (domains - 1) / domains * nbytes / g
                  / (self.rdma_gbps * 1e9 * k["rdma_efficiency"] * self.rdma_health)
                  + 2 * (domains - 1) * self.rdma_latency_us * US)
        return t

    def logical_gbps(self, tr: Traffic, kernel: str, k: dict) -> float:
        """DeepEP's printed "bottleneck bandwidth" for a normal kernel: its test counts one copy per
        distinct node (own node included) over RDMA, or per distinct rank (self included) when the
        EP group is one node (DeepEP tests/test_internode.py, test_intranode.py)."""
        g = min(self.gpus_per_domain, tr.ep)
        domains = math.ceil(tr.ep / g)
        per = distinct(g, tr.top_k) if domains == 1 else distinct(min(domains, k["node_limit"]), tr.top_k)
        return tr.tokens * per * tr.bytes_per_token / self.seconds(tr, kernel, k) / 1e9
