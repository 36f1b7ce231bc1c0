"""Operator-level (roofline) latency model: how long a prefill batch and a decode step take.

Each operator is bounded by compute (FLOPs over peak x efficiency) or HBM (bytes over bandwidth x
efficiency), unless a kernel table by shape (kernels.toml: GEMMs by M x N x K, prefill attention by
length, all-to-all by EP) holds a measured rate for it; every step reports which (`sources`). The
MoE all-to-all comes from the fabric's model (comm.py: UB, or NVLink + RDMA with DeepEP's
kernels); how compute and communication overlap is the accelerator's named strategy
(execution.py); EMS loads are physical (ems.py). Network health enters through NetState, so a
failed optical link slows dispatch and combine; the health of the instance's slowest member
through Health: a slow die (compute, HBM) runs as a member of its own (`_slow`), and every phase
that ends at a synchronisation (an all-to-all, the MoE stream's ops) waits for the slower of the
two (`_group`); a slow EMS server slows every cached load (its DRAM and software data plane).
Constants: twin/catalog/perf.toml (each sourced or labelled there). Over 400 lines because decode and prefill share every private operator cost;
splitting them would scatter one operator model over several files.
"""
from __future__ import annotations

import copy
import dataclasses
import math

from twin.model import rules
from twin.model.config import PRECISIONS
from twin.predict import comm, execution, kernels
from twin.predict.base import HEALTHY, Health, StepResult, TimePredictor, register
from twin.predict.ems import EmsPath, load_seconds, whole_block_reuse

US = 1e-6
HIDDEN_RW_BYTES = 16     # per hidden element and layer: norms and residual adds (first principles)
LATENT_RW_BYTES = 3      # per latent element: read, normalise, write (first principles)
UB_PATH_SWITCHES = 3     # die -> L1 -> L2 -> L1 -> die: switch chips crossed (ref 1 UB topology)
UB_PATH_LINKS = 4        # links crossed on that path (ref 1 UB topology)
LOGIT_BYTES = 4          # FP32 logits read by sampling (assumption)
# DeepEP-Ascend's kernels (sgl-kernel-npu, one rank per die) and the paper's own ("ub", ref 4)
SUPERNODE_KERNELS = ("normal", "low-latency", "ub")


class _Layer:
    """Accumulates operator times (seconds) for one layer of one stream."""

    def __init__(self):
        self.ops: dict[str, float] = {}
        self.src: dict[str, str] = {}

    def add(self, name: str, seconds: float, source: str | None = None) -> None:
        self.ops[name] = self.ops.get(name, 0.0) + seconds
        if source and source not in self.src.get(name, ""):
            self.src[name] = f"{self.src[name]}; {source}" if name in self.src else source

    @property
    def total(self) -> float:
        return sum(self.ops.values())


def _slower(a: _Layer, b: _Layer) -> _Layer:
    """The attention side of two members: a die's attention is data parallel and local, so the
    phase up to the next dispatch waits for the member whose whole side is longer."""
    return b if b.total > a.total else a


def _each_slower(a: _Layer, b: _Layer) -> _Layer:
    """The MoE stream of two members: dispatch, the experts (up to the combine) and the combine
    each end at a synchronisation of the group, so each op takes the slower member's time."""
    out = _Layer()
    for name, t in a.ops.items():
        u = b.ops.get(name, 0.0)
        out.add(name, max(t, u), (b if u > t else a).src.get(name))
    return out


def _sources(*layers: _Layer) -> dict[str, str]:
    """Where each operator's time came from (kernel table or roofline), for the figures' labels."""
    return {name: src for lay in layers for name, src in lay.src.items() if src != "none"}


