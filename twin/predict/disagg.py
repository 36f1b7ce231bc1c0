"""MoE-attention disaggregation: a decode step when attention and experts run on separate NPUs.

xDeepServe (arXiv 2508.02520) splits a MoE model's decode into attention instances (MLA, the dense
layers, the shared expert, the LM head; data-parallel over sequences) and expert instances (the
routed experts, EP), each scaled on its own, and hands tokens between them over the UB fabric with
a memory-semantic all-to-all every MoE layer. Here each side's operators come from the roofline
PerfModel of a base deployment (same model, precision, MTP, UB kernel); the hand-off is the catalog's
all-to-all (PerfModel.a2a with the base's kernel) at the busier side's tokens per rank. With `n`
microbatches in flight (ping-pong, as MegaScale-Infer), one MoE layer takes the longest of: n
microbatches of attention, n of experts, n of the busier hand-off direction (dispatch and combine run
opposite ways over full-duplex UB links), or one microbatch's whole round trip.

Forms live in twin/catalog/disagg.toml; each has a calibration point (the production system's
published peak decode) and the figure is labelled calibration with that band.
"""
from __future__ import annotations

import math
import tomllib
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from twin.model import rules
from twin.model.config import CATALOG_DIR, CatalogError, _validate, catalog
from twin.predict.roofline import PerfModel


