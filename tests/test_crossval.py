"""Leave-one-source-out cross-validation (twin/predict/crossval.py) and the bands perf and compare print."""
import json
import math

import pytest

from twin.predict import crossval
from twin.predict.validate import TARGETS


def test_stored_crossval_covers_every_fitted_source_and_validation_row():
    cv = crossval.stored()
    fitted = {t.source for t in TARGETS if t.group not in ("none", "table")}
    assert {f["source"] for f in cv["fitted"]} == fitted
    assert len(cv["validation"]) == sum(t.kind == "validation" for t in TARGETS)
    # a source that alone fixes a constant is reported, not given a fake 0% error
    ems = next(f for f in cv["fitted"] if f["source"] == "ref 3 context caching")
    assert ems["errors_pct"] is None and ems["unidentified_without"] == ["[ems] server_gbps"]


def test_table_rows_left_out_match_the_stored_file():
    # cheap part of the cross-validation: recomputed here, must equal what validate prints
    assert crossval.table_rows() == crossval.stored()["tables"]
    inner = [r for r in crossval.table_rows() if r["how"] == "interpolated"]
    # DeepEP-Ascend normal dispatch EP16 from EP8 and EP32: 146 -> 102 GB/s interpolated in log2 EP
    r = next(r for r in inner if (r["table"], r["op"], r["ep"]) == ("DeepEP-Ascend normal", "dispatch", 16))
    assert r["error_pct"] == pytest.approx(13.4, abs=0.05)


def test_bands_and_labels():
    assert crossval.band("decode", "cloudmatrix-infer-paper", "decode")["label"] == "calibration"
    # issue 38: a GPU figure's band is leave-one-system-out transfer, never another system's
    # validation error; five H100 prefill rows (worst -4.2%) hold the 5% floor
    assert crossval.band("prefill", "sglang-h100", "prefill") == {
        "label": "validation", "band_pct": 5.0,
        "band_basis": "leave-one-system-out transfer: gpu-cluster-h100's own prefill rows with nothing "
                      "fitted to gpu-cluster-h100 (5 rows, floor 5%)"}
    # H800's rows all need constants only H800 fixes: its band transfers from H100 and H200, and it is
    # Hopper with rows of its own chip, so no other chip's efficiencies are said to be assumed
    h800 = crossval.band("decode", "deepseek-h800", "decode")
    assert h800["label"] == "prediction" and "another chip" not in h800["band_basis"]
    assert h800["band_basis"].startswith("leave-one-system-out transfer across gpu-cluster-h100, "
                                         "gpu-cluster-h200 cluster systems (decode, 2 rows)")
    gb = crossval.band("decode", "gb200-nvl72-r1", "decode")
    assert gb["label"] == "prediction" and gb["band_pct"] == h800["band_pct"]
    assert gb["band_basis"].endswith("no published row on gb200: its kernel efficiencies are another "
                                     "chip's (assumption), which the band does not cover")
    row = crossval.band("alltoall", "cloudmatrix-infer-paper", "table: DeepEP-Ascend normal, row (EP8)")
    assert row == {"label": "calibration", "band_pct": 0.0, "band_basis": "kernel table, leave one row out"}


