"""Operator-level latency model: how long a prefill batch and a decode step take on a deployment.

Each operator is bounded by compute (FLOPs over peak x efficiency), HBM (bytes over bandwidth x
efficiency) or communication (alpha + beta log2 EP + bytes over the plane's bandwidth + path
latency). The two-stream microbatch pipeline is explicit: attention and MoE streams get their
share of cube cores and overlap, so a layer costs n_mb x max(attention, MoE) instead of the sum.
Network health enters through NetState, so a failed optical link slows dispatch and combine.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, replace
from functools import lru_cache

from .config import CATALOG_DIR, Catalog, Chip, Deployment, Model, System, catalog

US = 1e-6


@lru_cache(maxsize=1)
def constants() -> dict:
    """The model's own constants (twin/catalog/perf.toml), each sourced or labelled there."""
    return tomllib.loads((CATALOG_DIR / "perf.toml").read_text())


@dataclass(frozen=True)
class NetState:
    """Health of the planes as the perf model sees it: fraction of healthy bandwidth left."""
    ub: float = 1.0
    rdma: float = 1.0
    vpc: float = 1.0
    extra_latency_us: float = 0.0

    @property
    def partitioned(self) -> bool:
        return self.ub <= 0


HEALTHY = NetState()


@dataclass(frozen=True)
class StepResult:
    """Time of one step with its per-operator breakdown (ms, summed over layers)."""
    phase: str
    step_ms: float
    tokens_per_step: float
    tokens_per_s_per_npu: float
    breakdown: dict[str, float]
    tpot_ms: float | None = None
    ttft_ms: float | None = None
    streams_ms: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        out = {"phase": self.phase, "step_time_ms": round(self.step_ms, 4),
               "tokens_per_step": round(self.tokens_per_step, 3),
               "tokens_per_s_per_npu": round(self.tokens_per_s_per_npu, 2),
               "breakdown": {k: round(v, 4) for k, v in self.breakdown.items()}}
        if self.tpot_ms is not None:
            out["tpot_ms"] = round(self.tpot_ms, 4)
        if self.ttft_ms is not None:
            out["ttft_ms"] = round(self.ttft_ms, 4)
        if self.streams_ms:
            out["streams_ms"] = {k: round(v, 4) for k, v in self.streams_ms.items()}
        return out


class _Layer:
    """Accumulates operator times (seconds) for one layer of one stream."""

    def __init__(self):
        self.ops: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        self.ops[name] = self.ops.get(name, 0.0) + seconds

    @property
    def total(self) -> float:
        return sum(self.ops.values())


