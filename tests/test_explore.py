"""Explorer sweeps: keys and bounds, one-line errors, engine and model rows, cache, seeds and CIs."""
import json

import pytest

from tests.test_cli import cli
from twin.model.config import catalog
from twin.explore import points
from twin.explore.rowcache import Cache
from twin.explore.evaluate import evaluate
from twin.explore.sweep import ci95, pareto, run_sweep, summarize

DEP, SC = "cloudmatrix-infer-paper", "paper-decode"


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TWIN_SWEEP_CACHE", str(tmp_path / "cache"))


# ---- keys, values and limits ---------------------------------------------------------------------
def test_parse_lists_and_ranges():
    assert points.parse_vary("load=0.5,0.9") == ("load", [0.5, 0.9])
    assert points.parse_vary("decode_ep=64:320:128") == ("decode_ep", [64, 192, 320])
    assert points.parse_vary("load=0.2:0.6:0.2") == ("load", [0.2, 0.4, 0.6])
    assert points.parse_vary("mtp=on,false") == ("mtp", [True, False])
    assert points.parse_vary("ems=ub,off") == ("ems", ["ub", "off"])


@pytest.mark.parametrize("arg, words", [
    ("bogus=1,2", ["--vary 'bogus'", "unknown key", "allowed:", "decode_ep"]),
    ("load=", ["--vary load", "empty value list"]),
    ("load=0.9:0.5:0.1", ["--vary load", "inverted range", "LO <= HI"]),
    ("load=0.1:0.5:0", ["step must be > 0"]),
    ("decode_ep=1:1000:1", ["1000 values", "at most 100"]),
    ("mtp=maybe", ["--vary mtp", "true or false"]),
    ("precision=fp4", ["--vary precision", "int8, bf16, fp8"]),
    ("load=0.5,0.5", ["repeated"]),
])
def test_bad_vary_is_one_line_exit_2(arg, words):
    code, out, err = cli("sweep", "--vary", arg, "--no-progress")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err


def test_values_checked_against_the_models_bounds_before_any_work():
    code, _, err = cli("sweep", "--vary", "load=0.5,9", "--no-progress")
    assert code == 2 and "load = 9" in err and "<= 5" in err, err
    code, _, err = cli("sweep", "--vary", "decode_ep=7", "--no-progress")
    assert code == 2 and "decode.ep = 7" in err and "divisor of 320" in err, err
    code, _, err = cli("sweep", "--vary", "precision=fp8", "--no-progress")
    assert code == 2 and "precision = 'fp8'" in err and "allowed: int8, bf16" in err, err
    code, _, err = cli("sweep", "--deployment", "deepseek-h800", "--scenario", "paper-prefill",
                       "--vary", "load=0.5", "--no-progress")
    assert code == 2 and "no prefill instance" in err and "paper-decode" in err, err


def test_model_source_needs_a_synthetic_workload():
    code, _, err = cli("sweep", "--scenario", "azure-conv", "--vary", "mtp=true", "--source", "model",
                       "--no-progress")
    assert code == 2 and "--source model" in err and "replays a trace" in err, err


def test_size_limits_stated():
    code, _, err = cli("sweep", "--vary", "load=0.1:5:0.1", "--vary", "decode_batch_per_die=1:48:1",
                       "--no-progress")
    assert code == 2 and f"at most {points.MAX_POINTS} per sweep" in err, err
    code, _, err = cli("sweep", "--vary", "load=0.1:5:0.1", "--seeds", "32", "--duration", "600",
                       "--no-progress")
    assert code == 2 and "simulated seconds" in err and f"{points.MAX_SIM_SECONDS:,}" in err, err
    code, _, err = cli("sweep", "--vary", "load=0.5", "--scheduler", "http://x", "--no-progress")
    assert code == 2 and "tcp://HOST:PORT" in err, err


def test_unreachable_scheduler_is_one_line():
    code, _, err = cli("sweep", "--vary", "load=0.5", "--scheduler", "tcp://127.0.0.1:1", "--no-progress")
    assert code == 2 and err.startswith("error: --scheduler tcp://127.0.0.1:1: unreachable"), err
    assert err.count("\n") == 1


