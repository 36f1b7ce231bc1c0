"""How one layer's compute and communication overlap, per accelerator (named strategies).

A layer is cut, per microbatch, into four pieces: attention-side compute `a` (projections,
attention, gating), dispatch `d`, expert compute `e` and combine `c`.

- "ascend-two-stream" (ref 3 Decode / Prefill): decode runs an attention stream (16 AIC + 32 AIV)
  and a MoE stream (8 AIC + 16 AIV, which also drives dispatch and combine) side by side, so a layer
  of n microbatches costs n x (max(attention, MoE) + one stream hand-off). Prefill overlaps the AIC
  computing one microbatch with SDMA moving the other's all-to-all; half of the shorter side stays
  exposed (assumption: the two phases of each microbatch line up only half the time).
- "sm-overlap" (deepseek-ai/profile-data README, gpu-clusters.md section 2): two microbatches, the
  compute of one against the communication of the other, in four phases per layer:
  (a_A | c_B), (a_B | d_A), (e_A | d_B), (e_B | c_A). Each phase lasts its longer side. In prefill
  the communication kernels hold `comm_sms` of the SMs, so compute runs on the rest
  (SM-partitioned); in decode they hold none (time-multiplexed: RDMA proceeds while all SMs compute).
Without microbatching every strategy runs the four pieces one after another.
"""
from __future__ import annotations

from dataclasses import dataclass

STRATEGIES = ("ascend-two-stream", "sm-overlap")


@dataclass(frozen=True)
class Pieces:
    """Seconds of one microbatch's layer pieces (compute at the share of cores it runs on)."""
    a: float
    d: float
    e: float
    c: float

    @property
    def compute(self) -> float:
        return self.a + self.e

    @property
    def comm(self) -> float:
        return self.d + self.c


def sequential(p: Pieces, n_mb: int = 1) -> float:
    return n_mb * (p.compute + p.comm)


def paired_phases(p: Pieces) -> float:
    """Two microbatches, compute of one against communication of the other (DeepSeek's schedule)."""
    return max(p.a, p.c) + max(p.a, p.d) + max(p.e, p.d) + max(p.e, p.c)


def sm_overlap(p: Pieces, serial: Pieces, efficiency: float) -> float:
    """Per-layer time of two microbatches under sm-overlap: the ideal paired schedule `p` (compute
    on its SM share) realises only `efficiency` of its saving over running both microbatches'
    pieces one after another at full speed (`serial`): the kernels contend for HBM and L2 and wait
    at each phase boundary, which the kernel tables, measured alone, do not show."""
    seq = sequential(serial, 2)
    return seq - efficiency * (seq - paired_phases(p))


def two_stream_decode(attn: float, moe: float, n_mb: int, sync_s: float) -> float:
    """Ascend decode: attention stream against MoE stream, one hand-off per microbatch."""
    return n_mb * (max(attn, moe) + sync_s)


def two_stream_prefill(compute: float, comm: float) -> float:
    """Ascend prefill: AIC compute against SDMA all-to-all, half of the shorter side exposed."""
    return max(compute, comm) + min(compute, comm) / 2


def sm_share(sms: int, comm_sms: int) -> float:
    """Fraction of a GPU's SMs left to compute while communication kernels hold `comm_sms`."""
    if comm_sms >= sms:
        raise ValueError(f"comm_sms = {comm_sms}: must be below the chip's {sms} SMs")
    return (sms - comm_sms) / sms if sms else 1.0