def test_a_label_holds_only_at_its_rows_conditions(capsys):
    from twin.cli.main import main
    from twin.predict.validate import decode_point, prefill_point
    # the row is stored at its published KV (4,000, lm-sys blog 2025-05-05-large-scale-ep), not 4,096
    assert crossval.band("decode", "sglang-h100", "decode", decode_point(128, 4000))["label"] == "validation"
    assert crossval.band("decode", "sglang-h100", "decode", decode_point(128, 4096))["label"] == "prediction"
    off = crossval.band("decode", "sglang-h100", "decode", decode_point(64, 4096))
    assert off["label"] == "prediction" and off["band_basis"].endswith("; away from their conditions")
    # DeepSeek's profile rows are balanced: at the default placement a prediction
    assert crossval.band("prefill", "deepseek-h800-profile", "prefill",
                         prefill_point(balance="perfect"))["label"] == "calibration"
    assert crossval.band("prefill", "deepseek-h800-profile", "prefill", prefill_point())["label"] == "prediction"
    # the EMS row (90% reuse) is a calibration point of the paper's deployment, 50% reuse is not
    assert crossval.band("prefill", "cloudmatrix-infer-paper", "prefill", prefill_point(reuse=0.9))["label"] == "calibration"
    assert crossval.band("prefill", "cloudmatrix-infer-paper", "prefill", prefill_point(reuse=0.5))["label"] == "prediction"
    for batch, label in (("96", "calibration"), ("64", "prediction")):
        assert main(["perf", "decode", "--batch", batch, "--kv", "4096", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["label"] == label


@pytest.mark.parametrize("argv", [["perf", "decode", "--json"], ["perf", "prefill", "--json"],
                                  ["perf", "alltoall", "--ep", "48", "--tokens", "4096", "--json"]])
def test_perf_prints_a_band(argv, capsys):
    from twin.cli.main import main
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    keys = [k for k in d if k.endswith("band_pct")]
    assert keys and all(isinstance(d[k], float) for k in keys)
    assert all(d[k.replace("band_pct", "label")] in ("calibration", "validation", "prediction") for k in keys)


def test_compute_table_rows_left_out():
    rows = {(r["table"], r["n"], r["k"], r["m"]): r["error_pct"] for r in crossval.compute_rows()}
    assert rows[("DeepGEMM dense", 7168, 16384, 128)] == pytest.approx(3.36, abs=0.01)
    assert rows[("DeepGEMM grouped masked", 7168, 2048, 512)] == pytest.approx(3.0, abs=0.01)
    assert rows[("FlashAttention-3 forward (prefill)", 0, 0, 4096)] == pytest.approx(-0.06, abs=0.01)
    assert len(rows) == 12 and crossval.stored()["compute_tables"] == crossval.compute_rows()


def test_transfer_leaves_a_whole_system_out():
    cv = crossval.stored()
    assert cv["transfer"] == crossval.transfer_rows()
    by = {(r["system"], r["row"]): r["error_pct"] for r in cv["transfer"]}
    # nothing is fitted to H100: its transfer errors are its validation errors
    val = {v["row"]: v["error_pct"] for v in cv["validation"]}
    assert by["gpu-cluster-h100", "SGLang H100 prefill tok/s per GPU (perfect EPLB)"] == val[
        "SGLang H100 prefill tok/s per GPU (perfect EPLB)"]
    # the scheduler is fixed by H200's row alone: without H200 the rows it moves are unidentified
    assert by["gpu-cluster-h200", "SGLang H200 decode tok/s per GPU (2 per GPU, 64K in, no overlap scheduler)"] is None
    assert all(e is None for (s, _), e in by.items() if s == "cloudmatrix384")


H100_DECODE = "SGLang H100 decode tok/s per GPU (batch 128, 4K KV, MTP 60%)"
H100_PREFILL = "SGLang H100 prefill tok/s per GPU (default placement)"


def test_small_samples_have_a_floor_and_coverage_leaves_the_row_out():
    # issue 38: fewer than five rows never claim a band narrower than what every other held-out figure
    # says of the spread: the 90% Student-t bound on their RMS error (n degrees of freedom), nor 10%
    cv = {"transfer": [{"system": "gpu-cluster-h100", "row": H100_DECODE, "phase": "decode", "error_pct": 0.5},
                       {"system": "gpu-cluster-h100", "row": H100_PREFILL, "phase": "prefill", "error_pct": -12.0}]}
    assert crossval.held_out(cv) == {H100_DECODE: 0.5, H100_PREFILL: -12.0}
    bound, n, rms = crossval.pooled_floor(cv)
    assert (n, rms) == (2, pytest.approx((0.5 ** 2 / 2 + 12 ** 2 / 2) ** 0.5))
    assert bound == pytest.approx(2.919986 * rms, rel=1e-6)          # t(0.95, 2 dof)
    b = crossval.transfer_band("gpu-cluster-h100", "decode", cv)
    assert b["band_pct"] == round(bound, 1) == 24.8
    assert b["band_basis"].endswith("(1 row, small-sample floor 24.8%: the 90% t-bound on the RMS error "
                                    "(8.5%) of 2 held-out figures)")
    # without the prefill row only the 0.5% row is left: its t-bound (6.31 x 0.5%) is below the 10% floor
    assert crossval.transfer_band("gpu-cluster-h100", "prefill", cv, leave=H100_PREFILL)["band_pct"] == 10.0
    # the prefill row is judged against the band without it (10%): outside; the decode row against the
    # bound of the prefill row alone (6.31 x 12% = 75.8%): inside
    c = crossval.coverage(cv)
    assert (c["held_out"], c["inside"], c["outside"]) == (2, 1, [H100_PREFILL])


def test_a_gpu_kernel_without_a_table_is_banded_by_its_own_rows_never_by_ub():
    # issue 38: DeepEP V2 on the H100 cluster has no kernel table: the roofline's figure is banded by
    # V2's published rows (nothing fitted to them), not by ref 4's UB table
    cv = crossval.stored()
    v2 = [v["error_pct"] for v in cv["validation"] if v["row"].startswith("DeepEP V2 ")]
    assert len(v2) == 4 and max(map(abs, v2)) < crossval.pooled_floor(cv)[0]
    src = "roofline: no kernel table for normal-v2 combine on gpu-cluster-h100"
    b = crossval.band("alltoall", "sglang-h100", src)
    assert b["label"] == "prediction" and b["band_pct"] == round(crossval.pooled_floor(cv)[0], 1)
    assert b["band_basis"].startswith("normal-v2: its published rows predicted by the roofline with nothing "
                                      "fitted to them (4 rows, small-sample floor")
    ll = crossval.band("alltoall", "gb200-nvl72-r1", "roofline: no kernel table for low-latency dispatch on gb200-nvl72")
    assert ll["band_basis"].startswith("low-latency: no published row held out here (0 rows")
    assert crossval.band("alltoall", "cloudmatrix-infer-paper", "roofline: no kernel table for ub dispatch on "
                         "cloudmatrix384")["band_basis"] == "ref 4 UB table left out of the refit"
    # DeepEP-Ascend's kernels share V1's names: on a supernode they stay on the UB basis
    assert crossval.band("alltoall", "cloudmatrix-unified", "roofline: no kernel table for normal dispatch on "
                         "cloudmatrix384-unified")["band_basis"] == "ref 4 UB table left out of the refit"
    # every published figure nothing was fitted to counts, each against the band printed for it
    # without itself: 14 of 15, the H200 overlap-scheduler row outside
    c = crossval.coverage(cv)
    assert (c["held_out"], c["inside"]) == (15, 14) and c["fraction"] >= crossval.COVER
    assert c["outside"] == ["SGLang H200 decode tok/s per GPU (2 per GPU, 64K in, overlap scheduler)"]


def test_ems_reuse_has_its_own_band_and_its_rows_count_in_coverage():
    # issue 38: a prefill figure with EMS reuse is banded by the context-caching TTFT rows (nothing
    # fitted to them), never by the unidentified calibration source; each row is judged without itself
    ms, share = "EMS TTFT cut ms at 90% token reuse", "EMS TTFT cut % at 90% token reuse"
    ems = [{"source": "ref 3 context caching, TTFT", "row": ms, "deployment": PAPER_DEP, "error_pct": 10.7},
           {"source": "ref 3 context caching, TTFT", "row": share, "deployment": PAPER_DEP, "error_pct": -4.9}]
    cv = {"transfer": [], "validation": ems + [{"source": "ref G 1", "row": H100_DECODE, "deployment": "sglang-h100",
                                                "error_pct": 2.0}]}
    pct, basis = crossval.ems_band(cv)
    # two rows: never narrower than the spread of all three held-out figures (t(0.95, 3) 2.353 x 6.9%)
    assert pct == 16.2 and basis == ("EMS reuse: ref 3 context-caching TTFT rows, nothing fitted to them "
                                     "(2 rows, small-sample floor 16.2%: the 90% t-bound on the RMS error (6.9%) "
                                     "of 3 held-out figures)")
    # without the ms row: the share row (4.9%) and the H100 row (2%) bound the spread at 2.92 x 3.7%, so the
    # ms row (+10.7%) is inside the band printed without it (before: the share row's 10% floor, outside)
    assert crossval.ems_band(cv, leave=ms)[0] == 10.9
    c = crossval.coverage(cv)
    assert (c["held_out"], c["inside"], c["outside"]) == (3, 3, [])
    from twin.predict.validate import prefill_point
    b = crossval.band("prefill", PAPER_DEP, "prefill", prefill_point(reuse=0.9))
    assert b["label"] == "calibration" and b["band_basis"].startswith("EMS reuse: ref 3 context-caching")
    assert crossval.band("prefill", PAPER_DEP, "prefill", prefill_point())["band_basis"].startswith("CloudMatrix")


PAPER_DEP = "cloudmatrix-infer-paper"


def test_a_ub_all_to_all_away_from_ref_4s_table_says_so_and_widens():
    # issue 38: at EP320 with 4 tokens per rank (the production regime) no published all-to-all row
    # exists; the band says it is beyond the table and, for combine, covers the structure nothing there
    # rules out (combine waiting on dispatch's count exchange, beta log2 EP)
    cv = crossval.stored()
    src = "roofline: UB model (paper's kernels, ref 4)"
    inside = crossval.band("alltoall", "cloudmatrix-infer-paper", src, (64, 128, "combine", 144.2))
    assert inside["band_basis"] == "ref 4 UB table left out of the refit"
    floor = round(crossval.pooled_floor(cv)[0], 1)
    d = crossval.band("alltoall", "cloudmatrix-infer-paper", src, (320, 4, "dispatch", 78.3))
    assert d["band_pct"] == floor and d["band_basis"].startswith("beyond ref 4's UB table (EP 8-256, 128 tokens")
    wait = crossval.constants()["comm"]["beta_us"] * math.log2(320)
    c = crossval.band("alltoall", "cloudmatrix-infer-paper", src, (320, 4, "combine", 40.0))
    assert c["band_pct"] == pytest.approx(100 * wait / 40.0, abs=0.05) and c["band_pct"] > 90
    assert "count-exchange wait" in c["band_basis"]
    # more EP at the table's own tokens: the floor alone (the table rejects that wait at 128 tokens)
    e = crossval.band("alltoall", "cloudmatrix-infer-paper", src, (320, 128, "combine", 147.6))
    assert e["band_pct"] == floor
