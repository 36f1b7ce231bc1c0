"""The serving engine: agreement with the perf model, cache behaviour, conservation, determinism."""
import json

import numpy as np
import pytest

from twin.model.config import CatalogError
from twin.engine import Engine, command, list_scenarios
from twin.predict.perf import PerfModel
from twin.workload import default_trace_path, ideal_hit_ratio, load_trace

MOONCAKE = default_trace_path("mooncake_conversation")
needs_trace = pytest.mark.skipif(not MOONCAKE.exists(), reason="Mooncake trace not available")


def test_saturated_decode_matches_perf_model_within_3pct():
    eng = Engine("paper-decode", seed=1, load=1.6)
    eng.advance(80)
    h = eng.metrics.frame()
    steady = h[h.t > 30]
    batch = steady.decode_batch_per_npu.mean()
    ctx = 4096 + 256 / 2
    model = PerfModel("cloudmatrix-infer-paper").decode_step(batch, ctx).tokens_per_s_per_npu
    engine = steady.output_tps_per_npu.mean()
    assert batch == pytest.approx(eng.timing.decode_cap(eng.decode[0]) / 160, rel=1e-9)   # saturated
    assert engine == pytest.approx(model, rel=0.03)


@needs_trace
@pytest.mark.slow
def test_mooncake_unlimited_cache_reaches_ideal_hit_ratio():
    ideal = ideal_hit_ratio(load_trace(MOONCAKE))
    eng = Engine("mooncake-replay", cache_capacity="unlimited", speedup=4.0)
    eng.advance(1000)
    s = eng.summary()
    assert s["requests"]["completed"] == 12031
    assert s["cache"]["block_hit_ratio"] == pytest.approx(ideal, abs=1e-4)
    assert s["cache"]["block_hit_ratio"] == pytest.approx(0.366, abs=5e-4)


@needs_trace
@pytest.mark.slow
def test_finite_cache_hits_less_and_more_capacity_never_less():
    ratios = []
    for cap in (2e11, 1e12, 4e12):
        eng = Engine("mooncake-replay", cache_capacity=cap, speedup=4.0)
        eng.advance(1000)
        ratios.append(eng.summary()["cache"]["block_hit_ratio"])
    assert ratios[-1] < 0.366
    assert ratios == sorted(ratios) and ratios[0] < ratios[-1]


def test_conservation_at_every_snapshot():
    eng = Engine("bursty-chat", seed=3, duration_s=60)
    for _ in range(30):
        eng.advance(2.0)
        snap = eng.snapshot()
        k = snap.kpis
        assert k["arrived"] == k["completed"] + k["in_flight"] + k["rejected"]
        assert k["arrived"] > 0
    assert eng.req.counts()["completed"] > 0


def test_same_seed_same_summary_and_different_seed_differs():
    def run(seed, steps):
        eng = Engine("bursty-chat", seed=seed)
        for dt in steps:
            eng.advance(dt)
        return eng.summary()
    a = run(7, [10, 10, 10])
    b = run(7, [5, 25])        # chunking of advance() does not change the run
    c = run(8, [30])
    assert json.dumps(a) == json.dumps(b)
    assert json.dumps(a) != json.dumps(c)


def test_rate_command_replays_exactly():
    def run():
        eng = Engine("paper-prefill", seed=2)
        eng.advance(10)
        eng.submit(command("load", {"fraction": 0.3}))
        eng.advance(10)
        return eng.summary(), [c for _, c in eng.command_log]
    (a, log_a), (b, _) = run(), run()
    assert a == b
    assert log_a == [command("load", {"fraction": 0.3})]


def test_live_run_replays_from_its_command_log():
    """Commands land at whatever sim time the live loop reached; the log replays them exactly."""
    live = Engine("bursty-chat", seed=4)
    live.advance(3.7)
    live.submit(command("load", {"fraction": 0.9}))
    live.advance(5.2)
    live.submit(command("fault", {"kind": "l2", "target": "sp1/l2-3", "duration_s": 4}))
    live.advance(11.1)
    again = Engine.replay(live.scenario, live.command_log, live.sim_time)
    assert again.summary() == live.summary()
    assert again.fault_report() == live.fault_report()


@pytest.mark.parametrize("kind,args,message", [
    ("load", {"fraction": -1}, r"load = -1: allowed 0 < load <= 5"),
    ("load", {"fraction": True}, r"load = True: allowed"),
    ("rate", {"rate": float("nan")}, r"rate = nan: allowed 0 < rate"),
    ("rate", {"speed": 3}, r"rate: arguments speed \(allowed: rate\)"),
    ("policy", {"detect": 3}, r"policy: unknown field\(s\) detect"),
    ("random", {"hours_per_sim_s": 11}, r"random.hours_per_sim_s = 11"),
    ("fault", ["l2"], r"fault: allowed a table \{kind, target"),
    ("teleport", {}, r"command 'teleport': unknown \(allowed: rate, load, fault"),
])
def test_bad_command_is_refused_when_built(kind, args, message):
    with pytest.raises(ValueError, match=message):
        command(kind, args)


