"""The roofline model's operator costs (roofline.PerfModel inherits them): GEMMs and attention, from
the chip's kernel tables by shape or its roofline; HBM traffic; the MoE all-to-all and all-reduce on
the fabric's model (comm.py), scaled to a kernel's table where it has one; and one layer's two
streams (attention; gating, dispatch, experts, combine) for q tokens per die. How decode steps and
prefill batches put them together, overlap them and wait for a slow die stays in roofline.py.
The methods read the predictor's deployment, chip, system, network and constants (TimePredictor)
and a few of PerfModel's own (`layer_sync_seconds`, `with_net`)."""
from __future__ import annotations

import dataclasses
import math

from twin.model import rules
from twin.predict import comm, kernels
from twin.predict.base import HEALTHY

US = 1e-6
HIDDEN_RW_BYTES = 16     # per hidden element and layer: norms and residual adds (first principles)
LATENT_RW_BYTES = 3      # per latent element: read, normalise, write (first principles)
UB_PATH_SWITCHES = 3     # die -> L1 -> L2 -> L1 -> die: switch chips crossed (ref 1 UB topology)
UB_PATH_LINKS = 4        # links crossed on that path (ref 1 UB topology)
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


class OperatorCosts:
    """The operator costs of one deployment's latency model (a mixin of roofline.PerfModel)."""

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
