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
Constants: twin/catalog/perf.toml (each sourced or labelled there). The operator costs a step puts
together (GEMMs, attention, all-to-all, one layer's streams) are in operators.py.
"""
from __future__ import annotations

import copy
import math

from twin.model import rules
from twin.model.config import PRECISIONS
from twin.predict import execution
from twin.predict.operators import US, OperatorCosts, _each_slower, _Layer, _slower, _sources
from twin.predict.base import Health, StepResult, TimePredictor, register
from twin.predict.ems import EmsPath, load_seconds, whole_block_reuse

LOGIT_BYTES = 4          # FP32 logits read by sampling (assumption)


@register("roofline")
class PerfModel(OperatorCosts, TimePredictor):
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
        fixed = self._step_fixed(b, kv_len, tok_per_seq, (precision, moe_p), balance, group)
        candidates = [self._decode_layers(b, kv_len, tok_per_seq, (precision, moe_p), balance, 1, None, group,
                                          fixed)]
        if use_mb:
            candidates += [self._decode_layers(b, kv_len, tok_per_seq, (precision, moe_p), balance,
                                               st["microbatches"], split, group, fixed) for split in self._splits()]
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
                       fm: float) -> tuple[_Layer, _Layer]:
        """One die's (attention side, MoE stream) of a MoE layer for its batch `b` per die, with
        `q_in` tokens per microbatch routed to its experts (default its own)."""
        precision, moe_p = precisions
        seqs = b / n_mb
        q = seqs * tok_per_seq
        return (self.attention_stream(q, seqs, kv_len, fa, precision, decode=True),
                self.moe_stream("decode", q, fm, moe_p, balance, q_in))

    def _member_dense(self, b: float, kv_len: float, tok_per_seq: int, precision: str) -> tuple[_Layer, float]:
        """One die's (dense layer's attention, dense MLP) for its batch `b` per die."""
        dense_attn = self.attention_stream(b * tok_per_seq, b, kv_len, 1.0, precision, True)
        wb = self._bytes_per_param(precision)
        return dense_attn, self.gemm_seconds(2 * b * tok_per_seq * self.dense_mlp_params(),
                                             self.dense_mlp_params() * wb, 1.0, precision)

    def _step_fixed(self, b: float, kv_len: float, tok_per_seq: int, precisions: tuple[str, str],
                    balance: str, group: tuple | None) -> tuple:
        """What no stream split nor microbatching changes in a decode step, computed once for every
        candidate: (dense layer's attention, dense MLP, MTP module's attention and MoE or None)."""
        precision, moe_p = precisions
        if group is None:
            dense_attn, dense_mlp = self._member_dense(b, kv_len, tok_per_seq, precision)
        else:
            sp, bs, bh = group
            da1, dm1 = self._member_dense(bh, kv_len, tok_per_seq, precision)
            da2, dm2 = sp._member_dense(bs, kv_len, tok_per_seq, precision)
            dense_attn, dense_mlp = (da2, dm2) if da2.total + dm2 > da1.total + dm1 else (da1, dm1)
        if tok_per_seq == 1:
            return dense_attn, dense_mlp, None, None
        if group is None:   # MTP drafts: one MoE-layer block per module, one token per sequence
            return (dense_attn, dense_mlp, self.attention_stream(b, b, kv_len, 1.0, precision, decode=True),
                    self.moe_stream("decode", b, 1.0, moe_p, balance))
        return (dense_attn, dense_mlp,
                _slower(self.attention_stream(bh, bh, kv_len, 1.0, precision, decode=True),
                        sp.attention_stream(bs, bs, kv_len, 1.0, precision, decode=True)),
                _each_slower(self.moe_stream("decode", bh, 1.0, moe_p, balance, b),
                             sp.moe_stream("decode", bs, 1.0, moe_p, balance, b)))

    def _decode_layers(self, b: float, kv_len: float, tok_per_seq: int, precisions: tuple[str, str],
                       balance: str, n_mb: int, split: float | None, group: tuple | None,
                       fixed: tuple) -> tuple[float, dict, dict]:
        """Whole-model time of the transformer layers (and MTP module) for one step; `precisions`:
        (attention and dense, experts); `group` (`_group`): a slow die the synchronous phases wait for;
        `fixed`: `_step_fixed`'s parts."""
        m, st = self.model, self.k["streams"]
        gpu = self.chip.execution == "sm-overlap"
        if n_mb > 1 and not gpu:       # ascend-two-stream: cube cores split between the streams
            fa, fm = split, 1 - split
        else:                          # sm-overlap: pieces alone on the whole GPU (execution.py shares it)
            fa = fm = 1.0
        q = b / n_mb * tok_per_seq
        if group is None:
            attn, moe = self._member_layers(b, None, kv_len, tok_per_seq, precisions, balance, n_mb, fa, fm)
        else:
            sp, bs, bh = group
            member = (kv_len, tok_per_seq, precisions, balance, n_mb, fa, fm)
            a1, m1 = self._member_layers(bh, q, *member)
            a2, m2 = sp._member_layers(bs, q, *member)
            attn, moe = _slower(a1, a2), _each_slower(m1, m2)
        dense_attn, dense_mlp, d_attn, d_moe = fixed
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
        if d_attn is not None:
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