def test_overrides_reach_the_deployment_and_scenario():
    base, dep, sc = points.configure(DEP, SC, {"decode_ep": 160, "mtp": False, "ems": "vpc", "output_len": 128,
                                          "load": 0.7})
    assert base == DEP and dep["decode"]["ep"] == 160 and dep["decode"]["dies_per_instance"] == 160
    assert dep["mtp"] is False and dep["cache_plane"] == "vpc"
    assert sc["output"] == {"kind": "fixed", "value": 128, "lo": 1, "hi": 8192, "mean": 4096.0,
                            "sigma": 0.5, "max": None}
    assert sc["load"] == 0.7 and sc["rate"] is None
    _, dep, _ = points.configure(DEP, SC, {"deployment": "hgx-b200-r1"})
    assert dep == catalog().deployment("hgx-b200-r1").model_dump()


def test_task_key_is_the_full_config():
    a = points.plan(DEP, SC, [("load", [0.5, 0.6])], seeds=2, duration_s=10)
    keys = {t.key for t in a}
    assert len(keys) == 4                                   # two points x two seeds
    assert [t.key for t in points.plan(DEP, SC, [("load", [0.5, 0.6])], seeds=2, duration_s=10)] == [t.key for t in a]
    assert points.plan(DEP, SC, [("load", [0.5])], duration_s=11)[0].key != a[0].key


def test_registered_deployment_is_removed_after_use():
    t = points.plan(DEP, SC, [("decode_ep", [160])], duration_s=5)[0]
    before = set(catalog().deployments)
    with points.registered(t) as name:
        assert name.startswith(f"{DEP}~") and catalog().deployment(name).decode.ep == 160
    assert set(catalog().deployments) == before


# ---- rows ----------------------------------------------------------------------------------------
def test_engine_row_is_deterministic_and_agrees_with_the_model_below_capacity():
    eng = points.plan(DEP, SC, [("load", [0.5])], duration_s=20)[0]
    r1, r2 = evaluate(eng), evaluate(eng)
    assert r1 == r2 and r1["source"] == "engine" and r1["seed"] == 0 and r1["chips"] == 160
    assert r1["slo_attainment"] == 1.0 and r1["goodput_per_chip"] == r1["tokens_per_s_per_chip"]
    mod = evaluate(points.plan(DEP, SC, [("load", [0.5])], source="model")[0])
    assert mod["source"] == "model" and mod["seed"] is None
    # below capacity both carry the offered load: the same tokens/s per chip within 2%
    assert r1["tokens_per_s_per_chip"] == pytest.approx(mod["tokens_per_s_per_chip"], rel=0.02)
    assert r1["tpot_ms_p50"] == pytest.approx(mod["tpot_ms_p50"], rel=0.05)


def test_model_row_overloaded_has_no_goodput():
    # a loose TPOT SLO: the largest batch (96/NPU) meets it, yet 1.5x capacity cannot be carried
    r = evaluate(points.plan(DEP, SC, [("load", [1.5]), ("tpot_slo_ms", [100.0])], source="model")[0])
    assert r["slo_attainment"] == 0.0 and r["goodput_per_chip"] == 0.0 and r["ttft_ms_p50"] is None
    assert 50 <= r["tpot_ms_p50"] <= 51      # TPOT at the batch cap of 96 per NPU (ref 4: 49.4 ms)


def test_engine_overload_misses_slos():
    r = evaluate(points.plan(DEP, SC, [("load", [1.5])], duration_s=20)[0])
    assert r["slo_attainment"] < 0.9 and r["goodput_per_chip"] < r["tokens_per_s_per_chip"]


# ---- sweep, cache, CIs ---------------------------------------------------------------------------
def test_cache_returns_identical_rows(tmp_path):
    tasks = points.plan(DEP, SC, [("load", [0.4, 0.8])], seeds=2, duration_s=10)
    tasks += points.plan(DEP, SC, [("load", [1.5])], source="model")      # None fields: seed, TTFT
    cache = Cache(tmp_path / "c")
    rows1, c1 = run_sweep(tasks, cache, workers=1, progress=False)
    rows2, c2 = run_sweep(tasks, cache, workers=1, progress=False)
    assert c1 == {"runs": 5, "cached": 0} and c2 == {"runs": 0, "cached": 5}
    assert rows1 == rows2 and rows2[-1]["seed"] is None and rows2[-1]["ttft_ms_p50"] is None
    assert len(list((tmp_path / "c").glob("*.parquet"))) == 5


