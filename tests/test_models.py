"""The catalog's models: each published config, read through the one geometry every predictor uses."""
import pytest

from twin.model.config import catalog, constants
from twin.model.memory import Geometry
from twin.predict.perf import PerfModel


def _geometry(model: str) -> Geometry:
    cat = catalog()
    dep = cat.deployment("cloudmatrix-infer-paper")
    return Geometry(dep, cat.model(model), cat.chip("ascend-910c-die"), constants())


@pytest.mark.parametrize("model", ["deepseek-r1", "qwen3-235b-a22b", "kimi-k2", "glm-4.5"])
def test_published_parameter_count_follows_from_the_config(model):
    # attention, experts (routed + shared) of the MoE layers, dense MLPs, embedding and head: the
    # model card's total within 5% (MTP layers and norms are left out of the sum)
    g, m = _geometry(model), catalog().model(model)
    total = (g.attn_params() * m.layers + g.expert_params() * (m.routed_experts + m.shared_experts) * g.moe_layers
             + g.dense_mlp_params() * m.dense_layers + 2 * g.head_params())
    assert total / 1e9 == pytest.approx(m.params_b, rel=0.05)


def test_kv_bytes_per_token_by_attention_kind():
    # Kimi K2 keeps DeepSeek-V3's MLA latent (512 + 64) over 61 layers; GLM-4.5 caches K and V of
    # 8 GQA heads x 128 over 92 layers; both in BF16
    assert _geometry("kimi-k2").kv_bytes_per_token() == (512 + 64) * 61 * 2
    assert _geometry("glm-4.5").kv_bytes_per_token() == 2 * 8 * 128 * 92 * 2


@pytest.mark.parametrize("dep,mtp", [("kimi-k2-cloudmatrix", False), ("glm-4.5-cloudmatrix", True)])
def test_new_models_predict_without_model_specific_code(dep, mtp):
    pm = PerfModel(catalog().deployment(dep))
    r = pm.decode_step(48, 4096)
    assert r.tokens_per_s_per_npu == pytest.approx(48 / (r.tpot_ms / 1e3), rel=1e-12)
    assert ("mtp_module" in r.breakdown) is mtp
    assert pm.kv_bytes_per_token() == _geometry(catalog().deployment(dep).model).kv_bytes_per_token()
