"""Catalog: the packaged TOML files load, and every bad value is refused with a CatalogError that
names the file, the table, the field, the value and what is allowed."""
import re
import shutil
from pathlib import Path

import pytest

from twin.model.config import CATALOG_DIR, Catalog, CatalogError, catalog

DEPLOYMENTS = {"cloudmatrix-infer-paper", "cloudmatrix-infer-384", "deepseek-h800", "sglang-h100",
               "qwen3-235b-cloudmatrix", "cloudmatrix-infer-48", "deepseek-h800-profile", "gb200-nvl72-r1",
               "gb200-nvl72-r1-fp4",
               "hgx-b200-r1", "cloudmatrix-pooled", "atlas-950-infer", "cloudmatrix-unified",
               "cloudmatrix-cpu-pool", "sglang-h200-mtp-small", "hgx-b200-r1-fp4", "h20-r1",
               "kimi-k2-cloudmatrix", "glm-4.5-cloudmatrix", "maas-deepseek-r1",
               "maas-kimi-k2", "maas-glm-4.5", "maas-qwen3-235b"}


# ---- the packaged catalog ---------------------------------------------------------------------
def test_packaged_catalog_has_the_deployments():
    cat = catalog()
    assert set(cat.deployments) == DEPLOYMENTS


def test_packaged_catalog_tables():
    cat = Catalog()
    assert {"ascend-910c-die", "kunpeng-920", "h800", "h100"} <= set(cat.chips)
    assert {"cloudmatrix384", "gpu-cluster-h800", "gpu-cluster-h100"} <= set(cat.systems)
    assert {"deepseek-r1", "qwen3-235b-a22b"} <= set(cat.models)


def test_packaged_values_are_the_reference_facts():
    cat = catalog()
    die = cat.chip("ascend-910c-die")
    assert (die.kind, die.hbm_gb, die.hbm_gbps, die.dies_per_package) == ("npu", 64, 1600, 2)
    assert die.fp8_tflops == 0 and die.peak_tflops("fp8") == 0          # ref 1: no FP8 on Ascend
    assert die.peak_tflops("int8") == 752 and die.peak_tflops("bf16") == 376
    cm = cat.system("cloudmatrix384")
    assert (cm.kind, cm.nodes, cm.npus_per_node, cm.cpus_per_node) == ("supernode", 48, 8, 4)
    assert cm.nodes * cm.npus_per_node * die.dies_per_package == 768
    r1 = cat.model("deepseek-r1")
    assert (r1.layers, r1.dense_layers, r1.routed_experts, r1.top_k) == (61, 3, 256, 8)
    assert (r1.kv_lora_rank, r1.rope_dim, r1.attention) == (512, 64, "mla")
    q = cat.model("qwen3-235b-a22b")
    assert (q.attention, q.layers, q.routed_experts, q.shared_experts, q.kv_heads) == ("gqa", 94, 128, 0, 4)
    paper = cat.deployment("cloudmatrix-infer-paper")
    assert (paper.system, paper.model, paper.precision) == ("cloudmatrix384", "deepseek-r1", "int8")
    assert (paper.prefill.instances, paper.prefill.dies_per_instance, paper.prefill.ep) == (6, 32, 32)
    assert (paper.decode.instances, paper.decode.dies_per_instance, paper.decode.ep) == (1, 320, 320)
    for name in ("deepseek-h800", "sglang-h100"):
        assert cat.deployment(name).precision == "fp8"


def test_catalog_is_cached_once_per_process():
    assert catalog() is catalog()


@pytest.mark.parametrize("table,name", [("deployment", "nope"), ("system", "tpu-pod"),
                                        ("model", "gpt-5"), ("chip", "b200x")])
def test_unknown_lookup_names_the_choices(table, name):
    cat = catalog()
    with pytest.raises(CatalogError) as exc:
        getattr(cat, table)(name)
    msg = str(exc.value)
    assert f"{table} = {name!r}: unknown" in msg
    assert "allowed:" in msg


# ---- temporary catalogs with one value edited ---------------------------------------------------
@pytest.fixture
def tmp_catalog(tmp_path: Path) -> Path:
    for f in CATALOG_DIR.glob("*.toml"):
        shutil.copy(f, tmp_path / f.name)
    return tmp_path


def edit(directory: Path, filename: str, table: str, field: str, value: str) -> None:
    """Set `field = value` (TOML text) in `[table]` of `filename`, adding the field if absent."""
    path = directory / filename
    lines = path.read_text().splitlines()
    start = lines.index(f"[{table}]")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    pat = re.compile(rf"^{re.escape(field)}\s*=")
    hits = [i for i in range(start + 1, end) if pat.match(lines[i])]
    assert len(hits) <= 1
    if hits:
        lines[hits[0]] = f"{field} = {value}"
    else:
        lines.insert(start + 1, f"{field} = {value}")
    path.write_text("\n".join(lines) + "\n")


def catalog_error(directory: Path) -> str:
    with pytest.raises(CatalogError) as exc:
        Catalog(directory)
    return str(exc.value)


