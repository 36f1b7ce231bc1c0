"""Where a die's HBM goes: weights by part, communication buffers, runtime reserve and the KV cache
left over; KV bytes per token. Pure geometry of a deployment (model, chip, parallelism): the
catalog check (config.check_deployment), every time predictor and the engine use this one copy.
"""
from __future__ import annotations

# storage per weight: NVFP4 is 4 bits plus one FP8 scale per 16 values, MXFP4 one E8M0 scale per 32
# (NVIDIA Blackwell and OCP microscaling formats)
BYTES_PER_PARAM = {"int8": 1.0, "fp8": 1.0, "bf16": 2.0, "nvfp4": 0.5 + 1 / 16, "mxfp4": 0.5 + 1 / 32}


class Geometry:
    """Memory geometry of one deployment: `dep`, `model`, `chip` from the catalog, `k` the
    predictor constants (twin/catalog/perf.toml, section overheads)."""

    def __init__(self, dep, model, chip, k: dict):
        self.dep, self.model, self.chip, self.k = dep, model, chip, k

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

    def weight_parts_per_die(self, pool: str) -> dict[str, float]:
        """Weight bytes resident on one die, by part: attention replicated (DP), experts sharded by
        EP (a shared-expert die holds the shared expert instead), MTP module, dense MLPs, and the
        embedding and LM head."""
        m, p = self.model, getattr(self.dep, pool)
        wb, we = self._bytes_per_param(), self._bytes_per_param(self.moe_precision())
        slots = (m.routed_experts + p.redundant_experts) / max(1, p.ep - p.shared_expert_dies)
        shared = m.shared_experts if p.shared_expert_dies == 0 else 0
        return {
            "attention": self.attn_params() * m.layers * wb,
            "experts": (slots + shared) * self.expert_params() * self.moe_layers * we,
            "mtp_module": m.mtp_modules * (self.attn_params() * wb + (slots + shared) * self.expert_params() * we),
            "dense_mlp": m.dense_layers * self.dense_mlp_params() * wb,
            "embedding_and_head": 2 * self.head_params() * self.k["overheads"]["lm_head_bytes_per_param"],
        }

    def weight_bytes_per_die(self, pool: str) -> float:
        return sum(self.weight_parts_per_die(pool).values())

    def kv_capacity_bytes_per_die(self, pool: str = "decode") -> float:
        """HBM minus weights minus communication buffers minus runtime reserve."""
        o = self.k["overheads"]
        free = (self.chip.hbm_gb - o["moe_buffer_gb"] - o["decode_runtime_reserve_gb"]) * 1e9
        return free - self.weight_bytes_per_die(pool)

    def hbm_budget(self, kv_len: float, batch_per_npu: float | None = None) -> dict:
        """Where one decode die's HBM goes (GB), and the KV length per sequence at which the
        deployed batch would exhaust it: the test of "the batch limit comes from KV capacity"."""
        o = self.k["overheads"]
        b = (self.dep.decode.batch_per_die if batch_per_npu is None
             else batch_per_npu / self.dies_per_npu)
        parts = {f"weights_{k}": v / 1e9 for k, v in self.weight_parts_per_die("decode").items()}
        parts["moe_buffers"] = o["moe_buffer_gb"]
        parts["runtime_reserve"] = o["decode_runtime_reserve_gb"]
        kv_free = self.kv_capacity_bytes_per_die()
        per_seq = kv_len * self.kv_bytes_per_token()
        return {"hbm_gb_per_die": self.chip.hbm_gb, "parts_gb": {k: round(v, 3) for k, v in parts.items()},
                "kv_free_gb": round(kv_free / 1e9, 3), "kv_gb_per_sequence": round(per_seq / 1e9, 4),
                "sequences_that_fit_per_die": int(kv_free // per_seq), "batch_per_die": b,
                "kv_tokens_per_sequence_to_fill_at_batch": int(kv_free / (b * self.kv_bytes_per_token()))}

    def max_batch_per_die(self, kv_len: float) -> int:
        """Largest decode batch per die whose KV cache fits."""
        return max(0, int(self.kv_capacity_bytes_per_die() // (kv_len * self.kv_bytes_per_token())))

    def moe_precision(self, precision: str | None = None) -> str:
        """The experts' GEMM type: `precision` when given (it overrides the whole model), else the
        deployment's moe_precision, else its precision."""
        return precision or self.dep.moe_precision or self.dep.precision

    def _bytes_per_param(self, precision: str | None = None) -> float:
        return BYTES_PER_PARAM[precision or self.dep.precision]
