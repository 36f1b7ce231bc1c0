"""Performance model: every calibration target within tolerance, exact physical relations, network
health, comparator deployments and input validation."""
import math

import pytest

from twin.perf import HEALTHY, NetState, PerfModel, with_net
from twin.validate import PAPER, TARGETS, rows

SLO_MS = 50.0


@pytest.fixture(scope="module")
def pm() -> PerfModel:
    return PerfModel(PAPER)


@pytest.fixture(scope="module")
def validate_rows() -> dict:
    return {r["name"]: r for r in rows()}


# ---- calibration and validation rows -----------------------------------------------------------
def test_targets_are_the_reference_rows():
    cal = [t for t in TARGETS if t.kind == "calibration"]
    val = [t for t in TARGETS if t.kind == "validation"]
    assert len(cal) == 21 + 20 + 1 and len(val) == 5
    by = {t.name: t.target for t in TARGETS}
    assert by["prefill tokens/s per NPU (4K, default balance)"] == 5655
    assert by["prefill tokens/s per NPU (4K, perfect balance)"] == 6688
    assert by["decode TPOT ms (batch 96, 4K KV)"] == 49.4
    assert by["decode tokens/s per NPU (batch 96, 4K KV)"] == 1943
    assert by["decode TPOT ms (batch 8, 4K prompt + 256 out)"] == 14.9
    assert by["decode tokens/s per NPU (batch 8)"] == 538
    assert by["EMS prefill speed-up at 90% token reuse"] == 2.28
    assert by["UB dispatch us (EP64, 128 tokens/rank)"] == 141
    assert by["UB combine us (EP256, 128 tokens/rank)"] == 149
    # gpu-clusters.md section 1 (validation) and section 3 (DeepEP kernel tables, calibration)
    assert [t.target for t in val] == [7839, 2325, 6288, 7417, 2172]
    assert by["DeepEP normal dispatch GB/s (EP32, 4,096 tokens)"] == 58
    assert by["DeepEP low-latency combine us (EP128, 128 tokens)"] == 369


def test_no_constant_is_fitted_to_a_validation_row():
    from twin.calibrate import GROUPS
    assert all(t.group == "none" for t in TARGETS if t.kind == "validation")
    assert {t.group for t in TARGETS if t.kind == "calibration"} == set(GROUPS)


@pytest.mark.parametrize("name", [t.name for t in TARGETS])
def test_row_within_tolerance(name, validate_rows):
    t = next(t for t in TARGETS if t.name == name)
    twin = t.measure(PerfModel(t.deployment))
    err = (twin - t.target) / t.target * 100
    assert abs(err) <= t.tolerance_pct, f"{name}: twin {twin:.4g} vs {t.target} ({err:+.2f}%)"
    r = validate_rows[name]      # the table `validate` prints reports the same numbers
    assert r["pass"] is True and r["tolerance_pct"] == t.tolerance_pct and r["kind"] == t.kind
    assert r["twin"] == pytest.approx(twin, abs=1e-3)
    assert r["error_pct"] == pytest.approx(err, abs=0.006)


# ---- exact physical relations -------------------------------------------------------------------
def test_kv_bytes_per_token_deepseek_r1(pm):
    # ref 2: (512 + 64) latent dims x 2 bytes (BF16) x 61 layers, "about 70 KB"
    assert pm.kv_bytes_per_token_layer() == 576 * 2
    assert pm.kv_bytes_per_token() == 576 * 2 * 61 == 70_272


def test_kv_bytes_per_token_gqa_model(pm):
    qwen = PerfModel(pm.dep.model_copy(update={"model": "qwen3-235b-a22b", "mtp": False}))
    # GQA: K and V, 4 KV heads x 128 dims, 2 bytes, 94 layers
    assert qwen.kv_bytes_per_token() == 2 * 4 * 128 * 2 * 94


@pytest.mark.parametrize("batch,kv", [(96, 4096), (8, 4224), (1, 4096), (33, 16384)])
@pytest.mark.parametrize("mtp", [True, False])
def test_decode_throughput_is_batch_over_tpot(pm, batch, kv, mtp):
    r = pm.decode_step(batch, kv, mtp=mtp)
    assert r.tokens_per_s_per_npu == pytest.approx(batch / (r.tpot_ms / 1e3), rel=1e-12)
    tokens_per_seq = 1.7 if mtp else 1.0          # ref 3: 70% acceptance of 1 draft token
    assert r.tpot_ms == pytest.approx(r.step_ms / tokens_per_seq, rel=1e-12)


