"""Command line: JSON shapes of perf, validate, topology, run and bench, and one-line errors (exit 2)."""
import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from twin.cli.main import main

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
    from twin.predict.perf import PerfModel
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
    assert any(line.split()[0] == "dispatch" and line.split()[2] == "ms" and "UB model" in line
               for line in out.splitlines()[1:] if line.strip())     # each operator's time and its source


# ---- validate -----------------------------------------------------------------------------------
def test_validate_json():
    code, out, err = cli("validate", "--json")
    d = json.loads(out)
    # calibration + validation (issue 38: + 2 H200 calibration rows; + 2 H100 prefill, 2 H200 MTP, 4 DeepEP V2)
    assert isinstance(d["targets"], list) and len(d["targets"]) == 59 + 2 + 4 + 8 + 2
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
    (("perf", "prefill", "--reuse", "1.0"), "--reuse: '1.0': allowed a number >= 0 and < 1"),
    (("run", "--scenario", "nope", "--duration", "1"), "scenario = 'nope'"),
    (("run", "--trace", "/nonexistent.jsonl", "--duration", "1"), "/nonexistent.jsonl"),
    (("bench", "--slice", "2"), "--slice and --runs go with --against"),
    (("bench", "--against", "/", "--scaling"), "not allowed with argument"),
    (("bench", "--against", "/"), "not a checkout of the twin"),
], ids=["deployment", "system", "precision", "reuse", "scenario", "trace", "bench-slice", "bench-modes",
        "bench-against"])
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


# ---- the bad-input survey (issue 8): every flag, every kind of bad value -----------------------
# Each row: argv, and a piece of the one-line message (it names the flag and what is allowed).
# perf and bench flags are refused by argparse; run flags too, before any engine is built.
NUMBERS = ["-1", "0", "nan", "inf", "1e300", "abc", "", " "]
PERF_FLAGS = {"--batch": ("decode", "> 0 and <= 8,192"), "--prompt": ("decode", ">= 1 and <= 1,000,000"),
              "--output": ("decode", ">= 1 and <= 1,000,000"), "--kv": ("decode", ">= 1 and <= 2,000,000"),
              "--tokens-per-npu": ("prefill", ">= 1 and <= 1,048,576"), "--reuse": ("prefill", ">= 0 and < 1")}
RUN_FLAGS = {"--duration": "> 0 and <= 2,592,000 s", "--rate": "> 0 and <= 100,000 req/s",
             "--load": "> 0 and <= 5", "--speedup": ">= 0.001 and <= 10,000",
             "--seed": "an integer >= 0 and <= 9,223,372,036,854,775,807"}
CACHE = "allowed a number of bytes 1 to 1e+18, 'default' (the deployment's EMS DRAM) or 'unlimited' (no capacity limit)"


