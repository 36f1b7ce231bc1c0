"""Kernel tables by shape (twin/catalog/kernels.toml): the all-to-all takes its time from a published
table inside it, interpolates between rows, falls back to the roofline outside and says which."""
import json
import math

import pytest

from twin.predict.perf import PerfModel, with_net
from twin.predict import kernels
from twin.predict.comm import distinct

PAPER = "cloudmatrix-infer-paper"
# sgl-kernel-npu README, DeepEP-Ascend normal kernels on A3 384 SuperPOD, 4,096 tokens per rank
NORMAL = {8: (146, 125), 16: (107, 103), 32: (102, 95), 64: (81, 91), 128: (57, 81)}


@pytest.fixture(scope="module")
def pm() -> PerfModel:
    return PerfModel(PAPER)


@pytest.mark.parametrize("ep", sorted(NORMAL))
def test_deepep_ascend_rows_reproduced(pm, ep):
    a = pm.alltoall(ep, 4096)
    assert (a["kernel"], a["rank"]) == ("normal", "die")
    for i, op in enumerate(("dispatch", "combine")):
        assert a[f"{op}_gbps_ranks"] == pytest.approx(NORMAL[ep][i], rel=0.15)
        assert a[f"{op}_source"].startswith("table: DeepEP-Ascend normal, row")
        # the benchmark counts received BF16 copies, own rank included, over the kernel's time
        assert a[f"{op}_us"] == pytest.approx(4096 * distinct(ep, 8) * 14336 / NORMAL[ep][i] / 1e3,
                                              rel=1e-4)


def test_per_rank_bandwidth_falls_with_ep(pm):
    for op in ("dispatch", "combine"):
        bw = [pm.alltoall(ep, 4096)[f"{op}_gbps_ranks"] for ep in (8, 16, 32, 64, 128)]
        assert all(a > b for a, b in zip(bw, bw[1:])), (op, bw)


def test_interpolation_between_rows(pm):
    a = pm.alltoall(32, 4096)
    mid = pm.alltoall(45, 4096)          # between EP32 and EP64, linear in log2 EP on time
    b = pm.alltoall(64, 4096)
    w = math.log2(45 / 32)
    assert mid["dispatch_us"] == pytest.approx(a["dispatch_us"] + w * (b["dispatch_us"] - a["dispatch_us"]),
                                               abs=2e-3)
    assert "interpolated" in mid["dispatch_source"]


def test_outside_the_table_is_the_roofline_scaled_to_its_edge(pm):
    edge, out = pm.alltoall(128, 4096), pm.alltoall(256, 4096)
    assert out["dispatch_source"].startswith("roofline scaled to table DeepEP-Ascend normal at EP128")
    assert "outside table" in out["dispatch_source"]
    ub = pm.alltoall(256, 4096, "ub")   # the roofline's own growth from EP128 to EP256
    assert ub["dispatch_source"] == "roofline: UB model (paper's kernels, ref 4)"
    ratio = pm._a2a_roofline(256, 4096, 7680, 1, False, "normal") / pm._a2a_roofline(128, 4096, 7680, 1, False, "normal")
    assert out["dispatch_us"] == pytest.approx(edge["dispatch_us"] * ratio, rel=1e-4)


def test_faults_scale_the_table(pm):
    hurt = with_net(pm, ub=0.5)
    a, b = pm.alltoall(64, 4096), hurt.alltoall(64, 4096)
    assert b["dispatch_us"] > a["dispatch_us"] and "under faults" in b["dispatch_source"]


def test_paper_deployment_runs_the_paper_kernels(pm):
    # the CloudMatrix deployments run the paper's kernels (ref 4), not DeepEP-Ascend: no table
    assert pm.pool_kernel("decode") == pm.pool_kernel("prefill") == "ub"
    assert PerfModel("deepseek-h800-profile").pool_kernel("prefill") == "normal"
    assert pm.alltoall(32, 128, "ub")["dispatch_us"] == pytest.approx(pm.dispatch_us(32), abs=1e-3)


