"""A data-parallel + expert-parallel training step on the twin's own perf and communication models.

Forward pass of one microbatch = the prefill operators of twin/predict/perf.py in BF16 (attention stream,
MoE stream with its all-to-all over the deployment's prefill fabric: UB on the supernode, NVLink +
RDMA with DeepEP normal kernels on a GPU cluster), overlapped by the accelerator's named strategy of
twin/predict/execution.py. Backward = twice the forward compute (assumption: the usual 2x) with
the same dispatch and combine again, reversed. Gradients of replicated weights are all-reduced over
every rank, expert gradients over the ranks that hold the same experts (ring on UB; hierarchical
NVLink then RDMA on a cluster; PerfModel.allreduce_seconds, twin/predict/comm.py), hidden behind
the backward pass except the last layer's bucket.

Model FLOPs utilisation (MFU) = model FLOPs / (step time x BF16 peak x ranks), with the compute
alone giving the ceiling: the gap between the two is what communication costs. The product
announcement's utilisation figures (ref 6: 85% -> 52% from communication; ~30% on many enterprise
clusters) are shown beside the twin's number as claims, never fitted to.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from twin.predict.perf import PerfModel
from twin.predict import execution

PRECISION = "bf16"            # assumption: BF16 training on both systems (ref 1: the 910C has no FP8)
GRAD_BYTES = 2                # assumption: BF16 gradients on the wire
STATE_BYTES_PER_PARAM = 16    # assumption: mixed-precision Adam (BF16 weights and grads, FP32 master + 2 moments)
HBM_FOR_STATES = 0.75         # assumption: the rest of HBM holds activations (with recomputation)
OPTIMIZER_BYTES_PER_PARAM = 32  # assumption: Adam reads and writes master, moments and weights once per step
CLAIMS = {"large_scale_training_utilisation": {"before": 0.85, "after_communication": 0.52,
                                               "source": "ref 6 (product announcement; claim, not fitted)"},
          "enterprise_cluster_utilisation": {"value": 0.30,
                                             "source": "ref 6 (product announcement; claim, not fitted)"}}


@dataclass(frozen=True)
class TrainingJob:
    """One training job: a catalog deployment names the system, the model and the EP of its prefill
    pool, which the job reuses for its expert parallelism."""
    deployment: str = "cloudmatrix-pooled"
    global_batch_tokens: int = 4 * 1024 * 1024   # assumption: 1,024 sequences of 4K per step
    seq_len: int = 4096                           # assumption: 4K training sequences, at most one per die per microbatch

    def __post_init__(self):
        for name, lo, hi in (("global_batch_tokens", 4096, 1 << 30), ("seq_len", 128, 131072)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"training.{name} = {v!r}: allowed an integer {lo:,} to {hi:,}")

    @property
    def pm(self) -> PerfModel:
        return _pm(self.deployment)

    @property
    def ep(self) -> int:
        return self.pm.dep.prefill.ep

    def min_npus(self) -> int:
        """Fewest NPUs whose HBM holds the model states, in whole EP groups."""
        pm = self.pm
        per_die = pm.chip.hbm_gb * 1e9 * HBM_FOR_STATES
        dies = math.ceil(pm.model.params_b * 1e9 * STATE_BYTES_PER_PARAM / per_die)
        dies = math.ceil(dies / self.ep) * self.ep
        return math.ceil(dies / pm.dies_per_npu)

    def step(self, npus: int) -> dict | None:
        """Step time and MFU on `npus` NPUs (None below min_npus: the states do not fit)."""
        return _step(self, int(npus))


@lru_cache(maxsize=8)
def _pm(deployment: str) -> PerfModel:
    return PerfModel(deployment)


def model_flops_per_token(pm: PerfModel, seq_len: int) -> float:
    """Forward + backward FLOPs of one token (3x the forward: the standard 6N plus attention)."""
    m = pm.model
    attn_core = 2 * (seq_len / 2) * m.heads * (m.qk_nope_dim + m.rope_dim + m.v_head_dim) \
        if m.attention == "mla" else 2 * (seq_len / 2) * m.heads * m.head_dim * 2
    per_layer = 2 * pm.attn_params() + attn_core
    moe = 2 * ((m.top_k + m.shared_experts) * pm.expert_params() + m.hidden * m.routed_experts)
    dense = 2 * pm.dense_mlp_params() if m.dense_layers else 0.0
    fwd = per_layer * m.layers + moe * pm.moe_layers + dense * m.dense_layers + 2 * pm.head_params()
    return 3 * fwd


def _layer_seconds(pm: PerfModel, q: float, seq: int, scale: float, comm: bool) -> float:
    """One MoE layer for q tokens per die: forward (scale 1) or backward (scale 2: compute doubled,
    the same all-to-all reversed), overlapped as the accelerator's prefill overlaps (perf.py)."""
    gpu = pm.chip.execution == "sm-overlap"
    n_mb = pm.k["streams"]["microbatches"] if gpu else 1

    attn = pm.attention_stream(q / n_mb, q / n_mb / seq, seq / 2, 1.0, PRECISION, decode=False)
    moe = pm.moe_stream("prefill", q / n_mb, 1.0, PRECISION, "default")
    p = pm.overlap_pieces(attn, moe, "prefill", q / n_mb)
    k = 1.0 if comm else 0.0
    p = execution.Pieces(a=p.a * scale, d=p.d * k, e=p.e * scale, c=p.c * k,
                         d_sm=p.d_sm * k, c_sm=p.c_sm * k)
    if gpu:
        share = execution.sm_share(pm.chip.sms, pm.dep.prefill.comm_sms)
        return execution.sm_overlap(p, share, pm.k["sm_overlap"]["corun_stretch"])
    return execution.two_stream_prefill(p.compute, p.comm)