def _survey():
    rows = []
    for flag, (phase, allowed) in PERF_FLAGS.items():
        for v in NUMBERS:
            if not (flag == "--reuse" and v == "0"):
                rows.append((("perf", phase, flag, v), f"argument {flag}: {v!r}: ", allowed))
    for flag, allowed in RUN_FLAGS.items():
        for v in NUMBERS + ["1.5"] * (flag == "--seed"):
            if not (flag == "--seed" and v == "0"):
                rows.append((("run", "--scenario", "paper-decode", flag, v), f"argument {flag}: {v!r}: ", allowed))
    for flag, allowed in (("--duration", RUN_FLAGS["--duration"]), ("--load", RUN_FLAGS["--load"]),
                          ("--seed", RUN_FLAGS["--seed"])):
        for v in NUMBERS:
            if not (flag == "--seed" and v == "0"):
                rows.append((("bench", flag, v), f"argument {flag}: {v!r}: ", allowed))
    for v in ["-1", "0", "0.5", "nan", "inf", "-inf", "1e300", "abc", "", "2e12x"]:
        rows.append((("run", "--duration", "1", f"--cache-capacity={v}"), f"cache_capacity = {v!r}: ", CACHE))
    for flag, what in (("--scenario", "a scenario name"), ("--trace", "a trace file or a trace name"),
                       ("--deployment", "a deployment name"), ("--faults", "a fault file (TOML) or a demo name")):
        for v in ("", "  "):
            rows.append((("run", flag, v), f"argument {flag}: empty: ", f"allowed {what}"))
    rows += [
        (("run", "--scenario", "nope"), "scenario = 'nope': unknown", "(allowed: default, "),
        (("run", "--deployment", "nope", "--duration", "1"), "deployment = 'nope': unknown", "(allowed: "),
        (("run", "--faults", "nope"), "faults = 'nope': no such file", "(demos: decode-die-no-redundancy"),
        (("run", "--trace", "nope"), "trace 'nope' not found", "known names: mooncake_conversation"),
        (("run", "--trace", "/nonexistent.jsonl"), "/nonexistent.jsonl: trace file not found", ""),
        (("run", "--trace", "/dev/zero"), "/dev/zero: is a character device", "a trace file must be a regular file"),
        (("run", "--trace", "/dev/null"), "/dev/null: is a character device", "must be a regular file"),
        (("run", "--trace", "/"), "/: is a directory", "must be a regular file"),
        (("run", "--faults", "/dev/zero"), "/dev/zero: is a character device", "a fault file must be a regular file"),
        (("run", "--faults", "/"), "/: is a directory", "a fault file must be a regular file"),
        (("run", "--format", "parquet"), "argument --format: invalid choice: 'parquet'", "choose from"),
        (("run", "--scenario", "x", "--trace", "y"), "argument --trace: not allowed with argument --scenario", ""),
        (("run", "--rate", "5", "--load", "1"), "argument --load: not allowed with argument --rate", ""),
        (("run", "--scenario", "paper-decode", "--speedup", "2"), "--speedup: scenario 'paper-decode' is synthetic",
         "allowed --rate or --load"),
        (("run", "--scenario", "paper-decode", "--lenient"), "--lenient: scenario 'paper-decode' is synthetic", ""),
        (("run", "--scenario", "paper-decode", "--format", "azure"), "--format: scenario 'paper-decode' is synthetic", ""),
        (("run", "--scenario", "mooncake-replay", "--rate", "5"), "--rate: scenario 'mooncake-replay' replays a trace",
         "allowed --speedup, --format, --lenient"),
        (("run", "--scenario", "mooncake-replay", "--load", "1"), "--load: scenario 'mooncake-replay' replays a trace", ""),
        (("run", "--out", ""), "argument --out: empty", "allowed a file path ending in .parquet or .csv"),
        (("run", "--out", "run.txt"), "argument --out: 'run.txt'", "allowed a file path ending in .parquet or .csv"),
        (("run", "--out", "/nonexistent/dir/run.csv"), "folder '/nonexistent/dir' does not exist", "(create it first)"),
        (("run", "--out", "/"), "argument --out: '/'", "ending in .parquet or .csv"),
        (("run", "--out", "/dev/null/run.csv"), "folder '/dev/null' does not exist", ""),
        (("run", "--duration", "-inf"), "argument --duration: expected one argument", "written --flag=VALUE"),
        (("run", "--duration=-inf"), "argument --duration: '-inf'", RUN_FLAGS["--duration"]),
        (("run", "--bogus"), "unrecognized arguments: --bogus", ""),
        (("perf", "sideways"), "argument phase: invalid choice: 'sideways'", "choose from 'decode', 'prefill'"),
        (("perf", "decode", "--deployment", ""), "deployment = '': unknown", "(allowed: atlas-950-infer, "),
        (("perf", "decode", "--deployment", "nope"), "deployment = 'nope': unknown", "(allowed: "),
        (("perf", "decode", "--precision", "fp4"), "argument --precision: invalid choice: 'fp4'", "choose from"),
        (("perf", "decode", "--eplb", "magic"), "argument --eplb: invalid choice: 'magic'", "choose from"),
        (("topology", "--system", ""), "system = '': unknown", "(allowed: atlas-950-superpod, "),
        (("topology", "--system", "nope"), "system = 'nope': unknown", "(allowed: atlas-950-superpod, "),
        ((), "the following arguments are required: cmd", ""),
        (("fly",), "argument cmd: invalid choice: 'fly'", "choose from"),
        (("bench", "--load", "6"), "argument --load: '6'", RUN_FLAGS["--load"]),
        (("validate", "--strict"), "unrecognized arguments: --strict", ""),
    ]
    return rows


SURVEY = _survey()


def test_the_survey_covers_at_least_156_inputs():
    assert len(SURVEY) >= 156, len(SURVEY)


@pytest.mark.parametrize("args,needle,allowed", SURVEY, ids=[" ".join(r[0]) or "(none)" for r in SURVEY])
def test_bad_input_gives_one_line_and_status_2(args, needle, allowed):
    code, out, err = cli(*args)
    assert code == 2, (code, out[:200], err)
    assert out == ""
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert needle in err and allowed in err, err


