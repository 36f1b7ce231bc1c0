"""Command line: JSON shapes of perf, validate, topology, run and bench, and one-line errors (exit 2)."""
import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from twin.__main__ import main

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str) -> tuple[int, str, str]:
    """Run `python -m twin ARGS` in-process; returns (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:        # argparse errors
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def cli_json(*args: str) -> dict:
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def subprocess_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twin", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


# ---- perf ---------------------------------------------------------------------------------------
def test_perf_decode_json():
    d = cli_json("perf", "decode", "--batch", "96")
    for key in ("step_time_ms", "tpot_ms", "tokens_per_s_per_npu", "breakdown"):
        assert key in d, f"missing {key}: {sorted(d)}"
    assert d["phase"] == "decode" and d["batch_per_npu"] == 96
    assert d["kv_len"] == 4096 + 256 / 2                      # default KV: prompt + output / 2
    assert d["tokens_per_s_per_npu"] == pytest.approx(96 / d["tpot_ms"] * 1e3, rel=1e-4)
    assert d["tpot_ms"] == pytest.approx(d["step_time_ms"] / 1.7, rel=1e-4)
    bd = d["breakdown"]
    assert {"mla_proj", "attention", "dispatch", "experts", "combine", "lm_head"} <= set(bd)
    assert all(isinstance(v, (int, float)) for v in bd.values())
    assert sum(bd.values()) == pytest.approx(d["step_time_ms"], abs=0.01)


def test_perf_decode_json_matches_the_model():
    from twin.perf import PerfModel
    d = cli_json("perf", "decode", "--batch", "8", "--kv", "4224", "--no-mtp")
    r = PerfModel("cloudmatrix-infer-paper").decode_step(8, 4224, mtp=False)
    assert d["tpot_ms"] == pytest.approx(r.tpot_ms, abs=1e-4)
    assert d["step_time_ms"] == pytest.approx(r.step_ms, abs=1e-4)
    assert d["slo"]["slo_ms"] == 50


def test_perf_prefill_json():
    d = cli_json("perf", "prefill")
    for key in ("step_time_ms", "ttft_ms", "tokens_per_s_per_npu", "breakdown"):
        assert key in d, f"missing {key}: {sorted(d)}"
    assert "tpot_ms" not in d
    assert d["ttft_ms"] == d["step_time_ms"]
    assert d["tokens_per_s_per_npu"] == pytest.approx(16384 / d["ttft_ms"] * 1e3, rel=1e-4)
    cached = cli_json("perf", "prefill", "--reuse", "0.9")
    assert cached["ttft_ms"] < d["ttft_ms"]


def test_perf_text_output():
    code, out, err = cli("perf", "decode")
    assert code == 0 and err == ""
    assert "step_time_ms=" in out and "tpot_ms=" in out
    assert any(line.split()[0] == "dispatch" and line.rstrip().endswith("ms")
               for line in out.splitlines()[1:] if line.strip())


# ---- validate -----------------------------------------------------------------------------------
def test_validate_json():
    code, out, err = cli("validate", "--json")
    d = json.loads(out)
    assert isinstance(d["targets"], list) and len(d["targets"]) == 47
    for t in d["targets"]:
        assert {"name", "kind", "target", "twin", "error_pct", "tolerance_pct", "pass"} <= set(t)
        assert t["pass"] == (abs(t["error_pct"]) <= t["tolerance_pct"])
    assert isinstance(d["predictions"], list)
    seen = {(p["deployment"], p["phase"]) for p in d["predictions"]}
    assert {("deepseek-h800", "decode"), ("sglang-h100", "prefill")} <= seen
    for p in d["predictions"]:
        assert {"deployment", "phase", "tokens_per_s_per_gpu", "tpot_ms"} <= set(p)
        assert p["tokens_per_s_per_gpu"] > 0
        assert (p["tpot_ms"] is None) == (p["phase"] == "prefill")
    all_pass = all(t["pass"] for t in d["targets"])
    assert code == (0 if all_pass else 1)
    assert all_pass
    assert err == ""


# ---- topology -----------------------------------------------------------------------------------
def test_topology_json():
    d = cli_json("topology", "--system", "cloudmatrix384")
    c = d["counts"]
    assert (c["die"], c["npu"], c["cpu"], c["l1"], c["l2"], c["link:l1-l2"]) == \
        (768, 384, 192, 336, 112, 5376)


# ---- run and bench ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def paper_decode_run():
    code, out, err = cli("run", "--scenario", "paper-decode", "--duration", "20", "--json", "--seed", "1")
    assert code == 0, err
    return json.loads(out)


def test_run_request_accounting(paper_decode_run):
    r = paper_decode_run["requests"]
    assert set(r) >= {"arrived", "completed", "in_flight", "rejected"}
    assert r["arrived"] == r["completed"] + r["in_flight"] + r["rejected"]
    assert r["arrived"] > 0 and r["completed"] > 0
    assert paper_decode_run["seed"] == 1 and paper_decode_run["sim_seconds"] == 20


def test_run_metrics(paper_decode_run):
    d = paper_decode_run
    assert d["decode"]["tokens_per_s_per_npu"] > 0
    assert d["prefill"]["tokens_per_s_per_npu"] >= 0
    for key in ("ttft_ms", "tpot_ms"):
        assert 0 < d[key]["p50"] <= d[key]["p99"]
    assert 0 <= d["slo_attainment"] <= 1
    for key in ("block_hit_ratio", "token_hit_ratio"):
        v = d["cache"][key]
        assert v is None or 0 <= v <= 1


def test_run_is_reproducible_with_a_seed(paper_decode_run):
    code, out, err = cli("run", "--scenario", "paper-decode", "--duration", "20", "--json", "--seed", "1")
    assert code == 0, err
    again = json.loads(out)
    strip = lambda d: {k: v for k, v in d.items() if k != "wall_seconds"}
    assert strip(again) == strip(paper_decode_run)


def test_bench_json():
    code, out, err = cli("bench", "--duration", "20", "--json")
    assert code == 0, err
    d = json.loads(out)
    for key in ("speedup", "events_per_s", "requests_completed", "peak_rss_mb"):
        assert isinstance(d[key], (int, float)) and d[key] > 0, key


# ---- errors: one line on stderr, exit 2, no traceback (real process) --------------------------
@pytest.mark.parametrize("args,needle", [
    (("perf", "decode", "--deployment", "nope"), "deployment = 'nope'"),
    (("topology", "--system", "nope"), "system = 'nope'"),
    (("perf", "decode", "--precision", "fp8"), "precision = 'fp8'"),
    (("perf", "prefill", "--reuse", "1.0"), "reuse = 1.0"),
    (("run", "--scenario", "nope", "--duration", "1"), "scenario = 'nope'"),
    (("run", "--trace", "/nonexistent.jsonl", "--duration", "1"), "/nonexistent.jsonl"),
], ids=["deployment", "system", "precision", "reuse", "scenario", "trace"])
def test_errors_are_one_line(args, needle):
    p = subprocess_cli(*args)
    lines = p.stderr.splitlines()
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("error:") and needle in lines[0]
    assert p.stdout == ""


def test_argument_errors_are_one_line():
    # __main__ promises: every error a user can cause prints one line and exits with status 2
    code, out, err = cli("perf", "decode", "--precision", "fp4")
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error:") and "fp4" in err