@lru_cache(maxsize=4096)
def _step(job: TrainingJob, npus: int) -> dict | None:
    if npus < job.min_npus():
        return None
    pm, m, seq = job.pm, job.pm.model, job.seq_len
    dies = npus * pm.dies_per_npu // job.ep * job.ep        # whole EP groups
    micro = max(1, math.ceil(job.global_batch_tokens / (dies * seq)))
    q = job.global_batch_tokens / (dies * micro)            # tokens per die per microbatch (<= seq)

    def one_microbatch(comm: bool) -> tuple[float, float]:
        dense_attn = pm.attention_stream(q, 1, seq / 2, 1.0, PRECISION, decode=False).total
        dense_mlp = pm.gemm_seconds(2 * q * pm.dense_mlp_params(), pm.dense_mlp_params() * 2, 1.0, PRECISION)
        head = pm.gemm_seconds(2 * q * pm.head_params(), pm.head_params() * 2, 1.0, PRECISION)
        fwd = ((dense_attn + dense_mlp) * m.dense_layers + _layer_seconds(pm, q, seq, 1, comm) * pm.moe_layers
               + head)
        bwd = ((dense_attn + dense_mlp) * 2 * m.dense_layers
               + _layer_seconds(pm, q, seq, 2, comm) * pm.moe_layers + 2 * head)
        return fwd, bwd

    fwd, bwd = one_microbatch(True)
    cfwd, cbwd = one_microbatch(False)
    compute = (cfwd + cbwd) * micro
    a2a = (fwd + bwd) * micro - compute
    experts_per_die = m.routed_experts / job.ep
    replicated = (pm.attn_params() * m.layers + pm.dense_mlp_params() * m.dense_layers + 2 * pm.head_params()
                  + (m.shared_experts * pm.expert_params() + m.hidden * m.routed_experts) * pm.moe_layers)
    expert = experts_per_die * pm.expert_params() * pm.moe_layers
    ar = (pm.allreduce_seconds(replicated * GRAD_BYTES, dies)
          + pm.allreduce_seconds(expert * GRAD_BYTES, dies // job.ep))
    last_bwd = bwd / m.layers                               # the last bucket has nothing to hide under
    ar_exposed = max(ar - (bwd - last_bwd), min(ar, last_bwd))
    params_per_die = (replicated + m.routed_experts * pm.expert_params() * pm.moe_layers) / dies
    optimizer = params_per_die * OPTIMIZER_BYTES_PER_PARAM / (pm.chip.hbm_gbps * 1e9 * pm.chip.mem_eff)
    step = compute + a2a + ar_exposed + optimizer
    tokens = dies * q * micro
    flops = model_flops_per_token(pm, seq) * tokens
    peak = pm.chip.peak_tflops(PRECISION) * 1e12 * dies
    return {"system": pm.dep.system, "model": pm.dep.model, "npus": npus,
            "npus_used": dies // pm.dies_per_npu, "ep": job.ep, "dp": dies // job.ep,
            "tokens_per_step": int(tokens), "microbatches": micro,
            "step_s": round(step, 4),
            "breakdown_s": {"compute": round(compute, 4), "all_to_all_exposed": round(a2a, 4),
                            "all_reduce": round(ar, 4), "all_reduce_exposed": round(ar_exposed, 4),
                            "optimizer": round(optimizer, 4)},
            "mfu": round(flops / (step * peak), 4),
            "mfu_compute_only": round(flops / ((compute + optimizer) * peak), 4),
            "label": "model (twin perf + comm models)"}


def compare(npus: int = 256, deployments: tuple[str, ...] = ("cloudmatrix-pooled", "deepseek-h800"),
            **job) -> dict:
    """MFU of the same job on each system at the same number of chips, with the claims beside."""
    rows = {}
    for dep in deployments:
        j = TrainingJob(deployment=dep, **job)
        rows[dep] = j.step(npus) or {"system": j.pm.dep.system, "npus": npus,
                                     "error": f"below the {j.min_npus()} NPUs the model states need"}
    return {"npus": npus, "systems": rows, "claims": CLAIMS}