def test_pool_equals_in_process():
    # the first point is the slowest (most requests), so the pool finishes them out of order
    tasks = points.plan(DEP, SC, [("load", [1.2, 0.1, 0.2, 0.3])], duration_s=20)
    a, _ = run_sweep(tasks, None, workers=1, progress=False)
    b, _ = run_sweep(tasks, None, workers=2, progress=False)
    assert a == b and [r["load"] for r in b] == [1.2, 0.1, 0.2, 0.3]


def test_ci95_exact():
    mean, half = ci95([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.302652729 * 1.0 / 3 ** 0.5, rel=1e-9)
    assert ci95([5.0]) == (5.0, None) and ci95([None]) == (None, None)


def test_summarize_and_pareto():
    rows = [{"deployment": "d", "scenario": "s", "source": "engine", "load": l, "seed": s,
             **{m: None for m in ("ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99", "slo_attainment")},
             "goodput_per_chip": g, "tokens_per_s_per_chip": g, "tokens_per_s_per_user": u}
            for l, s, g, u in ((0.5, 0, 100, 50), (0.5, 1, 110, 52), (0.9, 0, 200, 30), (0.9, 1, 220, 28))]
    pts = summarize(rows, ["load"])
    assert [p["load"] for p in pts] == [0.5, 0.9] and pts[0]["seeds"] == 2
    assert pts[0]["goodput_per_chip"] == 105 and pts[1]["tokens_per_s_per_user"] == 29
    assert pts[0]["goodput_per_chip_ci95"] == pytest.approx(12.706204736 * 7.0710678 / 2 ** 0.5, rel=1e-6)
    front = [{"tokens_per_s_per_user": x, "goodput_per_chip": y} for x, y in
             ((10, 5), (20, 4), (15, 3), (30, 1), (5, 5))]
    assert pareto(front) == [0, 1, 3]          # (15, 3) is beaten by (20, 4); (5, 5) ties (10, 5) on y


def test_sweep_json_rows_and_parquet_out(tmp_path):
    out = tmp_path / "rows.parquet"
    code, stdout, err = cli("sweep", "--vary", "load=0.5,0.9", "--vary", "mtp=true,false", "--seeds", "2",
                            "--duration", "10", "--workers", "1", "--out", str(out), "--json", "--no-progress")
    assert code == 0, err
    d = json.loads(stdout)
    assert len(d["rows"]) == 8 and len(d["points"]) == 4 and d["runs"] == 8
    need = {"load", "mtp", "seed", "goodput_per_chip", "tokens_per_s_per_chip", "tokens_per_s_per_user",
            "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99", "slo_attainment", "source"}
    assert need <= set(d["rows"][0]) and {r["source"] for r in d["rows"]} == {"engine"}
    assert [(r["load"], r["mtp"], r["seed"]) for r in d["rows"][:4]] == [
        (0.5, True, 0), (0.5, True, 1), (0.5, False, 0), (0.5, False, 1)]
    assert all(p["goodput_per_chip_ci95"] is not None for p in d["points"])
    import pandas as pd
    assert len(pd.read_parquet(out)) == 8


def _sleep_then(x):
    import time
    time.sleep(x)
    return x


def test_runner_keeps_input_order_when_work_finishes_out_of_order():
    from twin.explore.executor import run
    done = []
    assert run(_sleep_then, [1.5, 0.0, 0.1, 0.2], workers=2, progress=lambda n, t: done.append((n, t))) \
        == [1.5, 0.0, 0.1, 0.2]
    assert done == [(1, 4), (2, 4), (3, 4), (4, 4)]


def test_scheduling_policies_are_sweep_keys():
    from twin.engine.scheduling import DEFAULTS, REGISTRY
    for kind, default in DEFAULTS.items():
        assert points.parse_vary(f"{kind}={default}") == (kind, [default])
        _, _, sc = points.configure(DEP, SC, {kind: default})
        assert sc["scheduling"][kind] == default
    code, _, err = cli("sweep", "--vary", "placement=nope", "--no-progress")
    assert code == 2 and "--vary placement='nope'" in err and ", ".join(REGISTRY["placement"]) in err, err