def test_breakdown_sums_to_step_time(pm):
    for r in (pm.decode_step(96, 4096), pm.decode_step(8, 4224, mtp=False),
              pm.decode_step(96, 4096, microbatch=False), pm.prefill_batch(4096),
              pm.prefill_batch(4096, reuse=0.5), pm.prefill_batch(4096, microbatch=False)):
        assert sum(r.breakdown.values()) == pytest.approx(r.step_ms, rel=1e-9)


def test_prefill_ttft_is_the_batch_time_and_throughput_is_tokens_over_it(pm):
    r = pm.prefill_batch(4096)
    assert r.ttft_ms == r.step_ms
    assert r.tokens_per_step == 16384     # ref 3: 16,384 tokens per NPU per batch
    assert r.tokens_per_s_per_npu == pytest.approx(16384 / (r.step_ms / 1e3), rel=1e-12)


def test_breakdown_keys(pm):
    keys = set(pm.decode_step(96, 4096).breakdown)
    assert {"mla_proj", "attention", "dispatch", "experts", "combine", "lm_head"} <= keys
    assert {"mla_proj", "attention", "dispatch", "experts", "combine", "lm_head"} <= \
        set(pm.prefill_batch(4096).breakdown)
    for name in ("mla_proj", "attention", "dispatch", "experts", "combine", "lm_head"):
        assert pm.decode_step(96, 4096).breakdown[name] > 0


def test_tpot_rises_with_batch(pm):
    tpots = [pm.decode_step(b, 4096).tpot_ms for b in range(1, 257)]
    assert all(b > a for a, b in zip(tpots, tpots[1:]))


def test_tpot_rises_with_kv_length(pm):
    tpots = [pm.decode_step(96, kv).tpot_ms for kv in range(256, 32769, 256)]
    assert all(b > a for a, b in zip(tpots, tpots[1:]))


def test_mtp_gives_more_tokens_per_second_at_batch_96(pm):
    on = pm.decode_step(96, 4096, mtp=True)
    off = pm.decode_step(96, 4096, mtp=False)
    assert on.tokens_per_s_per_npu > off.tokens_per_s_per_npu
    assert on.step_ms > off.step_ms                # a step does more work with the draft token


def test_perfect_balance_is_faster_for_prefill(pm):
    assert pm.imbalance("prefill", "perfect") == 1.0
    assert pm.imbalance("prefill", "default") > 1.0
    assert (pm.prefill_batch(4096, balance="perfect").tokens_per_s_per_npu
            > pm.prefill_batch(4096).tokens_per_s_per_npu)


def test_reuse_speeds_up_prefill(pm):
    base = pm.prefill_batch(4096, reuse=0.0)
    cached = pm.prefill_batch(4096, reuse=0.9)
    assert cached.tokens_per_s_per_npu > base.tokens_per_s_per_npu
    assert cached.ttft_ms < base.ttft_ms
    assert {"ems_lookup", "ems_transfer"} <= set(cached.breakdown)
    assert "ems_lookup" not in base.breakdown


# ---- network health -----------------------------------------------------------------------------
def test_healthy_net_is_the_default(pm):
    assert pm.net == HEALTHY == NetState(1.0, 1.0, 1.0, 0.0)
    assert with_net(pm, ub=1.0).decode_step(96, 4096).tpot_ms == pm.decode_step(96, 4096).tpot_ms


def test_half_ub_slows_dispatch_combine_and_decode(pm):
    half = with_net(pm, ub=0.5)
    assert half.net.ub == 0.5 and half.net.rdma == 1.0
    for ep in (8, 64, 256):
        assert half.dispatch_us(ep) > pm.dispatch_us(ep)
        assert half.combine_us(ep) > pm.combine_us(ep)
    # exactly: halving bandwidth adds the bandwidth term once more (EP64, 128 tokens per NPU)
    ranks = 63 * (1 - (1 - 1 / 64) ** 8)
    byte_us = 128 * ranks * 7680 / (135e9 * 2) * 1e6   # write 135 GB/s per die, 2 dies per NPU
    assert half.dispatch_us(64) - pm.dispatch_us(64) == pytest.approx(byte_us, rel=1e-9)
    d_half, d = half.decode_step(96, 4096), pm.decode_step(96, 4096)
    assert d_half.tpot_ms > d.tpot_ms
    assert d_half.breakdown["dispatch"] > d.breakdown["dispatch"]
    assert d_half.breakdown["combine"] > d.breakdown["combine"]
    assert d_half.breakdown["experts"] == pytest.approx(d.breakdown["experts"], rel=1e-12)