def test_bad_table_is_refused(tmp_path):
    bad = tmp_path / "k.toml"
    bad.write_text('[[alltoall]]\nname="x"\nsystem="s"\nkernel="normal"\nrank="die"\ntokens=1\n'
                   'metric="gbps_ranks"\nsource="s"\nrows=[{ep=8, dispatch=1, combine=1, source="s"}]\n')
    with pytest.raises(ValueError, match=r"#1: metric gbps_ranks needs bytes_per_token.dispatch > 0"):
        kernels.tables(8, 8, bad)
    bad.write_text(bad.read_text().replace('"gbps_ranks"', '"tokens"'))
    with pytest.raises(ValueError, match="metric = 'tokens': allowed us, gbps_ranks, gbps_nodes"):
        kernels.tables(8, 8, bad)


def test_perf_alltoall_prints_its_source(capsys):
    from twin.cli.main import main
    assert main(["perf", "alltoall", "--ep", "128", "--tokens", "4096", "--kernel", "normal", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["dispatch_gbps_ranks"] == 57 and d["combine_gbps_ranks"] == 81
    assert d["dispatch_source"].startswith("table:")


@pytest.mark.parametrize("deployment,pool,kernel", [
    ("gb200-nvl72-r1", "decode", "low-latency"), ("gb200-nvl72-r1", "prefill", "normal"),
    ("cloudmatrix-infer-paper", "decode", "ub"), ("deepseek-h800", "decode", "low-latency")])
def test_perf_alltoall_defaults_to_the_deployments_kernel_for_the_pool(capsys, deployment, pool, kernel):
    # issue 38: GB200's decode figures were right only when the kernel was named
    from twin.cli.main import main
    argv = ["perf", "alltoall", "--deployment", deployment, "--ep", "64", "--tokens", "128", "--json"]
    assert main(argv + (["--pool", pool] if pool != "decode" else [])) == 0
    assert json.loads(capsys.readouterr().out)["kernel"] == kernel


def test_kernel_generations_are_catalog_choices_with_sources():
    from twin.predict.comm import KERNELS, PEER_CAPPED, ClusterFabric, Traffic
    from twin.predict.perf import constants
    assert set(KERNELS) == {"normal", "low-latency", "normal-v2"} and all(KERNELS.values())
    assert PEER_CAPPED == ("normal",)      # the per-peer cap is DeepEP V1's, not the NIC's
    k = constants()["nvlink_rdma"]
    fab = PerfModel("sglang-h100").fabric()
    tr = Traffic(16, 8192, 7168 * 2, 8)
    # EP16 = one remote node, one peer: V1 is held to rdma_peer_gbps, V2 fills the NIC
    assert fab.rdma_rate(tr, "normal", k) == pytest.approx(k["rdma_peer_gbps"] * 1e9)
    assert fab.rdma_rate(tr, "normal-v2", k) == pytest.approx(50e9 * k["rdma_efficiency"])
    with pytest.raises(ValueError, match="kernel = 'normal-v2': allowed normal, low-latency, ub"):
        PerfModel("cloudmatrix-infer-paper").alltoall(16, 128, "normal-v2")


def test_perf_refuses_a_batch_whose_kv_does_not_fit(capsys):
    from twin.cli.main import main
    cap = PerfModel("gb200-nvl72-r1").max_batch_per_die(2048)
    assert cap == 1033
    assert main(["perf", "decode", "--deployment", "gb200-nvl72-r1", "--batch", "1408", "--kv", "2048"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fits at most 1033 sequences per chip" in err
    assert main(["perf", "decode", "--deployment", "gb200-nvl72-r1", "--batch", "1033", "--kv", "2048"]) == 0


# ---- compute kernels by shape (DeepGEMM, prefill attention) ------------------------------------
H800 = "deepseek-h800-profile"


@pytest.fixture(scope="module")
def h800() -> PerfModel:
    return PerfModel(H800)


def test_gemm_rows_reproduced(h800):
    # DeepGEMM README: masked 4 groups x M 256, N 4096, K 7168 at 932 TFLOPS; dense M 128 2112x7168 at 352
    sec, src = h800.gemm("masked", 4, 256, 4096, 7168, "fp8")
    assert sec == pytest.approx(2 * 4 * 256 * 4096 * 7168 / 932e12) and src == "table: DeepGEMM grouped masked, row (M 256)"
    assert h800.gemm("dense", 1, 128, 2112, 7168, "fp8")[0] == pytest.approx(2 * 128 * 2112 * 7168 / 352e12)
    assert h800.gemm("contiguous", 8, 4096, 7168, 2048, "fp8")[0] == pytest.approx(2 * 8 * 4096 * 7168 * 2048 / 1093e12)


def test_gemm_interpolates_its_roofline_ratio_in_log2_m(h800):
    m = 362.0                       # between the masked rows at 256 (815) and 512 (916)

    def roof(mm):                   # the predictor's roofline of one 7,168 x 2,048 GEMM
        return h800.gemm_seconds(2 * mm * 7168 * 2048, 7168 * 2048 * 1.0, 1.0, "fp8", True)
    lo, hi = (2 * r * 7168 * 2048 / (tf * 1e12) / roof(r) for r, tf in ((256, 815), (512, 916)))
    ratio = lo + math.log2(m / 256) * (hi - lo)
    sec, src = h800.gemm("masked", 2, m, 7168, 2048, "fp8", 1.0, True)   # grouped, as expert_gemms
    assert sec == pytest.approx(2 * roof(m) * ratio)
    assert src == "table: DeepGEMM grouped masked, interpolated (M 362)"
    # across the wide gap of the dense table (M 64 to 4,096) the ratio follows the roofline's turn
    # from weight-bound to compute-bound: M 128 of 7,168 x 16,384 left out is predicted at +3.4%
    # where interpolating the rate itself gives -21.5% (crossval.compute_rows)


def test_gemm_outside_the_rows_is_the_roofline_scaled_to_the_edge(h800):
    sec, src = h800.gemm("masked", 2, 100, 4096, 7168, "fp8")
    edge = 2 * 2 * 256 * 4096 * 7168 / 932e12

    def roof(m):
        return h800.gemm_seconds(2 * 2 * m * 4096 * 7168, 2 * 4096 * 7168 * 1.0, 1.0, "fp8", True)
    assert sec == pytest.approx(edge * roof(100) / roof(256))
    assert src == "roofline scaled to table DeepGEMM grouped masked at M 256 (outside M 256-1024)"
    # no table: another precision, another chip, a shape no row has
    assert h800.gemm("masked", 2, 256, 4096, 7168, "bf16")[1] == "roofline: no bf16 GEMM table"
    assert PerfModel("gb200-nvl72-r1").gemm("masked", 2, 256, 4096, 7168, "fp8")[1] == \
        "roofline: no gemm masked table on gb200"
    assert h800.gemm("dense", 1, 128, 36864, 7168, "fp8")[1] == "roofline: no gemm dense row of shape 36864x7168"


def test_decode_experts_use_the_masked_layout_and_prefill_the_contiguous(h800):
    # batch 128 in two microbatches of 64, top-8 over 128 GPUs with 2 experts each: 256 tokens per expert
    dec = h800.decode_step(128, 4096, balance="perfect")
    assert dec.sources["experts"] == "table: DeepGEMM grouped masked, row (M 256)"
    pre = h800.prefill_batch(4096, balance="perfect")
    # prefill: 8,192 tokens per microbatch x top-8 over 9 expert slots per GPU = 7,282 per expert
    assert pre.sources["experts"] == "table: DeepGEMM grouped contiguous, interpolated (M 7282)"
    assert pre.sources["attention"] == "table: FlashAttention-3 forward (prefill), row (length 4096)"
    assert dec.sources["attention"] == "table: FlashMLA dense decoding (H800), compute-bound"
    assert dec.sources["dispatch"] == "roofline scaled to table DeepEP low-latency (H800) at EP128 (outside table DeepEP low-latency (H800) (128 tokens per rank, EP8-256))"


def test_prefill_attention_rate_from_its_table(h800):
    flops = 1e15
    sec, src = h800._attention(flops, 0.0, 1.0, seq=3000)
    rate = 565.544 + math.log2(3000 / 2048) * (590.233 - 565.544)
    assert sec == pytest.approx(flops / (rate * 1e12))
    assert h800._attention(flops, 0.0, 1.0, seq=32768)[0] == pytest.approx(flops / 620.73e12)


def test_decode_attention_from_flashmla_regimes(h800):
    # FlashMLA README (H800 SXM5): 660 TFLOPS compute-bound, 3,000 GB/s memory-bound
    flops, kv = 146e9, 604e6        # one layer, batch 128 x 4K, 128 heads (docs/fidelity.md)
    assert h800._attention(flops, kv, 1.0) == (pytest.approx(flops / 660e12),
                                               "table: FlashMLA dense decoding (H800), compute-bound")
    # 16 query heads (TP8) cut the FLOPs 8x: memory-bound at 3,000 GB/s
    assert h800._attention(flops / 8, kv, 1.0) == (pytest.approx(kv / 3000e9),
                                                   "table: FlashMLA dense decoding (H800), memory-bound")
    # an FP8 KV cache is not what FlashMLA's dense figures measured: the roofline, saying why
    assert PerfModel("gb200-nvl72-r1-fp4").decode_step(128, 4096).sources["attention"] == \
        "roofline: no decode attention table on gb200"
    t, src = kernels.decode_attention("h800", "fp8", 1)
    assert t is None and src == "roofline: FlashMLA dense decoding (H800) is BF16 (attention fp8, 1-byte KV)"
    # a prefill never reads FlashMLA's figures (a decode kernel): FlashAttention-3's table
    assert h800._attention(flops, 0.0, 1.0, seq=4096)[1].startswith("table: FlashAttention-3")


def test_ascend_keeps_the_roofline_for_compute(pm):
    r = pm.decode_step(96, 4096)
    assert r.sources["experts"] == "roofline: no int8 GEMM table"
    assert r.sources["mla_proj"] == "roofline: no int8 GEMM table"


def test_bad_compute_table_is_refused(tmp_path):
    bad = tmp_path / "k.toml"
    bad.write_text('[[gemm]]\nname="x"\nlayout="sparse"\nchips=["h800"]\nsource="s"\n'
                   'rows=[{m=1, n=1, k=1, tflops=1}]\n')
    with pytest.raises(ValueError, match="layout = 'sparse': allowed dense, contiguous, masked"):
        kernels.compute_tables(bad)
    bad.write_text(bad.read_text().replace('"sparse"', '"dense"').replace("tflops=1", "tflops=0"))
    with pytest.raises(ValueError, match=r"\[\[gemm\]\] #1: row .*needs m \(or seq\) > 0 and tflops > 0"):
        kernels.compute_tables(bad)


def test_bad_decode_attention_table_is_refused(tmp_path):
    bad = tmp_path / "k.toml"
    bad.write_text('[[decode_attention]]\nname="x"\nchips=["h800"]\nsource="s"\ntflops=660\ngbps=0\n')
    with pytest.raises(ValueError, match=r"\[\[decode_attention\]\] #1: needs a source, chips, tflops > 0 and gbps > 0"):
        kernels.decode_attention_tables(bad)


def test_perf_decode_prints_its_kernel_sources(capsys):
    from twin.cli.main import main
    assert main(["perf", "decode", "--deployment", H800, "--batch", "128", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kernel_sources"]["experts"].startswith("table: DeepGEMM grouped masked")
    assert main(["perf", "decode", "--deployment", H800, "--batch", "128"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("experts"))
    assert line.endswith("table: DeepGEMM grouped masked, interpolated (M 477)")   # default EPLB: busiest GPU