# ---- correct results at the edges, strict JSON ------------------------------------------------
def _strict(text: str):
    def refuse(c):
        raise AssertionError(f"non-strict JSON constant {c}")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("args", [
    ("perf", "decode", "--batch", "1e-9", "--prompt", "1", "--output", "1"),
    ("perf", "decode", "--batch", "1", "--kv", "601381"),             # the longest KV one die holds
    ("perf", "prefill", "--prompt", "1000000", "--tokens-per-npu", "1"),
    ("perf", "prefill", "--prompt", "1", "--tokens-per-npu", "1048576", "--reuse", "0.999999"),
    ("perf", "decode", "--deployment", "qwen3-235b-cloudmatrix", "--no-mtp", "--batch", "122"),
])
def test_perf_at_the_bounds_prints_strict_json(args):
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    d = _strict(out)
    assert d["step_time_ms"] > 0 and d["tokens_per_s_per_npu"] >= 0


@pytest.mark.parametrize("args,message", [
    (("--batch", "8192", "--kv", "2000000"), "error: kv = 2e+06: one sequence's KV cache does not fit on a die "
     "of cloudmatrix-infer-paper (allowed: a KV length <= 601381 tokens, from --kv or --prompt + --output / 2)"),
    (("--batch", "1", "--kv", "601382"), "error: kv = 601382: one sequence's KV cache does not fit"),
    (("--batch", "1", "--prompt", "1000000", "--output", "1000000"), "error: kv = 1.5e+06: one sequence's"),
    (("--deployment", "qwen3-235b-cloudmatrix", "--no-mtp", "--batch", "8192"),
     "error: batch = 8192: the KV cache of 4224 tokens per sequence fits at most 122 sequences per chip on "
     "qwen3-235b-cloudmatrix (allowed: --batch <= 122, or a shorter --kv)"),
])
def test_perf_refuses_a_batch_whose_kv_does_not_fit(args, message):
    code, out, err = cli("perf", "decode", *args, "--json")
    assert (code, out) == (2, "") and len(err.splitlines()) == 1 and err.startswith(message), err


def test_strict_json_refuses_a_non_finite_value_by_name():
    from twin.cli.args import dumps
    assert dumps({"a": [1.5, None]}) == '{\n  "a": [\n    1.5,\n    null\n  ]\n}'
    with pytest.raises(ValueError, match=r"output: a value is not finite at slo\.tpot_ms"):
        dumps({"step": 1.0, "slo": {"tpot_ms": float("inf")}})
    with pytest.raises(ValueError, match=r"not finite at rows\.1"):
        dumps({"rows": [0.0, float("nan")]})


def test_a_short_duration_runs_that_long_not_600_s():
    d = cli_json("run", "--scenario", "paper-decode", "--duration", "0.5")
    assert d["sim_seconds"] == 0.5


def test_bench_with_a_short_duration_reports_a_positive_speedup():
    d = cli_json("bench", "--duration", "0.5")
    assert d["sim_seconds"] == 0.5 and d["speedup"] > 0 and d["wall_seconds"] >= 0


def test_cache_capacity_accepts_bytes_and_names(tmp_path):
    for v in ("2e12", "1", "unlimited", "default"):
        code, out, err = cli("run", "--scenario", "paper-decode", "--duration", "0.5", "--cache-capacity", v, "--json")
        assert code == 0, (v, err)
        _strict(out)


def test_out_into_an_existing_folder_writes_all_four_files(tmp_path):
    path = tmp_path / "run.csv"
    d = cli_json("run", "--scenario", "paper-decode", "--duration", "2", "--out", str(path))
    assert d["out"] == str(path)
    for suffix in ("", ".intervals", ".links", ".dies"):
        assert (tmp_path / f"run{suffix}.csv").stat().st_size > 0