class PerfModel:
    """Latency model of one deployment; cheap to build, pure functions of its inputs."""

    def __init__(self, deployment: str | Deployment, cat: Catalog | None = None,
                 net: NetState = HEALTHY, k: dict | None = None):
        self.cat = cat or catalog()
        self.dep: Deployment = (self.cat.deployment(deployment) if isinstance(deployment, str)
                                else deployment)
        self.system: System = self.cat.system(self.dep.system)
        self.chip: Chip = self.cat.chip(self.system.accelerator)
        self.model: Model = self.cat.model(self.dep.model)
        self.net = net
        self.k = k or constants()

    def with_net(self, net: NetState) -> "PerfModel":
        return PerfModel(self.dep, self.cat, net, self.k)

    # ---- model geometry -------------------------------------------------------------------
    @property
    def dies_per_npu(self) -> int:
        return self.chip.dies_per_package

    def kv_bytes_per_token_layer(self) -> float:
        m = self.model
        width = (m.kv_lora_rank + m.rope_dim) if m.attention == "mla" else 2 * m.kv_heads * m.head_dim
        return width * self.dep.kv_dtype_bytes

    def kv_bytes_per_token(self) -> float:
        """KV bytes per token over all layers (ref 2: about 70 KB for DeepSeek-R1 in BF16)."""
        return self.kv_bytes_per_token_layer() * self.model.layers

    def attn_params(self) -> float:
        m = self.model
        if m.attention == "mla":
            qk = m.qk_nope_dim + m.rope_dim
            return (m.hidden * m.q_lora_rank + m.q_lora_rank * m.heads * qk
                    + m.hidden * (m.kv_lora_rank + m.rope_dim)
                    + m.kv_lora_rank * m.heads * (m.qk_nope_dim + m.v_head_dim)
                    + m.heads * m.v_head_dim * m.hidden)
        return m.hidden * m.head_dim * (2 * m.heads + 2 * m.kv_heads)

    def expert_params(self) -> float:
        return 3 * self.model.hidden * self.model.moe_intermediate

    def dense_mlp_params(self) -> float:
        return 3 * self.model.hidden * self.model.dense_intermediate

    def head_params(self) -> float:
        return self.model.vocab * self.model.hidden

    @property
    def moe_layers(self) -> int:
        return self.model.layers - self.model.dense_layers

    def weight_bytes_per_die(self, pool: str) -> float:
        """Weights resident on one die: attention replicated (DP), experts sharded by EP."""
        m, p = self.model, getattr(self.dep, pool)
        wb = self._bytes_per_param()
        slots = (m.routed_experts + p.redundant_experts) / max(1, p.ep - p.shared_expert_dies)
        shared = m.shared_experts if p.shared_expert_dies == 0 else 0
        experts = (slots + shared) * self.expert_params() * self.moe_layers
        mtp = m.mtp_modules * (self.attn_params() + (slots + shared) * self.expert_params())
        dense = m.dense_layers * self.dense_mlp_params()
        head = 2 * self.head_params() * self.k["overheads"]["lm_head_bytes_per_param"]
        return (self.attn_params() * m.layers + experts + mtp + dense) * wb + head

    def kv_capacity_bytes_per_die(self, pool: str = "decode") -> float:
        """HBM minus weights minus communication buffers minus runtime reserve."""
        o = self.k["overheads"]
        free = (self.chip.hbm_gb - o["moe_buffer_gb"] - o["decode_runtime_reserve_gb"]) * 1e9
        return free - self.weight_bytes_per_die(pool)

    def max_batch_per_die(self, kv_len: float) -> int:
        """Largest decode batch per die whose KV cache fits."""
        return max(0, int(self.kv_capacity_bytes_per_die() // (kv_len * self.kv_bytes_per_token())))

    def _bytes_per_param(self, precision: str | None = None) -> float:
        return {"int8": 1.0, "fp8": 1.0, "bf16": 2.0}[precision or self.dep.precision]

    # ---- primitive costs ------------------------------------------------------------------
    def _gemm(self, flops: float, weight_bytes: float, cube_fraction: float, precision: str) -> float:
        c = self.chip
        peak = c.peak_tflops(precision) * 1e12 * c.gemm_eff * cube_fraction
        return max(flops / peak, weight_bytes / (c.hbm_gbps * 1e9 * c.mem_eff))

    def _attention(self, flops: float, kv_bytes: float, cube_fraction: float) -> float:
        c = self.chip
        peak = c.bf16_tflops * 1e12 * c.mla_compute_eff * cube_fraction
        return max(flops / peak, kv_bytes / (c.hbm_gbps * 1e9 * c.mem_eff))

    def _vector_scale(self) -> float:
        """Vector work calibrated on a 910C die runs faster on a chip with more BF16 throughput."""
        return self.chip.bf16_tflops / self.k["overheads"]["vector_reference_tflops"]

    def _hbm(self, nbytes: float) -> float:
        return nbytes / (self.chip.hbm_gbps * 1e9 * self.chip.mem_eff)

    def a2a_seconds(self, ep: int, tokens_per_rank: float, bytes_per_token: float,
                    rank_dies: int = 1, pull: bool = False) -> float:
        """One MoE all-to-all (dispatch or combine) as seen by one rank of `rank_dies` dies.

        A token goes once to each distinct remote rank among its top-k experts (expected
        (ep-1)(1-(1-1/ep)^k) ranks), so traffic grows with EP until every expert is remote."""
        if self.net.partitioned:
            return math.inf
        kc = self.k["comm"]
        m, s = self.model, self.system
        ranks = (ep - 1) * (1 - (1 - 1 / ep) ** m.top_k) if ep > 1 else 0.0
        total = tokens_per_rank * ranks * bytes_per_token
        fixed = (kc["alpha_us"] + kc["beta_us"] * math.log2(max(ep, 1))
                 + kc["per_token_us"] * tokens_per_rank / rank_dies / self._vector_scale()) * US
        if s.kind == "supernode":
            per_die = s.ub_measured_read_gbps if pull else s.ub_measured_write_gbps
            bw = per_die * rank_dies * 1e9 * self.net.ub
            hops_us = 3 * s.switch_latency_us + 4 * s.link_latency_us
            return fixed + total / bw + (hops_us + self.net.extra_latency_us) * US
        # conventional cluster: peers in the same node over NVLink, the rest over RDMA
        local = min(s.npus_per_node - 1, ep - 1) / max(ep - 1, 1)
        eff = kc["link_efficiency"]
        t_nv = total * local / (s.nvlink_gbps * 1e9 * eff)
        t_rdma = total * (1 - local) / (s.rdma_nic_gbps / 8 * 1e9 * eff * max(self.net.rdma, 1e-9))
        lat = (s.rdma_latency_us if ep > s.npus_per_node else s.nvlink_latency_us)
        return fixed + max(t_nv, t_rdma) + (lat + self.net.extra_latency_us) * US

    def dispatch_us(self, ep: int, tokens_per_npu: float = 128) -> float:
        """Dispatch latency with EP ranks of one NPU each (the setting of ref 4's table)."""
        return self.a2a_seconds(ep, tokens_per_npu, self.model.dispatch_bytes_per_token,
                                self.dies_per_npu) / US

    def combine_us(self, ep: int, tokens_per_npu: float = 128) -> float:
        return self.a2a_seconds(ep, tokens_per_npu, self.model.combine_bytes_per_token,
                                self.dies_per_npu, pull=True) / US

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
    def _moe_stream(self, pool: str, q: float, frac: float, precision: str,
                    balance: str) -> _Layer:
        m, p = self.model, getattr(self.dep, pool)
        lay = _Layer()
        wb = self._bytes_per_param(precision)
        lay.add("gating", self._gemm(2 * q * m.hidden * m.routed_experts,
                                     m.hidden * m.routed_experts * 2, frac, "bf16"))
        lay.add("dispatch", self.a2a_seconds(p.ep, q, m.dispatch_bytes_per_token))
        ep = p.ep
        routed_dies = ep - p.shared_expert_dies
        slots_per_die = (m.routed_experts + p.redundant_experts) / routed_dies
        pairs = q * m.top_k * ep / routed_dies * self.imbalance(pool, balance)
        ep_flops = 2 * self.expert_params()
        routed = self._gemm(pairs * ep_flops, slots_per_die * self.expert_params() * wb,
                            frac, precision)
        if m.shared_experts and p.shared_expert_dies:
            shared_tokens = q * ep / p.shared_expert_dies
            shared = self._gemm(shared_tokens * ep_flops * m.shared_experts,
                                self.expert_params() * m.shared_experts * wb, frac, precision)
            lay.add("experts", max(routed, shared))   # separate dies run in parallel
        else:
            lay.add("experts", routed)
            if m.shared_experts:
                lay.add("shared_expert", self._gemm(q * ep_flops * m.shared_experts,
                                                    self.expert_params() * m.shared_experts * wb,
                                                    frac, precision))
        lay.add("combine", self.a2a_seconds(p.ep, q, m.combine_bytes_per_token, pull=True))
        return lay

    def _attention_stream(self, q_tokens: float, seqs: float, ctx: float, frac: float,
                          precision: str, decode: bool) -> _Layer:
        m = self.model
        lay = _Layer()
        wb = self._bytes_per_param(precision)
        lay.add("mla_proj" if m.attention == "mla" else "qkv_o_proj",
                self._gemm(2 * q_tokens * self.attn_params(), self.attn_params() * wb,
                           frac, precision))
        if m.attention == "mla" and decode:   # absorbed form: attend over the 576-dim latent
            per = m.heads * (2 * m.kv_lora_rank + m.rope_dim) * 2
        elif m.attention == "mla":
            per = m.heads * (m.qk_nope_dim + m.rope_dim + m.v_head_dim) * 2
        else:
            per = m.heads * m.head_dim * 2 * 2
        kv_bytes = seqs * ctx * self.kv_bytes_per_token_layer() if decode else 0.0
        lay.add("attention", self._attention(q_tokens * ctx * per, kv_bytes, frac))
        rate = self.k["overheads"]["softmax_gelems_per_s"] * 1e9 * frac * self._vector_scale()
        lay.add("softmax", q_tokens * ctx * m.heads / rate)
        return lay

    # ---- decode ---------------------------------------------------------------------------
    def decode_step(self, batch_per_npu: float | None = None, kv_len: float = 4096,
                    mtp: bool | None = None, microbatch: bool | None = None,
                    precision: str | None = None, balance: str = "default") -> StepResult:
        """One decode step of every sequence in the batch (with MTP: 1 + accepted tokens)."""
        dep, m = self.dep, self.model
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
        tok_per_seq = 2 if mtp else 1
        st = self.k["streams"]
        use_mb = dep.decode.microbatch if microbatch is None else microbatch
        candidates = [self._decode_layers(b, kv_len, tok_per_seq, precision, balance, 1)]
        if use_mb:
            candidates.append(self._decode_layers(b, kv_len, tok_per_seq, precision, balance,
                                                  st["microbatches"]))
        step_s, ops, streams = min(candidates, key=lambda c: c[0])
        # LM head (main tokens + MTP draft) and sampling, whole batch, all cores
        head_tokens = b * (tok_per_seq + (1 if mtp else 0))
        hb = self.k["overheads"]["lm_head_bytes_per_param"]
        head = (self._gemm(2 * head_tokens * self.head_params(), self.head_params() * hb, 1.0, "bf16")
                * (2 if mtp else 1) if b else 0.0)
        ops["lm_head"] = head
        ops["sampling"] = self._hbm(head_tokens * m.vocab * 4)
        ops["graph_launch"] = self.k["overheads"]["graph_launch_ms"] * 1e-3
        step_s += head + ops["sampling"] + ops["graph_launch"]
        tokens_per_seq = 1 + (dep.mtp_acceptance if mtp else 0.0)
        tpot = step_s / tokens_per_seq
        return StepResult("decode", step_s * 1e3, b * tokens_per_seq,
                          b * self.dies_per_npu / tpot,
                          {k: v * 1e3 for k, v in ops.items()}, tpot_ms=tpot * 1e3,
                          streams_ms={k: v * 1e3 for k, v in streams.items()})

    def _decode_layers(self, b: float, kv_len: float, tok_per_seq: int, precision: str,
                       balance: str, n_mb: int) -> tuple[float, dict, dict]:
        """Whole-model time of the transformer layers (and MTP module) for one step."""
        m, st = self.model, self.k["streams"]
        fa, fm = (st["attention_cube_fraction"], st["moe_cube_fraction"]) if n_mb > 1 else (1.0, 1.0)
        seqs = b / n_mb
        q = seqs * tok_per_seq
        attn = self._attention_stream(q, seqs, kv_len, fa, precision, decode=True)
        moe = self._moe_stream("decode", q, fm, precision, balance)
        dense_attn = self._attention_stream(b * tok_per_seq, b, kv_len, 1.0, precision, True)
        wb = self._bytes_per_param(precision)
        dense_mlp = self._gemm(2 * b * tok_per_seq * self.dense_mlp_params(),
                               self.dense_mlp_params() * wb, 1.0, precision)
        ops: dict[str, float] = {}
        for name, t in dense_attn.ops.items():
            ops[name] = ops.get(name, 0.0) + t * m.dense_layers
        ops["dense_mlp"] = dense_mlp * m.dense_layers
        dense_s = (dense_attn.total + dense_mlp) * m.dense_layers
        if n_mb > 1:
            per_layer = n_mb * (max(attn.total, moe.total) + self.k["streams"]["sync_us"] * US)
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
        if tok_per_seq > 1:   # MTP draft: one MoE-layer block for one token per sequence
            d_attn = self._attention_stream(b, b, kv_len, 1.0, precision, decode=True)
            d_moe = self._moe_stream("decode", b, 1.0, precision, balance)
            mtp_s = d_attn.total + d_moe.total
            ops["mtp_module"] = mtp_s
        streams = {"attention_per_microbatch": attn.total, "moe_per_microbatch": moe.total,
                   "per_layer": per_layer}
        return dense_s + moe_s + mtp_s, ops, streams

    # ---- prefill --------------------------------------------------------------------------
    def prefill_batch(self, prompt_len: float = 4096, tokens_per_npu: float | None = None,
                      reuse: float = 0.0, balance: str = "default",
                      precision: str | None = None, microbatch: bool | None = None,
                      cache_plane: str | None = None) -> StepResult:
        """One prefill batch on one instance: `tokens_per_npu` prompt tokens per NPU, a fraction
        `reuse` of them found in EMS (loaded over UB or VPC instead of computed)."""
        dep, m = self.dep, self.model
        precision = self._check_precision(precision)
        if not 0 <= reuse < 1:
            raise ValueError(f"reuse = {reuse}: allowed 0 <= reuse < 1")
        if prompt_len <= 0:
            raise ValueError(f"prompt = {prompt_len}: must be > 0")
        t_die = (dep.prefill.tokens_per_die if tokens_per_npu is None
                 else tokens_per_npu / self.dies_per_npu)
        if not t_die > 0:
            raise ValueError(f"tokens per NPU = {tokens_per_npu}: must be > 0")
        seqs = t_die / prompt_len
        new = t_die * (1 - reuse)
        ctx = prompt_len * (1 + reuse) / 2           # mean causal context of the new tokens
        use_mb = dep.prefill.microbatch if microbatch is None else microbatch
        attn = self._attention_stream(new, seqs, ctx, 1.0, precision, decode=False)
        moe = self._moe_stream("prefill", new, 1.0, precision, balance)
        comm = moe.ops["dispatch"] + moe.ops["combine"]
        if math.isinf(comm):      # partitioned plane: the batch never finishes
            return StepResult("prefill", math.inf, t_die * self.dies_per_npu, 0.0,
                              {"dispatch": math.inf, "combine": math.inf}, ttft_ms=math.inf)
        compute = attn.total + moe.total - comm
        layer = max(compute, comm) + min(compute, comm) / 2 if use_mb else compute + comm
        wb = self._bytes_per_param(precision)
        dense_mlp = self._gemm(2 * new * self.dense_mlp_params(), self.dense_mlp_params() * wb,
                               1.0, precision)
        ops: dict[str, float] = {}
        for lay, n in ((attn, m.layers), (moe, self.moe_layers)):
            for name, t in lay.ops.items():
                ops[name] = ops.get(name, 0.0) + t * n
        ops["dense_mlp"] = dense_mlp * m.dense_layers
        if use_mb:
            ops["pipeline_overlap"] = (layer - compute - comm) * self.moe_layers
        step = (attn.total + dense_mlp) * m.dense_layers + layer * self.moe_layers
        ops["lm_head"] = self._gemm(2 * seqs * self.head_params(), self.head_params() * 2, 1.0, "bf16")
        step += ops["lm_head"]
        if reuse > 0:
            ops["ems_load"] = self.ems_load_seconds(t_die * reuse, cache_plane)
            step += ops["ems_load"]
        tput = t_die * self.dies_per_npu / step
        return StepResult("prefill", step * 1e3, t_die * self.dies_per_npu, tput,
                          {k_: v * 1e3 for k_, v in ops.items()}, ttft_ms=step * 1e3)

    def ems_load_seconds(self, tokens_per_die: float, plane: str | None = None,
                         block_tokens: int = 512) -> float:
        """Load cached KV of `tokens_per_die` tokens from EMS into one die's HBM."""
        plane = plane or self.dep.cache_plane
        s = self.system
        nbytes = tokens_per_die * self.kv_bytes_per_token()
        if plane == "ub" and s.kind == "supernode":
            bw = s.ub_cpu_read_gbps * 1e9 * self.net.ub
        else:   # VPC: the node's card is shared by its NPUs' dies
            per_die = s.vpc_gbps / 8 / (s.npus_per_node * self.dies_per_npu)
            bw = per_die * 1e9 * self.net.vpc
        if bw <= 0:
            return math.inf
        blocks = tokens_per_die / block_tokens * self.model.layers
        return nbytes / bw + blocks * self.k["overheads"]["ems_block_overhead_us"] * US / \
            self.k["streams"]["microbatches"]

    def kv_transfer_seconds(self, tokens: float, plane: str | None = None) -> float:
        """Send one request's KV from a prefill die to a decode die (whole-link rate)."""
        s = self.system
        plane = plane or self.dep.kv_transfer_plane
        if plane == "ub" and s.kind == "supernode":
            bw, lat = s.ub_measured_write_gbps * self.net.ub, s.ub_latency_us
        else:
            bw, lat = s.rdma_nic_gbps / 8 / self.dies_per_npu * self.net.rdma, s.rdma_latency_us
        if bw <= 0:
            return math.inf
        return tokens * self.kv_bytes_per_token() / (bw * 1e9) + lat * US

    # ---- curves ---------------------------------------------------------------------------
    def decode_curve(self, kv_len: float = 4096, batches=None, **kw) -> list[dict]:
        batches = batches or [1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 160, 192, 256]
        cap = self.max_batch_per_die(kv_len) * self.dies_per_npu
        out = []
        for b in batches:
            r = self.decode_step(b, kv_len, **kw)
            out.append({"batch_per_npu": b, "tpot_ms": r.tpot_ms,
                        "tokens_per_s_per_npu": r.tokens_per_s_per_npu, "fits_kv": b <= cap})
        return out

    def max_batch_for_slo(self, slo_ms: float | None = None, kv_len: float = 4096, **kw) -> dict:
        """Largest batch per NPU meeting the TPOT SLO and fitting the KV cache (bisection)."""
        slo = self.dep.tpot_slo_ms if slo_ms is None else slo_ms
        if not slo > 0:
            raise ValueError(f"TPOT SLO = {slo} ms: must be > 0")
        cap = self.max_batch_per_die(kv_len) * self.dies_per_npu
        lo, hi = 0, max(cap, 0)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.decode_step(mid, kv_len, **kw).tpot_ms <= slo:
                lo = mid
            else:
                hi = mid - 1
        best = self.decode_step(lo, kv_len, **kw) if lo else None
        return {"slo_ms": slo, "batch_per_npu": lo, "kv_limit_batch_per_npu": cap,
                "tpot_ms": best.tpot_ms if best else None,
                "tokens_per_s_per_npu": best.tokens_per_s_per_npu if best else 0.0}

    def _check_precision(self, precision: str | None) -> str:
        p = precision or self.dep.precision
        if p not in ("int8", "bf16", "fp8"):
            raise ValueError(f"precision = {p!r}: allowed int8, bf16, fp8")
        if self.chip.peak_tflops(p) <= 0:
            ok = [x for x in ("int8", "bf16", "fp8") if self.chip.peak_tflops(x) > 0]
            raise ValueError(f"precision = {p!r}: {self.system.accelerator} has no {p} "
                             f"(allowed: {', '.join(ok)})")
        return p


def with_net(pm: PerfModel, **fractions) -> PerfModel:
    return pm.with_net(replace(pm.net, **fractions))