def test_half_rdma_slows_kv_transfer_only(pm):
    half = with_net(pm, rdma=0.5)
    lat_s = pm.system.rdma_latency_us * 1e-6
    t, t_half = pm.kv_transfer_seconds(4096), half.kv_transfer_seconds(4096)
    assert t_half > t
    assert t_half - lat_s == pytest.approx(2 * (t - lat_s), rel=1e-12)
    # 4096 tokens x 70,272 B over one die's share of a 400 Gbps NIC (25 GB/s)
    assert t == pytest.approx(4096 * 70272 / 25e9 + lat_s, rel=1e-12)
    assert half.decode_step(96, 4096).tpot_ms == pm.decode_step(96, 4096).tpot_ms


def test_partitioned_ub_decode_is_infinite_not_a_crash(pm):
    cut = with_net(pm, ub=0)
    assert cut.net.partitioned
    assert math.isinf(cut.dispatch_us(64)) and math.isinf(cut.combine_us(64))
    r = cut.decode_step(96, 4096)
    assert math.isinf(r.tpot_ms) and r.tpot_ms > 0
    assert r.tokens_per_s_per_npu == 0.0
    assert cut.max_batch_for_slo()["batch_per_npu"] == 0


def test_partitioned_ub_prefill_is_infinite_not_nan(pm):
    r = with_net(pm, ub=0).prefill_batch(4096)
    assert math.isinf(r.ttft_ms) and r.ttft_ms > 0
    assert r.tokens_per_s_per_npu == 0.0
    assert not any(math.isnan(v) for v in r.breakdown.values())


def test_partitioned_ub_cache_loads_are_infinite(pm):
    cut = with_net(pm, ub=0)
    assert math.isinf(cut.ems_load_seconds(4096))
    assert math.isinf(cut.kv_transfer_seconds(4096, plane="ub"))
    assert cut.kv_transfer_seconds(4096) == pm.kv_transfer_seconds(4096)   # RDMA plane unaffected


# ---- SLO search -------------------------------------------------------------------------------
@pytest.mark.parametrize("slo,kv", [(50, 4096), (50, 4224), (15, 4224), (50, 16384), (30, 8192)])
def test_max_batch_for_slo_is_the_largest_batch_meeting_it(pm, slo, kv):
    res = pm.max_batch_for_slo(slo, kv)
    b, cap = res["batch_per_npu"], res["kv_limit_batch_per_npu"]
    assert cap == pm.max_batch_per_die(kv) * pm.dies_per_npu
    assert 1 <= b <= cap
    assert pm.decode_step(b, kv).tpot_ms <= slo
    assert res["tpot_ms"] == pytest.approx(pm.decode_step(b, kv).tpot_ms, rel=1e-12)
    assert res["tokens_per_s_per_npu"] == pytest.approx(b / res["tpot_ms"] * 1e3, rel=1e-12)
    if b < cap:
        assert pm.decode_step(b + 1, kv).tpot_ms > slo


def test_max_batch_for_slo_limited_by_kv(pm):
    res = pm.max_batch_for_slo(10_000, 4096)
    cap = res["kv_limit_batch_per_npu"]
    assert res["batch_per_npu"] == cap > 0
    per_die = cap // pm.dies_per_npu
    need = lambda n: n * 4096 * pm.kv_bytes_per_token()
    assert need(per_die) <= pm.kv_capacity_bytes_per_die() < need(per_die + 1)


def test_max_batch_for_slo_at_paper_setting(pm):
    # ref 4: batch 96 per NPU meets the 50 ms SLO at 4K KV (TPOT 49.4 ms, tolerance 5%)
    b = pm.max_batch_for_slo(SLO_MS, 4096)["batch_per_npu"]
    assert 90 <= b <= 100


def test_max_batch_for_zero_slo_is_not_the_default_slo(pm):
    try:
        res = pm.max_batch_for_slo(0.0, 4096)
    except ValueError:
        return
    assert res["slo_ms"] == 0.0 and res["batch_per_npu"] == 0