# ---- trace files through the CLI ----------------------------------------------------------------
def _mooncake_row(t_ms, i=600):
    return json.dumps({"timestamp": t_ms, "input_length": i, "output_length": 4,
                       "hash_ids": list(range(-(-i // 512)))})


def test_out_of_order_trace_is_sorted_with_the_promised_note(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join([_mooncake_row(2000), _mooncake_row(0), _mooncake_row(1000)]) + "\n")
    code, out, err = cli("run", "--trace", str(p), "--duration", "5", "--json")
    assert code == 0, err
    note = f"{p}: rows were not in arrival order (1 step(s) back in time); sorted stably by timestamp"
    assert err == f"note: {note}\n"
    d = _strict(out)
    assert d["trace_notes"] == [note] and d["requests"]["arrived"] == 3


def test_in_order_trace_has_no_note(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join([_mooncake_row(0), _mooncake_row(1000)]) + "\n")
    code, out, err = cli("run", "--trace", str(p), "--duration", "5", "--json")
    assert code == 0 and err == "" and "trace_notes" not in _strict(out)


@pytest.mark.parametrize("content,needle", [
    ("[" * 100_000 + "\n", "line 2: JSON nested too deeply; each line must be one flat JSON object "
                           "with timestamp, input_length, output_length, hash_ids"),
    ('{"x": "' + "a" * (1 << 20) + '"}\n', "line 2: line is 1,048,585 characters long (at most 1,048,576)"),
    (b"\xff\xfe\x00\x80garbage\n", "line 2: not UTF-8 text (binary data?)"),
    ('{"timestamp": NaN, "input_length": 600, "output_length": 4, "hash_ids": [0, 1]}\n',
     "line 2: timestamp = nan: must be a number of milliseconds 0..1e+12"),
    ('{"timestamp": 0, "input_length": Infinity, "output_length": 4, "hash_ids": [0, 1]}\n',
     "line 2: input_length = inf: must be an integer >= 1 (and <= 2147483647)"),
    ('{"timestamp": 0, "input_length": 600, "output_length": "4", "hash_ids": [0, 1]}\n',
     "line 2: output_length = '4': must be an integer >= 1 (and <= 2147483647)"),
    ('{"timestamp": 0, "input_length": ' + "9" * 5000 + ', "output_length": 4, "hash_ids": []}\n',
     "line 2: a JSON number has too many digits"),
], ids=["nested", "long-line", "binary", "nan", "inf", "wrong-type", "huge-int"])
def test_bad_trace_lines_name_file_and_line_or_are_skipped_when_lenient(tmp_path, content, needle):
    p = tmp_path / "t.jsonl"
    good = (_mooncake_row(0) + "\n").encode()
    p.write_bytes(good + (content if isinstance(content, bytes) else content.encode()) + good)
    code, out, err = cli("run", "--trace", str(p), "--duration", "2")
    assert code == 2 and err == f"error: {p} {needle}\n"
    code, out, err = cli("run", "--trace", str(p), "--duration", "2", "--lenient", "--json")
    assert code == 0, err
    d = _strict(out)
    assert d["trace_rows_skipped"] == 1 and d["requests"]["arrived"] == 2


def test_a_trace_larger_than_the_limit_is_refused_unread(tmp_path, monkeypatch):
    from twin.workload import tracefile
    monkeypatch.setattr(tracefile, "MAX_TRACE_BYTES", 1000)
    p = tmp_path / "big.jsonl"
    p.write_text((_mooncake_row(0) + "\n") * 20)
    code, out, err = cli("run", "--trace", str(p), "--duration", "1")
    assert code == 2 and err == f"error: {p}: larger than 1,000 bytes (the most a trace file may be)\n"


# ---- fault files through the CLI ----------------------------------------------------------------
FAULT = '[[fault]]\nat_s = 5\nkind = "node"\ntarget = "n20"\n'


@pytest.mark.parametrize("text,needle", [
    ("", "bad.toml: no faults (add a [[fault]] table"),
    ('scenario = "paper-decode"\n', "bad.toml: no faults"),
    ("random = {hours_per_sim_s = 0}\n", "bad.toml: no faults"),
    ('duration_s = 5\n' + FAULT, "bad.toml: fault 1: at_s = 5 is not before the end of the run (duration_s = 5)"),
    (FAULT.replace('"node"', '"meteor"'), "bad.toml: fault 1: kind = 'meteor': allowed npu_die, npu"),
    (FAULT.replace('"n20"', '""'), "bad.toml: fault 1: target = '': required, a part name such as 'n20'"),
    (FAULT + "speed = 3\n", "bad.toml: fault 1: unknown field(s) speed (allowed: kind, target, at_s"),
    (FAULT + "factor = nan\n", "bad.toml: fault 1: factor = nan: allowed a finite number"),
    (FAULT + 'duration_s = "long"\n', "bad.toml: fault 1: duration_s = 'long': allowed a finite number"),
    ("seed = -1\n" + FAULT, "bad.toml: seed = -1: allowed an integer >= 0"),
    ("duration_s = inf\n" + FAULT, "bad.toml: duration_s = inf: allowed a number of seconds > 0"),
    ('scenario = ""\n' + FAULT, "bad.toml: scenario = '': allowed a scenario name"),
    ("a = " + "[" * 5000 + "\n", "bad.toml: "),
    ("".join(f"[[fault]]\nat_s = {i}\nkind = 'node'\ntarget = 'n20'\n" for i in range(1001)),
     "bad.toml: 1001 faults: allowed at most 1,000 per file"),
], ids=["empty", "only-scenario", "random-off", "after-end", "kind", "target", "unknown-field", "nan",
        "wrong-type", "seed", "duration", "scenario", "nested", "too-many"])
def test_bad_fault_files_are_refused_in_one_line(tmp_path, text, needle):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    code, out, err = cli("run", "--faults", str(p), "--duration", "30")
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {needle}"), err


def test_a_fault_after_a_shortened_run_is_refused():
    # the demo's fault lands at 120 s; a 60 s run would end before it and report nothing about it
    code, out, err = cli("run", "--faults", "optical-flap", "--duration", "60")
    assert code == 2
    assert err == ("error: optical-flap.toml: fault 1 at_s = 120 s is not before the end of the run "
                   "(duration_s = 60 s); allowed 0 <= at_s < duration_s (raise --duration or move the fault)\n")


def test_binary_fault_file_is_refused(tmp_path):
    p = tmp_path / "bin.toml"
    p.write_bytes(b"\xff\xfe\x00garbage")
    code, out, err = cli("run", "--faults", str(p))
    assert (code, err) == (2, "error: bin.toml: not UTF-8 text (byte 0); a fault file is TOML\n")


# ---- no hang on a FIFO, no memory blow-up on /dev/zero (a real process, with a timeout) ----------
@pytest.mark.parametrize("flag", ["--trace", "--faults"])
def test_fifo_is_refused_without_waiting_for_a_writer(tmp_path, flag):
    import os
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    p = subprocess.run([sys.executable, "-m", "twin", "run", flag, str(fifo)], cwd=ROOT,
                       capture_output=True, text=True, timeout=30)
    what = "trace file" if flag == "--trace" else "fault file"
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == f"error: {fifo}: is a FIFO (named pipe); a {what} must be a regular file\n"


def test_dev_zero_as_trace_is_refused_quickly():
    p = subprocess_cli("run", "--trace", "/dev/zero", "--duration", "1")
    assert p.returncode == 2
    assert p.stderr == "error: /dev/zero: is a character device; a trace file must be a regular file\n"


def test_a_trace_file_in_the_current_folder_is_read_as_a_path(tmp_path, monkeypatch):
    (tmp_path / "mine.trace").write_text(_mooncake_row(0) + "\n")
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("run", "--trace", "mine.trace", "--duration", "1", "--json")
    assert code == 0, err
    assert _strict(out)["requests"]["arrived"] == 1


# ---- scenario overrides (the CLI and the dashboard share load_scenario) --------------------------
@pytest.mark.parametrize("scenario,overrides,message", [
    (["x"], {}, "scenario = ['x']: allowed a scenario name (default, "),
    ("default", {"cache_capacity": "inf"}, "cache_capacity = 'inf': allowed a number of bytes 1 to 1e+18"),
    ("default", {"cache_capacity": True}, "cache_capacity = True: allowed a number of bytes"),
    ("default", {"rate": float("nan")}, "scenario [default].rate = nan: Input should be a finite number "
                                        "(allowed: > 0 and <= 100000)"),
    ("default", {"diurnal_period_s": float("inf")}, "diurnal_period_s = inf: Input should be a finite number"),
    ("default", {"speedup": 1e-4}, "speedup = 0.0001: Input should be greater than or equal to 0.001"),
    ("default", {"input": {"kind": "fixed", "value": float("nan")}}, "input.value = nan"),
])
def test_scenario_overrides_are_refused_by_name(scenario, overrides, message):
    from twin.model.config import CatalogError
    from twin.engine.scenario import load_scenario
    with pytest.raises(CatalogError) as exc:
        load_scenario(scenario, **overrides)
    assert message in str(exc.value)


def test_cache_capacity_as_a_numeric_string_is_bytes():
    from twin.engine.scenario import load_scenario
    assert load_scenario("default", cache_capacity="2e12").cache_capacity == 2e12