def test_command_the_engine_refuses_is_logged_and_engine_runs_on():
    """A fault target only the engine's topology can judge: refused at apply time, logged."""
    eng = Engine("paper-decode", seed=0)
    eng.submit(command("fault", {"kind": "npu_die", "target": "n99/npu0/d0"}))
    eng.advance(5)
    snap = eng.snapshot()
    errors = [e["message"] for e in snap.events if e["kind"] == "error"]
    assert len(errors) == 1 and errors[0].startswith("fault refused: fault target = 'n99/npu0/d0'")
    assert eng.command_log == []
    assert snap.sim_time == pytest.approx(5)
    eng.advance(5)
    assert eng.snapshot().kpis["completed"] > 0


def test_bad_options_give_clear_errors(tmp_path):
    with pytest.raises(CatalogError, match="scenario = 'nope'.*allowed"):
        Engine("nope")
    with pytest.raises(CatalogError, match="deployment.*unknown"):
        Engine("paper-decode", deployment="tiny")
    with pytest.raises(CatalogError, match="load = -0.5"):
        Engine("paper-decode", load=-0.5)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n'
                   '{"timestamp": 5, "input_length": -3, "output_length": 5, "hash_ids": [2]}\n')
    with pytest.raises(ValueError, match="line 2"):
        Engine(None, workload="trace", trace=str(bad))
    eng = Engine(None, workload="trace", trace=str(bad), lenient=True)
    assert any("skipped 1" in e["message"] for e in eng.events)


def test_requests_flow_through_every_stage_and_kv_goes_over_rdma():
    eng = Engine("paper-prefill", seed=0, load=0.5)
    eng.advance(30)
    snap = eng.snapshot()
    df = eng.req.frame()
    done = df[df.state == "done"]
    assert len(done) > 100
    assert (done.prefill_start >= done.arrival).all()
    assert (done.prefill_end > done.prefill_start).all()
    assert (done.finish >= done.first_token).all()
    assert snap.history["rdma_gbps"][-1] > 0 and snap.history["ub_gbps"][-1] > 0
    assert snap.link_util.max() > 0


def test_saturated_prefill_and_context_cache_speedup():
    """Overloaded prefill pools: throughput per NPU near the perf model, and 90% reuse through
    EMS gives about the paper's 2.28x (ref 3 context caching)."""
    tput = {}
    for name in ("paper-prefill", "paper-prefill-cache"):
        eng = Engine(name, seed=0, rate=400)
        eng.advance(60)
        h = eng.metrics.frame()
        tput[name] = h[h.t > 15].input_tps_per_npu.mean()
        assert h[h.t > 15].util_prefill.min() > 0.99
    model = PerfModel("cloudmatrix-infer-paper").prefill_batch(4096).tokens_per_s_per_npu
    assert tput["paper-prefill"] == pytest.approx(model, rel=0.06)
    assert tput["paper-prefill-cache"] / tput["paper-prefill"] == pytest.approx(2.28, rel=0.10)


@pytest.mark.slow
def test_scenarios_listed_and_all_start():
    names = [s["name"] for s in list_scenarios()]
    assert {"default", "paper-decode", "paper-prefill", "mooncake-replay"} <= set(names)
    for name in names:
        eng = Engine(name, seed=0)
        eng.advance(3)
        snap = eng.snapshot()
        assert snap.version == 1 and snap.sim_time == pytest.approx(3)
        assert np.isfinite(snap.link_util).all()


def test_run_reaches_until_in_slices_and_builds_no_snapshot(monkeypatch):
    """`run` is the one "advance until the end" loop: it stops exactly at `until`, one advance per
    slice, and no snapshot is built on the way (a caller that shows one asks for it)."""
    eng = Engine("paper-decode", seed=0)
    built = []
    monkeypatch.setattr(eng, "snapshot", lambda: built.append(1))    # this engine's only (live twins run on)
    eng.run(25.0, step=10.0)
    assert eng.sim_time == pytest.approx(25.0) and eng.version == 3 and built == []
    eng.run(25.0)
    assert eng.version == 3
    with pytest.raises(ValueError, match=r"run: step = 0: must be a finite number > 0"):
        eng.run(30.0, step=0)