# ---- comparators ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["deepseek-h800", "sglang-h100"])
def test_gpu_deployments_compute_with_fp8(name):
    p = PerfModel(name)
    assert p.dep.precision == "fp8" and p.chip.fp8_tflops > 0 and p.dies_per_npu == 1
    dec, pre = p.decode_step(None, 4096), p.prefill_batch(4096)
    for r in (dec, pre):
        assert math.isfinite(r.tokens_per_s_per_npu) and r.tokens_per_s_per_npu > 0
    assert dec.tpot_ms == p.decode_step(None, 4096, precision="fp8").tpot_ms
    assert dec.tokens_per_s_per_npu == pytest.approx(p.dep.decode.batch_per_die / dec.tpot_ms * 1e3)
    # FP8 halves weight bytes and doubles peak over BF16: strictly faster
    assert p.decode_step(None, 4096, precision="bf16").tpot_ms > dec.tpot_ms
    assert p.prefill_batch(4096, precision="bf16").tokens_per_s_per_npu < pre.tokens_per_s_per_npu


def test_rdma_dispatch_is_slower_than_ub_at_the_papers_setting(pm):
    # ref 4: at 128 tokens per rank DeepEP over RDMA takes 163-194 us (dispatch) and 318-369 us
    # (combine) at EP 32-256, against UB's 133-152 and 146-150
    h800 = PerfModel("deepseek-h800")
    for ep in (32, 64, 128, 256):
        assert 150 <= h800.dispatch_us(ep, 128) <= 210 and h800.dispatch_us(ep, 128) > pm.dispatch_us(ep)
        assert 280 <= h800.combine_us(ep, 128) <= 370 and h800.combine_us(ep, 128) > pm.combine_us(ep)
    assert with_net(h800, rdma=0.5).dispatch_us(64) > h800.dispatch_us(64)


# ---- bad inputs -------------------------------------------------------------------------------
def test_fp8_on_ascend_is_refused(pm):
    with pytest.raises(ValueError, match=r"precision = 'fp8': ascend-910c-die has no fp8 \(allowed: int8, bf16\)"):
        pm.decode_step(96, 4096, precision="fp8")
    with pytest.raises(ValueError, match="precision = 'fp8'"):
        pm.prefill_batch(4096, precision="fp8")


def test_unknown_precision_is_refused(pm):
    with pytest.raises(ValueError, match="precision = 'fp4': allowed int8, bf16, fp8"):
        pm.decode_step(96, 4096, precision="fp4")


@pytest.mark.parametrize("reuse", [1.0, 1.5, -0.1])
def test_reuse_out_of_range(pm, reuse):
    with pytest.raises(ValueError, match=rf"reuse = {reuse}: allowed 0 <= reuse < 1"):
        pm.prefill_batch(4096, reuse=reuse)


def test_bogus_balance(pm):
    for call in (lambda: pm.prefill_batch(4096, balance="bogus"),
                 lambda: pm.decode_step(96, 4096, balance="bogus")):
        with pytest.raises(ValueError, match="balance = 'bogus': allowed 'default' or 'perfect'"):
            call()


@pytest.mark.parametrize("batch", [0, -8])
def test_nonpositive_batch(pm, batch):
    with pytest.raises(ValueError, match=rf"batch = {batch}(\.0)?: must be > 0"):
        pm.decode_step(batch, 4096)


def test_nonpositive_prompt(pm):
    with pytest.raises(ValueError, match="prompt = 0: must be > 0"):
        pm.prefill_batch(0)


@pytest.mark.parametrize("kv", [0, -5])
def test_nonpositive_kv_length(pm, kv):
    with pytest.raises(ValueError, match="kv"):
        pm.decode_step(96, kv)


@pytest.mark.parametrize("tokens", [0, -1])
def test_nonpositive_prefill_tokens(pm, tokens):
    with pytest.raises(ValueError, match="tokens"):
        pm.prefill_batch(4096, tokens_per_npu=tokens)


def test_mtp_on_a_model_without_mtp():
    qwen = PerfModel(PerfModel(PAPER).dep.model_copy(update={"model": "qwen3-235b-a22b"}))
    with pytest.raises(ValueError, match="has no MTP module"):
        qwen.decode_step(96, 4096)
    r = qwen.decode_step(96, 4096, mtp=False)
    assert r.tokens_per_s_per_npu > 0 and "qkv_o_proj" in r.breakdown
