"""How one layer's compute and communication overlap, per accelerator (named strategies).

A layer is cut, per microbatch, into four pieces: attention-side compute `a` (projections,
attention, gating), dispatch `d`, expert compute `e` and combine `c`.

- "ascend-two-stream" (ref 3 Decode / Prefill): decode runs an attention stream (16 AIC + 32 AIV)
  and a MoE stream (8 AIC + 16 AIV, which also drives dispatch and combine) side by side, so a layer
  of n microbatches costs n x (max(attention, MoE) + one stream hand-off). Prefill overlaps the AIC
  computing one microbatch with SDMA moving the other's all-to-all; half of the shorter side stays
  exposed (assumption: the two phases of each microbatch line up only half the time).
- "sm-overlap" (deepseek-ai/profile-data README, ref G 2): two microbatches, the
  compute of one against the communication of the other, in four phases per layer:
  (a_A | c_B), (a_B | d_A), (e_A | d_B), (e_B | c_A). Overlap comes from the resources the two
  streams share, not from a fitted gain: while an all-to-all is in flight, compute runs on the SMs
  the communication kernels leave it (DeepEP normal kernels hold `comm_sms`, 24 of 132 in prefill,
  ref G 2) and every compute kernel is stretched by `corun_stretch` (HBM, L2 and issue contention
  between co-running kernels, perf.toml [sm_overlap], fitted to DeepSeek's profile rows only); once
  the communication ends, compute has the whole GPU again. Kernels that hold no SMs (DeepEP
  low-latency, decode, ref G 2: 0 SMs) still run their send and receive halves on the SMs: that
  part (`d_sm`, `c_sm`: the bytes they copy through HBM) runs between compute kernels, not beside
  them, and only the wire time overlaps.
Without microbatching every strategy runs the four pieces one after another.
"""
from __future__ import annotations

from dataclasses import dataclass

STRATEGIES = ("ascend-two-stream", "sm-overlap")


@dataclass(frozen=True)
class Pieces:
    """Seconds of one microbatch's layer pieces: compute alone on every core, communication as its
    kernel takes alone; `d_sm`, `c_sm`: the parts of d and c that occupy the compute units."""
    a: float
    d: float
    e: float
    c: float
    d_sm: float = 0.0
    c_sm: float = 0.0

    @property
    def compute(self) -> float:
        return self.a + self.e

    @property
    def comm(self) -> float:
        return self.d + self.c


def sequential(p: Pieces, n_mb: int = 1) -> float:
    return n_mb * (p.compute + p.comm)


def corun(x: float, y: float, y_sm: float, rate: float) -> float:
    """One phase: compute `x` (seconds alone on the whole GPU) beside a communication of `y` seconds
    of which `y_sm` runs on the compute units. While the wire part is in flight compute advances at
    `rate` of its lone speed; after it, at full speed."""
    wire = y - y_sm
    if x <= wire * rate:
        return y
    return y_sm + x + wire * (1 - rate)


def sm_overlap(p: Pieces, share: float, stretch: float) -> float:
    """Per-layer time of two microbatches (DeepSeek's paired schedule) when communication holds
    1 - `share` of the SMs and co-running stretches compute by `stretch`."""
    rate = share / (1 + stretch)
    return (corun(p.a, p.c, p.c_sm, rate) + corun(p.a, p.d, p.d_sm, rate)
            + corun(p.e, p.d, p.d_sm, rate) + corun(p.e, p.c, p.c_sm, rate))


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