def test_unedited_copy_loads(tmp_catalog):
    cat = Catalog(tmp_catalog)
    assert set(cat.deployments) == DEPLOYMENTS
    assert cat.chip("ascend-910c-die") == catalog().chip("ascend-910c-die")


def test_edit_helper_changes_exactly_one_value(tmp_catalog):
    edit(tmp_catalog, "chips.toml", "ascend-910c-die", "hbm_gb", "96")
    cat = Catalog(tmp_catalog)
    assert cat.chip("ascend-910c-die").hbm_gb == 96
    assert cat.chip("h800").hbm_gb == 80


def test_negative_hbm(tmp_catalog):
    edit(tmp_catalog, "chips.toml", "ascend-910c-die", "hbm_gb", "-64")
    msg = catalog_error(tmp_catalog)
    assert msg.startswith("chips.toml [ascend-910c-die].hbm_gb = -64:")
    assert "allowed: >= 0 and <= 1024" in msg


def test_hbm_above_range(tmp_catalog):
    edit(tmp_catalog, "chips.toml", "h800", "hbm_gb", "4096")
    msg = catalog_error(tmp_catalog)
    assert msg.startswith("chips.toml [h800].hbm_gb = 4096:")
    assert "<= 1024" in msg


def test_unknown_accelerator(tmp_catalog):
    edit(tmp_catalog, "systems.toml", "cloudmatrix384", "accelerator", '"ascend-999"')
    msg = catalog_error(tmp_catalog)
    assert msg.startswith("systems.toml [cloudmatrix384].accelerator = 'ascend-999': unknown")
    assert "allowed:" in msg and "ascend-910c-die" in msg and "h800" in msg


def test_unknown_system_and_model_in_deployment(tmp_catalog):
    edit(tmp_catalog, "deployments.toml", "sglang-h100", "model", '"llama-9"')
    msg = catalog_error(tmp_catalog)
    assert msg.startswith("deployments.toml [sglang-h100].model = 'llama-9': unknown")
    assert "deepseek-r1" in msg and "qwen3-235b-a22b" in msg


def test_ep_that_does_not_divide_the_expert_slots(tmp_catalog):
    # 256 routed + 30 redundant + 0 shared-expert dies = 286 slots over EP32
    edit(tmp_catalog, "deployments.toml", "cloudmatrix-infer-paper.prefill", "redundant_experts", "30")
    msg = catalog_error(tmp_catalog)
    assert msg.startswith("deployments.toml [cloudmatrix-infer-paper].prefill.ep = 32:")
    assert "286 expert slots" in msg
    assert "allowed: a divisor of 286" in msg


def test_ep_that_does_not_divide_the_instance(tmp_catalog):
    edit(tmp_catalog, "deployments.toml", "cloudmatrix-infer-paper.decode", "ep", "96")
    msg = catalog_error(tmp_catalog)
    assert msg.startswith("deployments.toml [cloudmatrix-infer-paper].decode.ep = 96:")
    assert "must divide dies_per_instance = 320" in msg


def test_ep_below_range_in_a_pool(tmp_catalog):
    edit(tmp_catalog, "deployments.toml", "deepseek-h800.decode", "ep", "0")
    msg = catalog_error(tmp_catalog)
    assert msg.startswith("deployments.toml [deepseek-h800].decode.ep = 0:")
    assert "allowed: >= 1 and <= 4096" in msg


def test_more_dies_than_the_system_has(tmp_catalog):
    # 15 x 32 prefill + 320 decode = 800 dies > 48 x 8 x 2 = 768
    edit(tmp_catalog, "deployments.toml", "cloudmatrix-infer-384.prefill", "instances", "15")
    msg = catalog_error(tmp_catalog)
    assert msg.startswith("deployments.toml [cloudmatrix-infer-384]")
    assert "800 dies" in msg and "cloudmatrix384 has 768" in msg
    assert "at most 768" in msg


def test_all_dies_of_the_system_is_allowed(tmp_catalog):
    edit(tmp_catalog, "deployments.toml", "cloudmatrix-infer-384.prefill", "instances", "14")
    assert Catalog(tmp_catalog).deployment("cloudmatrix-infer-384").prefill.instances == 14


def test_fp8_on_ascend(tmp_catalog):
    edit(tmp_catalog, "deployments.toml", "cloudmatrix-infer-paper", "precision", '"fp8"')
    msg = catalog_error(tmp_catalog)
    assert msg.startswith("deployments.toml [cloudmatrix-infer-paper].precision = 'fp8':")
    assert "ascend-910c-die" in msg
    assert "allowed: int8, bf16" in msg


def test_precision_not_in_the_literal(tmp_catalog):
    edit(tmp_catalog, "deployments.toml", "deepseek-h800", "precision", '"fp4"')
    msg = catalog_error(tmp_catalog)
    assert msg.startswith("deployments.toml [deepseek-h800].precision = 'fp4':")
    assert "allowed: int8, bf16, fp8" in msg