class Calibration(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tokens_per_s_per_chip: float = Field(gt=0)
    tpot_ms: float = Field(gt=0)
    band_pct: float = Field(gt=0, le=100)
    source: str


class Form(BaseModel):
    """One disaggregated deployment: the base it takes the model from and the two sides' sizes."""
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    description: str
    deployment: str
    attention_npus: int = Field(ge=1, le=8192)
    expert_npus: int = Field(ge=1, le=8192)
    redundant_experts: int = Field(0, ge=0)
    batch_per_attention_die: float = Field(gt=0, le=4096)
    microbatches: int = Field(2, ge=1, le=8)
    kv_len: float = Field(4096, gt=0, le=1 << 20)
    # the attention side's speed over the base's kernels: the form's one fitted constant (calibration)
    attention_speedup: float = Field(1.0, gt=0, le=4)
    calibration: Calibration


@lru_cache(maxsize=1)
def forms() -> dict[str, Form]:
    path = CATALOG_DIR / "disagg.toml"
    raw = tomllib.loads(path.read_text())
    out = {k: _validate(Form, v, f"{path.name} [{k}]") for k, v in raw.items()}
    for k, f in out.items():
        catalog().deployment(f.deployment)
    return out


class Disaggregated:
    """The decode step of a Form (`name` in disagg.toml)."""

    def __init__(self, name: str):
        if name not in forms():
            raise CatalogError(f"disaggregated deployment = {name!r}: unknown (allowed: {', '.join(forms())})")
        self.name, self.form = name, forms()[name]
        self.pm = PerfModel(catalog().deployment(self.form.deployment))
        f, pm, m = self.form, self.pm, self.pm.model
        self.attn_dies = f.attention_npus * pm.dies_per_npu
        self.expert_dies = f.expert_npus * pm.dies_per_npu
        slots = m.routed_experts + f.redundant_experts
        if slots % self.expert_dies:
            raise CatalogError(f"disagg.toml [{name}].expert_npus = {f.expert_npus}: {slots} expert slots cannot be "
                               f"spread evenly over {self.expert_dies} dies (allowed: dies dividing {slots})")
        sysm = catalog().system(pm.dep.system)
        if f.attention_npus + f.expert_npus > sysm.nodes * sysm.npus_per_node:
            raise CatalogError(f"disagg.toml [{name}]: {f.attention_npus + f.expert_npus} NPUs but {pm.dep.system} "
                               f"has {sysm.nodes * sysm.npus_per_node}")

    def decode_step(self, batch_per_die: float | None = None) -> dict:
        f, pm, m = self.form, self.pm, self.pm.model
        b = f.batch_per_attention_die if batch_per_die is None else batch_per_die
        precision, moe_p = pm.dep.precision, pm.moe_precision()
        drafts = rules.draft_tokens(m.mtp_modules, pm.dep.mtp)
        tok = 1 + drafts
        n = f.microbatches
        q = b / n * tok                                   # tokens per attention die per microbatch
        attn = pm.attention_stream(q, b / n, f.kv_len, 1.0, precision, decode=True).total / f.attention_speedup
        attn += pm.gemm_seconds(2 * q * m.hidden * m.routed_experts, m.hidden * m.routed_experts * 2, 1.0, "bf16")
        if m.shared_experts:                              # the shared expert stays with attention
            attn += pm.expert_gemms("dense", m.shared_experts, q, moe_p, 1.0)[0]
        slots_per_die = (m.routed_experts + f.redundant_experts) / self.expert_dies
        skew = 1 + pm.k["balance"]["load_cv"] * math.sqrt(2 * math.log(max(2, self.expert_dies)))
        pairs = q * self.attn_dies * m.top_k / self.expert_dies * skew
        experts = pm.expert_gemms("masked", slots_per_die, pairs / slots_per_die, moe_p, 1.0)[0]
        # the hand-off: the busier side's tokens per rank through the base's all-to-all kernel
        per_rank = max(q, q * self.attn_dies / self.expert_dies)
        kernel = pm.pool_kernel("decode")
        ranks = self.attn_dies + self.expert_dies
        dispatch = pm.a2a(ranks, per_rank, m.dispatch_bytes_per_token, kernel=kernel)[0]
        combine = pm.a2a(ranks, per_rank, m.combine_bytes_per_token, pull=True, kernel=kernel)[0]
        layer = max(n * attn, n * experts, n * max(dispatch, combine), attn + dispatch + experts + combine)
        dense = (pm.attention_stream(b * tok, b, f.kv_len, 1.0, precision, True).total / f.attention_speedup
                 + pm.gemm_seconds(2 * b * tok * pm.dense_mlp_params(),
                                   pm.dense_mlp_params() * pm._bytes_per_param(precision), 1.0, precision))
        mtp = (layer / n) * drafts                       # a draft passes one MoE-layer block per module
        head, sampling = pm._head(b, tok, drafts)
        launch = pm.k["overheads"]["graph_launch_ms"] * 1e-3
        step = layer * pm.moe_layers + dense * m.dense_layers + mtp + head + sampling + launch
        tpot = step / rules.expected_tokens_per_step(drafts, pm.dep.mtp_acceptance)
        npus = f.attention_npus + f.expert_npus
        per_chip = self.attn_dies * b / tpot / npus
        ms = lambda s: round(s * 1e3, 4)
        return {"phase": "decode", "deployment": self.name, "form": "moe-attention-disaggregated",
                "base": f.deployment, "attention_npus": f.attention_npus, "expert_npus": f.expert_npus,
                "batch_per_attention_die": b, "microbatches": n, "kv_len": f.kv_len,
                "step_time_ms": ms(step), "tpot_ms": ms(tpot),
                "tokens_per_s_per_chip": round(per_chip, 1),
                "per_layer_ms": {"attention": ms(attn), "experts": ms(experts), "dispatch": ms(dispatch),
                                 "combine": ms(combine), "layer": ms(layer)},
                "handoff_kernel": kernel}

    def report(self) -> dict:
        """The step at the form's setting, its calibration point and error, and the base
        (CloudMatrix-Infer) deployment's throughput at the same TPOT."""
        out = self.decode_step()
        c = self.form.calibration
        err = 100 * (out["tokens_per_s_per_chip"] / c.tokens_per_s_per_chip - 1)
        same = self.pm.max_batch_for_slo(slo_ms=out["tpot_ms"], kv_len=self.form.kv_len)
        out.update(label="calibration", band_pct=c.band_pct,
                   calibration={"tokens_per_s_per_chip": c.tokens_per_s_per_chip, "tpot_ms": c.tpot_ms,
                                "source": c.source, "error_pct": round(err, 2),
                                "within_band": abs(err) <= c.band_pct and out["tpot_ms"] <= c.tpot_ms},
                   versus={"deployment": self.form.deployment, "tpot_ms": out["tpot_ms"],
                           "batch_per_npu": same.get("batch_per_npu"),
                           "tokens_per_s_per_chip": round(same.get("tokens_per_s_per_npu") or 0.0, 1)})
        return out