@register("roofline")
class PerfModel(TimePredictor):
    """Latency model of one deployment; cheap to build, pure functions of its inputs."""

    rates = (1.0, 1.0)     # (compute, HBM) of this view's die: kernel tables' rates scale with them

    def _slow(self) -> "PerfModel":
        """The group's slow die as a predictor of its own: the chip's peak rates times its compute
        health (the vector work follows through `_vector_scale`), its HBM bandwidth times its HBM
        health, the kernel tables' measured rates likewise (`rates`); the network as the group's."""
        h, c = self.health, self.chip
        out = copy.copy(self)
        out.chip = c.model_copy(update={
            "bf16_tflops": c.bf16_tflops * h.compute, "int8_tops": c.int8_tops * h.compute,
            "fp8_tflops": c.fp8_tflops * h.compute, "fp4_tflops": c.fp4_tflops * h.compute,
            "hbm_gbps": c.hbm_gbps * h.hbm})
        out.health = Health(cpu=h.cpu)
        out.rates = (h.compute, h.hbm)
        return out

    def alone(self) -> "PerfModel":
        return self._slow() if self.health.die_slow else self

    def _group(self, pool: str, b: float) -> tuple["PerfModel", float, float] | None:
        """(slow die's view, its batch per die, the healthy dies' batch per die) of a group whose
        mean batch per die is `b`, or None when every die is healthy. The slow die carries `load`
        of a die's share (a mitigation may shrink it); the other dies of the pool's instance take
        the rest."""
        h = self.health
        if not h.die_slow:
            return None
        n = max(2, getattr(self.dep, pool).dies_per_instance)
        return self._slow(), b * h.load, b * (n - h.load) / (n - 1)

    # ---- primitive costs ------------------------------------------------------------------
    def gemm_seconds(self, flops: float, weight_bytes: float, cube_fraction: float, precision: str,
              grouped: bool = False) -> float:
        c = self.chip
        eff = c.expert_gemm_eff if grouped and c.expert_gemm_eff else c.gemm_eff
        peak = c.peak_tflops(precision) * 1e12 * eff * cube_fraction
        return max(flops / peak, weight_bytes / (c.hbm_gbps * 1e9 * (c.gemm_mem_eff or c.mem_eff)))

    def gemm(self, layout: str, groups: float, m: float, n: int, k: int, precision: str,
             frac: float = 1.0, grouped: bool = False) -> tuple[float, str]:
        """(seconds, source) of `groups` GEMMs of M x N x K: from the chip's kernel table by shape
        where it has one (kernels.toml [[gemm]], FP8), the roofline scaled to its nearest row outside
        the rows' M, the roofline alone elsewhere (`grouped`: the roofline's grouped efficiency)."""
        if not (m > 0 and groups > 0):
            return 0.0, "none"
        wb = self._bytes_per_param(precision)

        def roof(mm: float) -> float:
            return self.gemm_seconds(2 * groups * mm * n * k, groups * n * k * wb, frac, precision,
                                     grouped)
        if precision != "fp8":
            return roof(m), f"roofline: no {precision} GEMM table"
        hit = kernels.shape(self.system.accelerator, "gemm", layout, m, n, k,
                            roof=lambda mm: roof(mm) * frac / groups)
        if hit.tflops:
            return 2 * groups * m * n * k / (hit.tflops * self.rates[0] * 1e12 * frac), hit.source
        if hit.edge:
            e = hit.edge
            return (2 * groups * e.m * n * k / (e.tflops * self.rates[0] * 1e12 * frac) * roof(m) / roof(e.m),
                    hit.source)
        return roof(m), hit.source

    def proj_shapes(self, decode: bool) -> list[tuple[float, int, int]]:
        """(groups, N, K) of one layer's attention projections. MLA: q_a and kv_a fused, q_b, kv_b
        (in decode absorbed into two per-head products over the latent), o; they sum to attn_params."""
        m = self.model
        if m.attention != "mla":
            return [(1, round(self.attn_params() / m.hidden), m.hidden)]
        kv_b = ((2 * m.heads, m.kv_lora_rank, m.qk_nope_dim) if decode
                else (1, m.heads * (m.qk_nope_dim + m.v_head_dim), m.kv_lora_rank))
        return [(1, m.q_lora_rank + m.kv_lora_rank + m.rope_dim, m.hidden),
                (1, m.heads * (m.qk_nope_dim + m.rope_dim), m.q_lora_rank), kv_b,
                (1, m.hidden, m.heads * m.v_head_dim)]

    def _attention(self, flops: float, kv_bytes: float, cube_fraction: float,
                   seq: float | None = None) -> tuple[float, str]:
        """(seconds, source): MLA decode (kernels.toml [[decode_attention]], FlashMLA's published
        regimes, where the chip and precision have one) or prefill at sequence length `seq`
        (kernels.toml [[attention]] where the chip has a table: the rate at that length, the nearest
        row's outside it); otherwise the roofline."""
        c = self.chip
        why = None
        if not seq and self.model.attention == "mla":
            table, why = kernels.decode_attention(self.system.accelerator, self.dep.attention_dtype,
                                                  self.dep.kv_dtype_bytes)
            if table:
                if self.rates != (1.0, 1.0):
                    table = dataclasses.replace(table, tflops=table.tflops * self.rates[0],
                                                gbps=table.gbps * self.rates[1])
                t, regime = table.seconds(flops, kv_bytes, cube_fraction)
                return t, f"{why}, {regime}"
        if seq and self.dep.attention_dtype == "bf16":     # the table is BF16 FlashAttention-3
            hit = kernels.shape(self.system.accelerator, "attention", "prefill", seq)
            rate = hit.tflops or (hit.edge.tflops if hit.edge else None)
            if rate:
                return flops / (rate * self.rates[0] * 1e12 * cube_fraction), hit.source.replace(
                    "roofline scaled to table", "nearest row of table")
        peak = c.peak_tflops(self.dep.attention_dtype) * 1e12 * c.mla_compute_eff * cube_fraction
        t = max(flops / peak, kv_bytes / (c.hbm_gbps * 1e9 * c.mem_eff))
        return t, why or ("roofline: " + ("no decode attention table" if not seq else
                                          f"no {self.dep.attention_dtype} prefill attention table on "
                                          f"{self.system.accelerator}"))

    def _vector_scale(self) -> float:
        """Vector work calibrated on a 910C die runs faster on a chip with more BF16 throughput."""
        return self.chip.bf16_tflops / self.k["overheads"]["vector_reference_tflops"]

    def _hbm(self, nbytes: float) -> float:
        return nbytes / (self.chip.hbm_gbps * 1e9 * self.chip.mem_eff)

    def fabric(self) -> comm.ClusterFabric:
        s = self.system
        return comm.ClusterFabric(
            gpus_per_domain=s.nvlink_domain_gpus or s.npus_per_node, nvlink_gbps=s.nvlink_gbps,
            rdma_gbps=s.rdma_nic_gbps / 8, nvlink_latency_us=s.nvlink_latency_us,
            rdma_latency_us=s.rdma_latency_us, rdma_health=self.net.rdma,
            extra_latency_us=self.net.extra_latency_us)

    def a2a_seconds(self, ep: int, tokens_per_rank: float, bytes_per_token: float,
                    rank_dies: int = 1, pull: bool = False, kernel: str = "normal") -> float:
        """One MoE all-to-all (dispatch or combine) as seen by one rank of `rank_dies` dies."""
        return self.a2a(ep, tokens_per_rank, bytes_per_token, rank_dies, pull, kernel)[0]

    def a2a(self, ep: int, tokens_per_rank: float, bytes_per_token: float, rank_dies: int = 1,
            pull: bool = False, kernel: str = "normal") -> tuple[float, str]:
        """(seconds, source) of one all-to-all. The fabric's roofline (UB: the paper's kernels,
        calibrated on ref 4; GPU: NVLink + RDMA with a DeepEP `kernel`) gives the dependence on
        shape and health; where the kernel has a table by shape (kernels.toml) its level comes from
        the table: inside the table the table's time, outside it the roofline scaled to the nearest
        table row (same kernel, the table's token count). Kernel "ub" is the paper's own kernels."""
        s = self.system
        op = "combine" if pull else "dispatch"
        if kernel not in self.kernels():
            raise ValueError(f"kernel = {kernel!r}: allowed on {s.kind} {self.dep.system} "
                             f"{', '.join(self.kernels())}")
        roof = self._a2a_roofline(ep, tokens_per_rank, bytes_per_token, rank_dies, pull, kernel)
        if kernel == "ub":
            return roof, "roofline: UB model (paper's kernels, ref 4)"
        hit = kernels.lookup(self.dep.system, kernel, op, int(ep), tokens_per_rank, rank_dies,
                             self.model.top_k, s.nvlink_domain_gpus or s.npus_per_node)
        t = hit.table
        if t is None or t.rank != ("die" if rank_dies == 1 else "npu") and s.kind == "supernode":
            return roof, hit.source
        edge = min(max(int(ep), t.rows[0].ep), t.rows[-1].ep)
        if hit.seconds is not None and self.net == HEALTHY and self.rates[0] == 1.0:
            return hit.seconds, hit.source
        base = self._a2a_roofline(edge, t.tokens, bytes_per_token, rank_dies, pull, kernel, HEALTHY, True)
        if not base > 0 or not math.isfinite(roof):
            return roof, hit.source
        how = "under faults" if hit.seconds is not None else hit.source.removeprefix("roofline: ")
        return (t.seconds(edge) * roof / base,
                f"roofline scaled to table {t.name} at EP{edge} ({how})")

    def _a2a_roofline(self, ep, tokens, bytes_per_token, rank_dies, pull, kernel,
                      net=None, full_speed: bool = False) -> float:
        """`full_speed`: as a healthy die would run it (the kernel table's reference)."""
        s, net = self.system, net or self.net
        tr = comm.Traffic(ep, tokens, bytes_per_token, self.model.top_k)
        if s.kind == "supernode":
            if net.partitioned:
                return math.inf
            per_die = s.ub_measured_read_gbps if pull else s.ub_measured_write_gbps
            path_us = UB_PATH_SWITCHES * s.switch_latency_us + UB_PATH_LINKS * s.link_latency_us + net.extra_latency_us
            vs = self._vector_scale() / (self.rates[0] if full_speed else 1.0)
            return comm.ub_seconds(tr, self.k["comm"], per_die, rank_dies, vs, path_us, net.ub, combine=pull)
        fab = self.fabric() if net is self.net else self.with_net(net).fabric()
        return fab.seconds(tr, kernel, self.k["nvlink_rdma"])

    def allreduce_seconds(self, nbytes: float, ranks: int) -> float:
        """Ring all-reduce of `nbytes` per rank over `ranks` ranks on the deployment's fabric
        (comm.py: flat over UB; NVLink then RDMA on a cluster)."""
        s = self.system
        if s.kind == "supernode":
            return comm.ub_allreduce_seconds(nbytes, ranks, s.ub_measured_write_gbps * self.net.ub,
                                             s.ub_latency_us)
        return self.fabric().allreduce_seconds(nbytes, ranks, self.k["nvlink_rdma"])

    def kernels(self) -> tuple[str, ...]:
        """The all-to-all kernels this fabric can run: DeepEP's generations on a GPU fabric
        (comm.KERNELS); DeepEP-Ascend's two and the paper's own ("ub") on a supernode."""
        return SUPERNODE_KERNELS if self.system.kind == "supernode" else tuple(comm.KERNELS)

    def alltoall(self, ep: int, tokens: float, kernel: str | None = None, pool: str | None = None) -> dict:
        """Dispatch and combine of `tokens` per rank at EP `ep`, each with its source (kernel table
        or roofline) and the bandwidth it achieves per rank (bytes a rank sends to distinct remote
        ranks / time; for a table, also the figure in the table's own metric). On a supernode the
        DeepEP-Ascend kernels (normal, low-latency) run one rank per die; the paper's kernels
        ("ub") one rank per NPU, as in ref 4's table."""
        supernode = self.system.kind == "supernode"
        allowed = self.kernels()
        if pool not in (None, "decode", "prefill"):
            raise ValueError(f"pool = {pool!r}: allowed decode, prefill")
        # `pool`: the deployment's own kernel for that phase (perf alltoall); else DeepEP's normal
        kernel = kernel or (self.pool_kernel(pool) if pool else "normal")
        if ep < 1 or ep != int(ep):
            raise ValueError(f"ep = {ep}: must be a whole number >= 1")
        if not tokens > 0:
            raise ValueError(f"tokens = {tokens}: must be > 0")
        if kernel not in allowed:
            raise ValueError(f"kernel = {kernel!r}: allowed {', '.join(allowed)}")
        m = self.model
        rank_dies = self.dies_per_npu if kernel == "ub" else 1
        out = {"system": self.dep.system, "fabric": "ub" if supernode else "nvlink+rdma",
               "ep": int(ep), "tokens": tokens, "kernel": kernel,
               "rank": "npu" if rank_dies > 1 else ("die" if supernode else "gpu")}
        remote = rules.remote_ranks(ep, m.top_k)
        gpn = self.system.nvlink_domain_gpus or self.system.npus_per_node
        for name, nbytes in (("dispatch", m.dispatch_bytes_per_token),
                             ("combine", m.combine_bytes_per_token)):
            sec, source = self.a2a(int(ep), tokens, nbytes, rank_dies, pull=name == "combine",
                                   kernel=kernel)
            us = sec / US
            out[f"{name}_us"] = round(us, 3)
            out[f"{name}_gb_s"] = round(tokens * remote * nbytes / (us * 1e3), 3) if us else 0.0
            t = kernels.find(self.dep.system, kernel, name, m.top_k, gpn, int(ep))
            if t is not None and us and math.isfinite(us):
                out[f"{name}_{t.metric}"] = round(t.published(int(ep), tokens, sec, m.top_k, gpn), 2)
            out[f"{name}_source"] = source
        return out

    def pool_kernel(self, pool: str) -> str:
        """The pool's all-to-all kernel: its own choice, else the paper's kernels ("ub") on a
        supernode and DeepEP's normal kernels on a GPU fabric."""
        k = getattr(self.dep, pool).a2a_kernel
        return k or ("ub" if self.system.kind == "supernode" else "normal")

    def dispatch_us(self, ep: int, tokens_per_npu: float = 128, kernel: str | None = None) -> float:
        """Dispatch latency with EP ranks of one NPU each (the setting of ref 4's table), with the
        decode pool's kernel unless `kernel` is given."""
        return self.a2a_seconds(ep, tokens_per_npu, self.model.dispatch_bytes_per_token,
                                self.dies_per_npu, kernel=kernel or self.pool_kernel("decode")) / US

    def combine_us(self, ep: int, tokens_per_npu: float = 128, kernel: str | None = None) -> float:
        return self.a2a_seconds(ep, tokens_per_npu, self.model.combine_bytes_per_token,
                                self.dies_per_npu, pull=True,
                                kernel=kernel or self.pool_kernel("decode")) / US

    def imbalance(self, pool: str, balance: str) -> float:
        """Busiest die's routed load over the mean (1 for perfect balance)."""
        if balance == "perfect":
            return 1.0
        if balance != "default":
            raise ValueError(f"balance = {balance!r}: allowed 'default' or 'perfect'")
        p = getattr(self.dep, pool)
        n = max(2, p.ep - p.shared_expert_dies)
        return 1 + self.k["balance"]["load_cv"] * math.sqrt(2 * math.log(n))

    # ---- one MoE / dense layer for q tokens per die ---------------------------------------
    def moe_stream(self, pool: str, q: float, frac: float, precision: str,
                    balance: str, q_in: float | None = None) -> _Layer:
        """One MoE layer for `q` tokens per die sent (dispatch, combine) and `q_in` (default `q`), the
        group's mean, routed to its experts."""
        m, p = self.model, getattr(self.dep, pool)
        q_in = q if q_in is None else q_in
        lay = _Layer()
        lay.add("gating", self.gemm_seconds(2 * q * m.hidden * m.routed_experts,
                                     m.hidden * m.routed_experts * 2, frac, "bf16"))
        kernel = self.pool_kernel(pool)
        lay.add("dispatch", *self.a2a(p.ep, q, m.dispatch_bytes_per_token, kernel=kernel))
        ep = p.ep
        routed_dies = ep - p.shared_expert_dies
        slots_per_die = (m.routed_experts + p.redundant_experts) / routed_dies
        pairs = q_in * m.top_k * ep / routed_dies * self.imbalance(pool, balance)
        layout = "masked" if pool == "decode" else "contiguous"   # DeepGEMM's decode / prefill layouts
        routed, src = self.expert_gemms(layout, slots_per_die, pairs / slots_per_die, precision, frac)
        if m.shared_experts and p.shared_expert_dies:
            shared_tokens = q_in * ep / p.shared_expert_dies
            shared, _ = self.expert_gemms("dense", m.shared_experts, shared_tokens, precision, frac)
            lay.add("experts", max(routed, shared), src)   # separate dies run in parallel
        else:
            lay.add("experts", routed, src)
            if m.shared_experts:
                lay.add("shared_expert", *self.expert_gemms("dense", m.shared_experts, q, precision, frac))
        lay.add("combine", *self.a2a(p.ep, q, m.combine_bytes_per_token, pull=True, kernel=kernel))
        if pool == "decode" and self.layer_sync_seconds():
            lay.add("group_sync", self.layer_sync_seconds())
        return lay

    def expert_gemms(self, layout: str, groups: float, m: float, precision: str,
                     frac: float) -> tuple[float, str]:
        """Gate+up (2 x intermediate by hidden) and down (hidden by intermediate) GEMMs of `groups`
        experts with `m` tokens each."""
        md = self.model
        up = self.gemm(layout, groups, m, 2 * md.moe_intermediate, md.hidden, precision, frac, True)
        down = self.gemm(layout, groups, m, md.hidden, md.moe_intermediate, precision, frac, True)
        return up[0] + down[0], up[1] if up[1] == down[1] else f"{up[1]}; {down[1]}"

    def activation_bytes_per_token_layer(self) -> float:
        """HBM traffic of the memory-bound operators between the GEMMs, per token and layer: norms
        and residual adds (16 x hidden: read/write BF16, write the quantised GEMM input), latent
        norms, RoPE on the queries, quantising the attention output, SwiGLU of every routed and
        shared expert, and the combine's weighted sum of top-k BF16 outputs (first principles)."""
        m = self.model
        h, act, q8 = m.hidden, 2, 1
        latent = LATENT_RW_BYTES * (m.q_lora_rank + m.kv_lora_rank + m.rope_dim)
        rope = m.heads * m.rope_dim * 2 * act
        attn_out = m.heads * m.v_head_dim * (act + q8)
        swiglu = (m.top_k + m.shared_experts) * m.moe_intermediate * (2 * act + q8)
        combine = (m.top_k + 1) * h * act
        return HIDDEN_RW_BYTES * h + latent + rope + attn_out + swiglu + combine

    def attention_stream(self, q_tokens: float, seqs: float, ctx: float, frac: float,
                          precision: str, decode: bool, seq: float | None = None) -> _Layer:
        """One layer's attention side for `q_tokens` (prefill: prompts of `seq` tokens, for the
        prefill attention kernel's table)."""
        m = self.model
        lay = _Layer()
        lay.add("elementwise", self._hbm(q_tokens * self.activation_bytes_per_token_layer()))
        for g, n, k in self.proj_shapes(decode):
            lay.add("mla_proj" if m.attention == "mla" else "qkv_o_proj",
                    *self.gemm("dense", g, q_tokens, n, k, precision, frac))
        if m.attention == "mla" and decode:   # absorbed form: attend over the 576-dim latent
            per = m.heads * (2 * m.kv_lora_rank + m.rope_dim) * 2
        elif m.attention == "mla":
            per = m.heads * (m.qk_nope_dim + m.rope_dim + m.v_head_dim) * 2
        else:
            per = m.heads * m.head_dim * 2 * 2
        kv_bytes = seqs * ctx * self.kv_bytes_per_token_layer() if decode else 0.0
        lay.add("attention", *self._attention(q_tokens * ctx * per, kv_bytes, frac,
                                              None if decode else seq))
        if not self.dep.fused_attention:   # FlashMLA / FlashAttention fuse the softmax
            rate = self.k["overheads"]["softmax_gelems_per_s"] * 1e9 * frac * self._vector_scale()
            lay.add("softmax", q_tokens * ctx * m.heads / rate)
        return lay

    # ---- decode ---------------------------------------------------------------------------
    def decode_step(self, batch_per_npu: float | None = None, kv_len: float = 4096,
                    mtp: bool | None = None, microbatch: bool | None = None,
                    precision: str | None = None, balance: str = "default") -> StepResult:
        """One decode step of every sequence in the batch (with MTP: 1 + accepted tokens)."""
        dep, m = self.dep, self.model
        moe_p = self._check_precision(self.moe_precision(precision))
        precision = self._check_precision(precision)
        mtp = dep.mtp if mtp is None else mtp
        if mtp and not m.mtp_modules:
            raise ValueError(f"mtp: model {dep.model} has no MTP module (allowed: --no-mtp)")
        b = (dep.decode.batch_per_die * self.dies_per_npu if batch_per_npu is None
             else batch_per_npu) / self.dies_per_npu
        if not b > 0:
            raise ValueError(f"batch = {b * self.dies_per_npu}: must be > 0")
        if not kv_len > 0:
            raise ValueError(f"kv = {kv_len}: KV length must be > 0 tokens")
        drafts = rules.draft_tokens(m.mtp_modules, mtp, dep.mtp_draft_steps)
        tok_per_seq = 1 + drafts
        st = self.k["streams"]
        use_mb = dep.decode.microbatch if microbatch is None else microbatch
        group = self._group("decode", b)
        candidates = [self._decode_layers(b, kv_len, tok_per_seq, (precision, moe_p), balance, 1, group=group)]
        if use_mb:
            candidates += [self._decode_layers(b, kv_len, tok_per_seq, (precision, moe_p), balance,
                                               st["microbatches"], split, group) for split in self._splits()]
        best = min(range(len(candidates)), key=lambda i: candidates[i][0])
        step_s, ops, streams = candidates[best]
        sources = streams.pop("sources")
        n_mb = 1 if best == 0 else st["microbatches"]
        split = streams.pop("attention_cube_share", None)
        head, ops["sampling"] = self._head(b, tok_per_seq, drafts)
        if group:      # local to each die, but the next step's first dispatch waits for the slower
            sp, bs, bh = group
            head, ops["sampling"] = max(self._head(bh, tok_per_seq, drafts), sp._head(bs, tok_per_seq, drafts),
                                        key=sum)
        ops["lm_head"] = head
        fixed = self.step_overheads()
        ops.update(fixed)
        step_s += head + ops["sampling"] + sum(fixed.values())
        tokens_per_seq = rules.expected_tokens_per_step(drafts, dep.mtp_acceptance)
        tpot = step_s / tokens_per_seq
        return StepResult("decode", step_s * 1e3, b * tokens_per_seq,
                          b * self.dies_per_npu / tpot,
                          {k: v * 1e3 for k, v in ops.items()}, tpot_ms=tpot * 1e3,
                          streams_ms={k: v * 1e3 for k, v in streams.items()}, microbatches=n_mb,
                          cube_split=(f"{round(split * self.chip.cube_cores)}:"
                                      f"{round((1 - split) * self.chip.cube_cores)}" if split else None),
                          sources=sources)

    def layer_sync_seconds(self) -> float:
        """Fixed cost of one layer of one microbatch on a GPU ([step] layer_sync_us, calibrated): the
        EP group's wait at its two all-to-alls and the kernel boundaries inside a CUDA graph. In a
        decode MoE layer it is the op `group_sync`: paid in sequence by one batch, hidden by two
        microbatches (each fills the other's gaps, DeepSeek's profile-data timelines); a dense
        layer pays it in sequence. Ascend's counterpart is the stream hand-off ([streams] sync_us)
        and one fused graph per step."""
        return self.k["step"]["layer_sync_us"] * US if self.chip.execution == "sm-overlap" else 0.0

    def step_overheads(self) -> dict[str, float]:
        """Seconds a decode step costs besides its layers, LM head and sampling: the graph launch
        (Ascend: one fused graph per step, ref 3) and the CPU scheduler's time when the framework
        does not overlap it with the device ([step] scheduler_ms, calibrated)."""
        out = {}
        if self.chip.execution == "ascend-two-stream":
            out["graph_launch"] = self.k["overheads"]["graph_launch_ms"] * 1e-3
        if not self.dep.overlap_scheduler:
            out["scheduler"] = self.k["step"]["scheduler_ms"] * 1e-3
        return out

    def _head(self, b: float, tok_per_seq: int, drafts: int) -> tuple[float, float]:
        """(LM head, sampling) seconds of a die's batch `b` (main tokens + MTP draft), all cores."""
        head_tokens = b * (tok_per_seq + drafts)
        hb = self.k["overheads"]["lm_head_bytes_per_param"]
        head = (self.gemm_seconds(2 * head_tokens * self.head_params(), self.head_params() * hb, 1.0, "bf16")
                * (1 + drafts) if b else 0.0)
        return head, self._hbm(head_tokens * self.model.vocab * LOGIT_BYTES)

    def _splits(self) -> list[float | None]:
        """Attention stream's share of the cube cores the runtime may choose per operating point
        (ascend-two-stream: whole groups of 4 AIC with their AIV; ref 3 uses 16 of 24 at batch 96)."""
        n = self.chip.cube_cores
        if self.chip.execution != "ascend-two-stream" or not n:
            return [None]
        return [c / n for c in range(4, n, 4)]

    def _member_layers(self, b: float, q_in: float | None, kv_len: float, tok_per_seq: int,
                       precisions: tuple[str, str], balance: str, n_mb: int, fa: float,
                       fm: float) -> tuple[_Layer, _Layer, _Layer, float]:
        """One die's (attention side, MoE stream, dense layer's attention, dense MLP) for its batch
        `b` per die, with `q_in` tokens per microbatch routed to its experts (default its own)."""
        precision, moe_p = precisions
        seqs = b / n_mb
        q = seqs * tok_per_seq
        attn = self.attention_stream(q, seqs, kv_len, fa, precision, decode=True)
        moe = self.moe_stream("decode", q, fm, moe_p, balance, q_in)
        dense_attn = self.attention_stream(b * tok_per_seq, b, kv_len, 1.0, precision, True)
        wb = self._bytes_per_param(precision)
        dense_mlp = self.gemm_seconds(2 * b * tok_per_seq * self.dense_mlp_params(),
                               self.dense_mlp_params() * wb, 1.0, precision)
        return attn, moe, dense_attn, dense_mlp

    def _decode_layers(self, b: float, kv_len: float, tok_per_seq: int, precisions: tuple[str, str],
                       balance: str, n_mb: int, split: float | None = None,
                       group: tuple | None = None) -> tuple[float, dict, dict]:
        """Whole-model time of the transformer layers (and MTP module) for one step; `precisions`:
        (attention and dense, experts); `group` (`_group`): a slow die the synchronous phases wait for."""
        m, st = self.model, self.k["streams"]
        precision, moe_p = precisions
        gpu = self.chip.execution == "sm-overlap"
        if n_mb > 1 and not gpu:       # ascend-two-stream: cube cores split between the streams
            fa, fm = split, 1 - split
        else:                          # sm-overlap: pieces alone on the whole GPU (execution.py shares it)
            fa = fm = 1.0
        q = b / n_mb * tok_per_seq
        if group is None:
            attn, moe, dense_attn, dense_mlp = self._member_layers(b, None, kv_len, tok_per_seq, precisions,
                                                                   balance, n_mb, fa, fm)
        else:
            sp, bs, bh = group
            member = (kv_len, tok_per_seq, precisions, balance, n_mb, fa, fm)
            a1, m1, da1, dm1 = self._member_layers(bh, q, *member)
            a2, m2, da2, dm2 = sp._member_layers(bs, q, *member)
            attn, moe = _slower(a1, a2), _each_slower(m1, m2)
            dense_attn, dense_mlp = (da2, dm2) if da2.total + dm2 > da1.total + dm1 else (da1, dm1)
        ops: dict[str, float] = {}
        for name, t in dense_attn.ops.items():
            ops[name] = ops.get(name, 0.0) + t * m.dense_layers
        ops["dense_mlp"] = dense_mlp * m.dense_layers
        sync = self.layer_sync_seconds()
        dense_s = (dense_attn.total + dense_mlp + sync) * m.dense_layers
        if n_mb > 1 and gpu:
            per_layer = self.sm_overlap_layer(attn, moe, "decode", q)
            moe_s = per_layer * self.moe_layers
        elif n_mb > 1:
            per_layer = execution.two_stream_decode(attn.total, moe.total, n_mb, st["sync_us"] * US)
            moe_s = per_layer * self.moe_layers + min(attn.total, moe.total)
        else:
            per_layer = attn.total + moe.total
            moe_s = per_layer * self.moe_layers
        for lay in (attn, moe):
            for name, t in lay.ops.items():
                ops[name] = ops.get(name, 0.0) + t * n_mb * self.moe_layers
        if n_mb > 1:   # negative: time hidden by overlapping the streams (net of their syncs)
            ops["pipeline_overlap"] = moe_s - (attn.total + moe.total) * n_mb * self.moe_layers
        mtp_s = 0.0
        if tok_per_seq > 1:   # MTP drafts: one MoE-layer block per module, one token per sequence
            d_attn = self.attention_stream(b, b, kv_len, 1.0, precision, decode=True)
            d_moe = self.moe_stream("decode", b, 1.0, moe_p, balance)
            if group is not None:
                sp, bs, bh = group
                d_attn = _slower(self.attention_stream(bh, bh, kv_len, 1.0, precision, decode=True),
                                 sp.attention_stream(bs, bs, kv_len, 1.0, precision, decode=True))
                d_moe = _each_slower(self.moe_stream("decode", bh, 1.0, moe_p, balance, b),
                                     sp.moe_stream("decode", bs, 1.0, moe_p, balance, b))
            mtp_s = (d_attn.total + d_moe.total) * (tok_per_seq - 1)
            ops["mtp_module"] = mtp_s
        if sync:
            ops["layer_sync"] = sync * m.dense_layers
        streams = {"attention_per_microbatch": attn.total, "moe_per_microbatch": moe.total,
                   "per_layer": per_layer}
        if split is not None and n_mb > 1:
            streams["attention_cube_share"] = split
        streams["sources"] = _sources(attn, moe)
        return dense_s + moe_s + mtp_s, ops, streams

    def overlap_pieces(self, attn: _Layer, moe: _Layer, pool: str = "prefill",
                       q: float = 0.0) -> execution.Pieces:
        """Cut one microbatch's layer (`q` tokens per die) into attention-side compute, dispatch,
        experts, combine, with the part of each all-to-all that runs on the compute units."""
        # group_sync: two microbatches fill each other's launch gaps and group waits (hidden)
        gs = moe.ops.get("group_sync", 0.0)
        d, c = moe.ops["dispatch"], moe.ops["combine"]
        d_sm, c_sm = self.comm_sm_seconds(pool, q)
        return execution.Pieces(a=attn.total + moe.ops.get("gating", 0.0), d=d,
                                e=moe.total - d - c - gs - moe.ops.get("gating", 0.0), c=c,
                                d_sm=min(d_sm, d), c_sm=min(c_sm, c))

    def comm_sm_seconds(self, pool: str, q: float) -> tuple[float, float]:
        """(dispatch, combine) seconds a pool's all-to-all kernels spend on the SMs when they hold
        none while in flight (DeepEP low-latency, ref G 2: 0 SMs in decode): the send half reads each
        token and writes its top-k messages, the receive half reads and writes the k messages (combine:
        writes the one reduced token), HBM-bound copies of q x bytes x (1 + 3k) (first principles).
        Kernels holding their own SMs (comm_sms > 0) compute beside them instead (execution.py)."""
        if self.chip.execution != "sm-overlap" or getattr(self.dep, pool).comm_sms:
            return 0.0, 0.0
        m = self.model
        per = q * (1 + 3 * m.top_k)
        return self._hbm(per * m.dispatch_bytes_per_token), self._hbm(per * m.combine_bytes_per_token)

    def sm_overlap_layer(self, attn: _Layer, moe: _Layer, pool: str, q: float) -> float:
        """Two microbatches' layer under sm-overlap (execution.py): the pool's comm_sms are the
        communication kernels' share of the SMs; [sm_overlap] corun_stretch the co-run contention."""
        share = execution.sm_share(self.chip.sms, getattr(self.dep, pool).comm_sms)
        return execution.sm_overlap(self.overlap_pieces(attn, moe, pool, q), share,
                                    self.k["sm_overlap"]["corun_stretch"])

    # ---- prefill --------------------------------------------------------------------------
    def prefill_batch(self, prompt_len: float = 4096, tokens_per_npu: float | None = None,
                      reuse: float = 0.0, balance: str = "default",
                      precision: str | None = None, microbatch: bool | None = None,
                      cache_plane: str | None = None, ssd_fraction: float = 0.0,
                      block_tokens: int | None = None) -> StepResult:
        """One prefill batch on one instance: `tokens_per_npu` prompt tokens per NPU, a fraction
        `reuse` of them found in EMS (loaded over UB or VPC instead of computed), `ssd_fraction` of
        those from the SSD tier. `block_tokens`: `reuse` is a token share of each prompt and EMS
        serves it in whole blocks of that size (the partial block is recomputed); None: `reuse`
        already counts whole blocks (the engine's EMS). With a slow die, every layer's all-to-all waits for it: the batch
        takes the slower of a healthy die's time and the slow die's (the same tokens per die)."""
        if self.health.die_slow:
            args = (prompt_len, tokens_per_npu, reuse, balance, precision, microbatch, cache_plane, ssd_fraction,
                    block_tokens)
            return max(self.with_health(Health(cpu=self.health.cpu)).prefill_batch(*args),
                       self._slow().prefill_batch(*args), key=lambda r: r.step_ms)
        dep, m = self.dep, self.model
        moe_p = self._check_precision(self.moe_precision(precision))
        precision = self._check_precision(precision)
        if not 0 <= reuse < 1:
            raise ValueError(f"reuse = {reuse}: allowed 0 <= reuse < 1")
        if not 0 <= ssd_fraction <= 1:
            raise ValueError(f"ssd_fraction = {ssd_fraction}: allowed 0 <= ssd_fraction <= 1")
        if prompt_len <= 0:
            raise ValueError(f"prompt = {prompt_len}: must be > 0")
        t_die = (dep.prefill.tokens_per_die if tokens_per_npu is None
                 else tokens_per_npu / self.dies_per_npu)
        if not t_die > 0:
            raise ValueError(f"tokens per NPU = {tokens_per_npu}: must be > 0")
        seqs = t_die / prompt_len
        reuse = whole_block_reuse(reuse, prompt_len, block_tokens)
        new = t_die * (1 - reuse)
        ctx = prompt_len * (1 + reuse) / 2           # mean causal context of the new tokens
        use_mb = dep.prefill.microbatch if microbatch is None else microbatch
        gpu = self.chip.execution == "sm-overlap"
        n_mb = self.k["streams"]["microbatches"] if gpu and use_mb else 1
        attn = self.attention_stream(new / n_mb, seqs / n_mb, ctx, 1.0, precision, False, prompt_len)
        moe = self.moe_stream("prefill", new / n_mb, 1.0, moe_p, balance)
        comm_s = moe.ops["dispatch"] + moe.ops["combine"]
        if math.isinf(comm_s):      # partitioned plane: the batch never finishes
            return StepResult("prefill", math.inf, t_die * self.dies_per_npu, 0.0,
                              {"dispatch": math.inf, "combine": math.inf}, ttft_ms=math.inf)
        compute = attn.total + moe.total - comm_s
        if gpu and use_mb:
            layer = self.sm_overlap_layer(attn, moe, "prefill", new / n_mb)
        elif use_mb:
            layer = execution.two_stream_prefill(compute, comm_s)
        else:
            layer = compute + comm_s
        wb = self._bytes_per_param(precision)
        dense_attn = self.attention_stream(new, seqs, ctx, 1.0, precision, False, prompt_len)
        dense_mlp = self.gemm_seconds(2 * new * self.dense_mlp_params(), self.dense_mlp_params() * wb,
                               1.0, precision)
        ops: dict[str, float] = {}
        for lay, n in ((dense_attn, m.dense_layers), (attn, self.moe_layers * n_mb),
                       (moe, self.moe_layers * n_mb)):
            for name, t in lay.ops.items():
                ops[name] = ops.get(name, 0.0) + t * n
        ops["dense_mlp"] = dense_mlp * m.dense_layers
        if use_mb:
            ops["pipeline_overlap"] = (layer - (compute + comm_s) * n_mb) * self.moe_layers
        step = (dense_attn.total + dense_mlp) * m.dense_layers + layer * self.moe_layers
        ops["lm_head"] = self.gemm_seconds(2 * seqs * self.head_params(), self.head_params() * 2, 1.0, "bf16")
        step += ops["lm_head"]
        if reuse > 0:
            ems = self.ems_load(t_die * reuse, step, cache_plane, ssd_fraction=ssd_fraction)
            ops.update(ems)
            step += sum(ems.values())
        tput = t_die * self.dies_per_npu / step
        return StepResult("prefill", step * 1e3, t_die * self.dies_per_npu, tput,
                          {k_: v * 1e3 for k_, v in ops.items()}, ttft_ms=step * 1e3,
                          microbatches=n_mb if use_mb else 1, sources=_sources(attn, moe))

    def _ems_path(self, plane: str) -> EmsPath:
        s, cpu = self.system, self.cat.chip(self.system.cpu) if self.system.cpu else None
        dies_per_node = s.npus_per_node * self.dies_per_npu
        if plane == "ub" and s.kind == "supernode":
            bw, lat = s.ub_cpu_read_gbps * self.net.ub, s.ub_latency_us
        else:   # VPC: the node's card is shared by its dies
            bw, lat = s.vpc_gbps / 8 / dies_per_node * self.net.vpc, s.vpc_latency_us
        ems_cpus = max(1, self.dep.ems_nodes * s.cpus_per_node)
        dies = max(1, self.dep.prefill.instances * self.dep.prefill.dies_per_instance)
        # a batch's blocks hash over every server, so its load waits for the slowest (health.cpu)
        slow = self.health.cpu
        return EmsPath(plane_gbps=bw, plane_latency_us=lat,
                       dram_gbps=(cpu.dram_gbps if cpu else s.vpc_gbps / 8) * slow,
                       ssd_gbps=cpu.ssd_gbps if cpu else s.vpc_gbps / 8,
                       server_gbps=self.k["ems"]["server_gbps"] * slow, servers_per_die=ems_cpus / dies)

    def ems_load(self, tokens_per_die: float, compute_s: float, plane: str | None = None,
                 block_tokens: int = 512, ssd_fraction: float = 0.0) -> dict[str, float]:
        """Exposed seconds (lookup, transfer) to load `tokens_per_die` cached tokens' KV from EMS."""
        return load_seconds(self._ems_path(plane or self.dep.cache_plane),
                            tokens_per_die * self.kv_bytes_per_token(), tokens_per_die / block_tokens,
                            self.model.layers, compute_s, ssd_fraction)


    def _check_precision(self, precision: str | None) -> str:
        p = precision or self.dep.precision
        if p not in PRECISIONS:
            raise ValueError(f"precision = {p!r}: allowed {', '.join(PRECISIONS)}")
        if self.chip.peak_tflops(p) <= 0:
            ok = [x for x in PRECISIONS if self.chip.peak_tflops(x) > 0]
            raise ValueError(f"precision = {p!r}: {self.system.accelerator} has no {p} "
                             f"(allowed: {', '.join(ok)})")
        return p