def test_ems_nodes_beyond_the_system(tmp_catalog):
    edit(tmp_catalog, "deployments.toml", "cloudmatrix-infer-paper", "ems_nodes", "49")
    msg = catalog_error(tmp_catalog)
    assert msg.startswith("deployments.toml [cloudmatrix-infer-paper].ems_nodes = 49:")
    assert "allowed 0..48" in msg


def test_unknown_field(tmp_catalog):
    edit(tmp_catalog, "chips.toml", "ascend-910c-die", "hbm_tb", "0.064")
    msg = catalog_error(tmp_catalog)
    assert msg.startswith("chips.toml [ascend-910c-die].hbm_tb = 0.064:")
    assert "Extra inputs are not permitted" in msg
    assert "allowed fields:" in msg and "hbm_gb" in msg


def test_unknown_field_in_a_pool(tmp_catalog):
    edit(tmp_catalog, "deployments.toml", "cloudmatrix-infer-paper.decode", "batch_per_npu", "96")
    msg = catalog_error(tmp_catalog)
    assert msg.startswith("deployments.toml [cloudmatrix-infer-paper].decode.batch_per_npu = 96:")
    assert "allowed fields:" in msg and "batch_per_die" in msg


def test_wrong_kind_literal(tmp_catalog):
    edit(tmp_catalog, "systems.toml", "gpu-cluster-h100", "kind", '"torus"')
    msg = catalog_error(tmp_catalog)
    assert msg.startswith("systems.toml [gpu-cluster-h100].kind = 'torus':")
    assert "allowed: supernode, cluster" in msg


def test_missing_required_field(tmp_catalog):
    path = tmp_catalog / "models.toml"
    text = path.read_text()
    assert text.count("\ntop_k = 8") == 4
    path.write_text(text.replace("\ntop_k = 8", "\n# top_k removed", 1))
    msg = catalog_error(tmp_catalog)
    assert msg.startswith("models.toml [deepseek-r1].top_k = '<missing>':")
    assert "allowed: >= 1" in msg


def test_invalid_toml(tmp_catalog):
    path = tmp_catalog / "systems.toml"
    path.write_text(path.read_text() + "\n[broken\nnodes = = 3\n")
    msg = catalog_error(tmp_catalog)
    assert msg.startswith(str(path))
    assert "not valid TOML" in msg


def test_missing_file(tmp_catalog):
    (tmp_catalog / "models.toml").unlink()
    msg = catalog_error(tmp_catalog)
    assert msg == f"{tmp_catalog / 'models.toml'}: catalog file missing"


def test_catalog_error_is_a_value_error():
    assert issubclass(CatalogError, ValueError)


def test_decode_batch_beyond_kv_capacity(tmp_catalog):
    edit(tmp_catalog, "deployments.toml", "cloudmatrix-infer-paper.decode", "batch_per_die", "200")
    msg = catalog_error(tmp_catalog)
    assert msg.startswith("deployments.toml [cloudmatrix-infer-paper].decode.batch_per_die = 200:")
    assert "fits at most 146 per die" in msg


# ---- fabric, execution and economics fields -------------------------------------------------------
def test_new_systems_and_their_cited_facts():
    cat = catalog()
    nvl = cat.system("gb200-nvl72")
    assert (nvl.nodes * nvl.npus_per_node, nvl.nvlink_domain_gpus) == (72, 72)   # ref G 4
    assert cat.chip("gb200").hbm_gb == 186 and cat.chip("b200").nvlink_gbps == 900
    assert cat.chip("h800").execution == "sm-overlap" and cat.chip("h800").sms == 132
    assert cat.system("cloudmatrix384").chip_power_kw == pytest.approx(559 / 384, abs=1e-3)
    assert cat.system("gpu-cluster-h800").usd_per_chip_hour == 2.0              # ref G 2
    for name in ("gb200-nvl72-r1", "gb200-nvl72-r1-fp4", "hgx-b200-r1"):
        assert cat.deployment(name).prediction


@pytest.mark.parametrize("filename,table,field,value,expect", [
    ("deployments.toml", "deepseek-h800.decode", "a2a_kernel", '"fast"', "allowed: normal, low-latency"),
    ("chips.toml", "h800", "execution", '"magic"', "allowed: ascend-two-stream, sm-overlap"),
    ("systems.toml", "gb200-nvl72", "chip_power_kw", "-1", "> 0"),
    ("systems.toml", "hgx-b200", "usd_per_chip_hour", "0", "> 0"),
])
def test_bad_fabric_and_economics_fields(tmp_catalog, filename, table, field, value, expect):
    edit(tmp_catalog, filename, table, field, value)
    msg = catalog_error(tmp_catalog)
    assert msg.startswith(f"{filename} [{table.split('.')[0]}].") and field in msg and expect in msg


def test_comm_sms_must_leave_sms_to_compute(tmp_catalog):
    edit(tmp_catalog, "deployments.toml", "deepseek-h800.prefill", "comm_sms", "132")
    from twin.predict.perf import PerfModel
    with pytest.raises(ValueError, match="comm_sms = 132: must be below the chip's 132 SMs"):
        PerfModel("deepseek-h800", Catalog(tmp_catalog)).prefill_batch(4096)
