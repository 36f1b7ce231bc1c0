"""twin/cloud: the training step, the co-pool scheduler's switch costs and SLO guards (exact, on a
constant-time predictor), the day's cost arithmetic and the CLI."""
import json
import math

import numpy as np
import pytest

from twin.cli.main import main
from twin.cloud.copool import HOLD, CoPool, load_params
from twin.cloud.cost import day_report, load_prices, peak_load
from twin.cloud.training import TrainingJob, compare
from twin.model.config import CatalogError
from twin.engine import Engine
from twin.engine.requests import DONE
from twin.engine.source import SyntheticSource
from twin.predict.constant import ConstantPredictor
from twin.workload import LengthDist

PREFILL_S, DECODE_S = 1.0, 0.05


@pytest.fixture
def const():
    """Every prefill batch takes PREFILL_S and every decode step DECODE_S, whatever their shape."""
    return lambda dep: ConstantPredictor(dep, prefill_ms=PREFILL_S * 1e3, decode_ms=DECODE_S * 1e3)


def _pool(predictor=None, policy="copool", duration=60.0, **kw) -> CoPool:
    eng = Engine("copool-day", seed=3, duration_s=duration,
                 predictor=predictor("cloudmatrix-pooled") if predictor else None)
    kw.setdefault("train_from_h", 20)              # a night window (day_start_h 6: t = 0 is 06:00)
    kw.setdefault("train_to_h", 10)
    return CoPool(eng, load_params(policy=policy, **kw), TrainingJob(eng.scenario.deployment))


# ---- capacity, switch cost --------------------------------------------------------------------
def test_capacity_per_npu_is_the_predictors(const):
    pool = _pool(const)
    # prefill: 16,384 tokens per NPU per second over 4,096-token prompts; decode: batch 96 per NPU
    # (the deployment's cap; the constant TPOT meets the SLO), 1.7 tokens per step, 255 more tokens
    assert pool.cap.prefill_rps == 16384 / 4096
    assert pool.cap.decode_rps == pytest.approx(96 * 1.7 / DECODE_S / 255, rel=1e-12)
    assert pool.capacity_rps() == pytest.approx(min(288 * 4.0, 96 * 96 * 1.7 / DECODE_S / 255), rel=1e-12)


def test_a_switch_holds_the_group_out_of_both_pools_for_exactly_the_switch_time(const):
    pool = _pool(const, policy="inference-only")
    eng = pool.eng
    assert pool.compression == 86400 / 600
    assert pool.switch_day_s == 5.0 + 60.0           # weights from EMS (ref 3: ~5 s) + hand-over
    sim = 65.0 / 144
    eng.advance(1.5)
    g = pool.groups[17]                              # prefill-17: a batch of 24 since t = 1.06, 12 waiting
    running, waiting = np.array(g.inst.running), np.array(g.inst.queue)
    assert (len(running), len(waiting)) == (24, 12)
    assert (eng.req.prefill_start[running] == 1.06).all()
    pool.lend(g, "test")
    w = pool.switches[-1]
    assert (w["finishing"], w["handed_over"], w["migrated"]) == (24, 12, 0)
    assert g.state == "draining" and not g.inst.alive and HOLD in g.inst.down
    assert (eng.req.instance[waiting] != g.inst.idx).all() and not g.inst.queue   # queue passed on
    eng.advance(0.55)
    assert g.state == "draining"                     # its batch runs to its end at 2.06
    eng.advance(0.03)
    assert g.state == "to_training"
    assert 0.56 <= w["drain_s"] <= 0.57 + 1e-9       # the batch's end, seen at the next 10 ms poll
    t_drained = 1.5 + w["drain_s"]
    assert (eng.req.prefill_end[running] == 2.06).all()          # finished where it was, once
    assert (eng.req.requeued[np.concatenate([running, waiting])] == 0).all()
    eng.advance(t_drained + sim - 1e-6 - eng.env.now)
    assert g.state == "to_training"
    eng.advance(2e-6)
    assert g.state == "training" and not g.inst.alive
    pool.reclaim(g, "test")
    eng.advance(sim - 1e-6)
    assert g.state == "to_serving" and not g.inst.alive
    eng.advance(2e-6)
    assert g.state == "serving" and g.inst.alive and HOLD not in g.inst.down
    acc = pool.npu_seconds()                         # two switches of 16 NPUs, each exactly `sim`
    assert acc["switching"] == pytest.approx(2 * 16 * sim, rel=1e-9)
    assert acc["training"] == pytest.approx(16 * 1e-6, abs=1e-9)   # trained from drain + sim to + 1e-6
    assert acc["prefill"] == pytest.approx(288 * eng.env.now - 16 * (2 * sim) - acc["training"], rel=1e-12)
    assert sum(acc.values()) == pytest.approx(384 * eng.env.now, rel=1e-12)
    eng.advance(20)
    assert eng.audit()["lost"] == 0 and eng.audit()["conserved"]


def test_a_lent_decode_group_migrates_its_sequences_kv_and_they_finish_elsewhere(const):
    pool = _pool(const, policy="inference-only")
    eng = pool.eng
    eng.advance(1.5)
    g = pool.groups[20]                              # decode-2: 5 sequences decoding
    assert g.inst.name == "decode-2"
    ids = g.inst.ids.copy()
    g.inst.sync()
    made = eng.req.generated[ids].copy()
    assert len(ids) == 5 and (made >= 1).all()
    pool.lend(g, "test")
    w = pool.switches[-1]
    tokens = int((eng.req.input[ids] + made).sum())
    assert (w["finishing"], w["handed_over"], w["migrated"]) == (0, 0, 5)
    assert w["migrated_gb"] == round(tokens * eng.kv_bytes / 1e9, 3)
    assert len(g.inst.ids) == 0 and g.state == "draining"
    eng.advance(0.1)
    assert g.state == "to_training" and w["drain_s"] <= 0.02    # the KV crosses UB in milliseconds
    assert set(eng.req.instance[ids]) <= {0, 1}      # resumed on decode-0 and decode-1
    eng.advance(20)
    assert (eng.req.state[ids] == DONE).all()
    assert (eng.req.requeued[ids] == 0).all() and (eng.req.recomputed[ids] == 0).all()
    assert (eng.req.generated[ids] == eng.req.output[ids]).all()
    assert eng.audit()["lost"] == 0 and eng.audit()["conserved"]


def test_switch_time_follows_the_weight_source_and_handover():
    assert _pool(policy="inference-only", weights_from="obs", handover_s=0).switch_day_s == \
        pytest.approx(671e9 / (2.5e9 * 671e9 / 2.5e9 / 320), rel=1e-12)      # ref 3: ~320 s from OBS


# ---- the policy: lending in training units, SLO and load guards ---------------------------------
def test_lend_plan_reaches_the_training_minimum_exactly(const):
    pool = _pool(const)
    assert pool.min_npus == 112                      # 671B x 16 B / (64 GB x 0.75) -> 224 dies, 7 x EP32
    pool.decide(rate=400.0, slo=1.0)
    # capacity after lending must stay above 400 / 0.6 = 666.7 req/s: decode has more spare capacity
    # first (1,228.8 vs 1,152), then prefill while it has more; 32 + 5 x 16 = 112 NPUs, then stop
    assert [w["group"] for w in pool.switches] == ["decode-2", "prefill-17", "prefill-16", "prefill-15",
                                                   "prefill-14", "prefill-13"]
    assert sum(w["npus"] for w in pool.switches) == 112


def test_no_lend_when_the_training_minimum_cannot_be_reached(const):
    pool = _pool(const)
    pool.decide(rate=650.0, slo=1.0)                 # only 96 NPUs could go below 60% load
    assert pool.switches == []


def test_slo_guard_refuses_to_lend_and_takes_a_group_back(const):
    pool = _pool(const)
    pool.decide(rate=100.0, slo=0.98)                # below the 0.99 target: nothing lent
    assert pool.switches == []
    pool.decide(rate=100.0, slo=1.0)                 # the job's minimum at once: 112 NPUs
    pool.decide(rate=100.0, slo=1.0)                 # then one more group: 128
    lent = len(pool.switches)
    pool.eng.advance(1.0)                            # the switches complete
    assert pool.training_npus() == 128
    pool.decide(rate=100.0, slo=0.98)
    assert len(pool.switches) == lent + 1
    # prefill limits serving (192 NPUs x 4 = 768 < 64 x 12.8 = 819.2 req/s): a prefill group comes back
    assert pool.switches[-1] == {**pool.switches[-1], "to": "serving", "npus": 16.0,
                                 "reason": "SLO attainment 98.0% below 99.0%"}
    assert pool.training_npus() == 112


def test_no_lending_for_the_cooldown_after_a_take_back(const):
    pool = _pool(const, train_from_h=0, train_to_h=24)
    pool.decide(rate=100.0, slo=1.0)
    pool.decide(rate=100.0, slo=1.0)
    pool.eng.advance(1.0)
    pool.decide(rate=100.0, slo=0.5)                 # one group back at t = 1
    n = len(pool.switches)
    pool.eng.advance(2 / 24 * 600 - 1e-6)            # cooldown: 2 h of the 600 s day = 50 s
    pool.decide(rate=100.0, slo=1.0)
    assert len(pool.switches) == n
    pool.eng.advance(2e-6)
    pool.decide(rate=100.0, slo=1.0)
    assert len(pool.switches) == n + 1 and pool.switches[-1]["to"] == "training"


def test_load_guard_returns_the_whole_job_below_its_minimum(const):
    pool = _pool(const)
    pool.decide(rate=400.0, slo=1.0)                 # exactly 112 NPUs lent (see above)
    pool.eng.advance(1.0)
    pool.decide(rate=700.0, slo=1.0)                 # 700 / 416 NPUs' capacity > 80%
    back = [w for w in pool.switches if w["to"] == "serving"]
    assert len(back) == 6
    assert back[0]["reason"].endswith("the job stops below its minimum")


def test_outside_the_window_groups_come_back_one_per_decision(const):
    pool = _pool(const, train_from_h=6, train_to_h=6.5)
    pool.decide(rate=100.0, slo=1.0)
    n = len(pool.switches)
    assert n == 6                                    # the job's minimum at once (112 NPUs)
    pool.eng.advance(0.5)
    pool.decide(rate=100.0, slo=1.0)
    assert len(pool.switches) == n + 1               # grows one group at a time once running
    pool.eng.advance(12.0)                           # clock 6:28.8 -> past 6:30
    assert not pool.in_window()
    pool.decide(rate=100.0, slo=1.0)
    assert pool.switches[-1] == {**pool.switches[-1], "to": "serving", "reason": "outside the training window"}
    assert len(pool.switches) == n + 2


def test_dedicated_split_trains_all_day_with_exact_steps(const):
    pool = _pool(const, policy="dedicated", duration=20.0)
    pool.eng.advance(20.0)
    assert pool.switches == [] and pool.training_npus() == 6 * 16 + 32
    step = pool.job.step(128)["step_s"]
    assert len(pool.timeline) == 19                  # intervals closed before t = 20 (the run stops there)
    assert pool.steps == pytest.approx(19 * 144 / step, rel=1e-12)


def test_dedicated_split_must_leave_the_minimum_serving():
    with pytest.raises(ValueError, match="dedicated_prefill_groups = 17: allowed 0..16"):
        _pool(policy="dedicated", dedicated_prefill_groups=17)


@pytest.mark.parametrize("field,value,message", [
    ("lend_below", 0, "copool.lend_below = 0"), ("control_s", 1e9, "copool.control_s = 1000000000.0"),
    ("policy", "greedy", "copool.policy = 'greedy'"), ("weights_from", "disk", "copool.weights_from")])
def test_bad_params_name_the_field(field, value, message):
    with pytest.raises(CatalogError, match=message.replace(".", r"\.").replace("(", r"\(")):
        load_params(**{field: value})


def test_empty_training_window_is_refused():
    with pytest.raises(CatalogError, match="train_to_h = 3.0: must differ from train_from_h"):
        load_params(train_from_h=3, train_to_h=3)


# ---- cost --------------------------------------------------------------------------------------
def test_cost_arithmetic_on_an_inference_only_run(const):
    pool = _pool(const, policy="inference-only", duration=10.0)
    pool.eng.advance(10.0)
    r = day_report(pool, load_prices(idle_power_share=1.0, pue=1.0))
    span = len(pool.timeline) * 144                  # day-clock seconds of the closed intervals
    kwh = 1.456 * 384 * span / 3600                  # every NPU at full power: ref 1 559 kW / 384
    capex = 8e6 / (4 * 365 * 86400) * span
    tokens = sum(x["output_tokens"] for x in pool.timeline) * 144
    assert r["energy_kwh_per_day"] == pytest.approx(kwh * 86400 / span, abs=0.05)
    assert r["cost_usd_per_day"]["capex"] == pytest.approx(8e6 / (4 * 365), abs=0.005)
    assert r["cost_per_million_tokens"] == pytest.approx((capex + kwh * 0.1) / tokens * 1e6, abs=1e-4)
    assert r["cost_per_training_step"] is None and r["training_steps"] == 0
    assert r["utilisation"]["training"] is None


def test_peak_load_averages_over_the_window():
    tl = [{"arrival_rps": a, "serving_capacity_rps": c} for a, c in ((10, 20), (30, 20), (20, 20), (0, 0))]
    assert peak_load(tl, 2) == 1.25                  # windows: 40 / 40, 50 / 40, 20 / 20
    assert peak_load(tl, 1) == 1.5
    assert peak_load(tl[:1], 2) == 0.0


def test_bad_price_names_the_field():
    with pytest.raises(CatalogError, match=r"prices\.pue = 5"):
        load_prices(pue=5)


# ---- training ----------------------------------------------------------------------------------
def test_allreduce_on_ub_is_one_ring_at_the_measured_bandwidth():
    pm = TrainingJob().pm
    n, nbytes = 256, 1e9
    assert pm.allreduce_seconds(nbytes, n) == pytest.approx(
        2 * 255 / 256 * nbytes / 135e9 + 2 * 255 * 1.9e-6, rel=1e-12)
    assert pm.allreduce_seconds(nbytes, 1) == 0.0


def test_allreduce_on_a_cluster_is_nvlink_then_rdma():
    pm = TrainingJob("deepseek-h800").pm
    fab, k = pm.fabric(), pm.k["nvlink_rdma"]
    nbytes = 1e9
    nvl = 2 * 7 / 8 * nbytes / (fab.nvlink_gbps * 1e9 * k["nvlink_efficiency"])
    assert pm.allreduce_seconds(nbytes, 8) == pytest.approx(nvl, rel=1e-12)          # one NVLink domain
    rdma = 2 * 3 / 4 * nbytes / 8 / (fab.rdma_gbps * 1e9 * k["rdma_efficiency"]) + 2 * 3 * fab.rdma_latency_us * 1e-6
    assert pm.allreduce_seconds(nbytes, 32) == pytest.approx(nvl + rdma, rel=1e-12)  # 4 domains


def test_training_step_shape_and_mfu():
    job = TrainingJob()
    assert job.step(111) is None                     # the model states do not fit
    a, b = job.step(128), job.step(256)
    assert a["tokens_per_step"] == b["tokens_per_step"] == 4 * 1024 * 1024
    assert b["step_s"] < a["step_s"]
    for r in (a, b):
        assert 0 < r["mfu"] < r["mfu_compute_only"] < 1
        bd = r["breakdown_s"]
        assert r["step_s"] == pytest.approx(bd["compute"] + bd["all_to_all_exposed"]
                                            + bd["all_reduce_exposed"] + bd["optimizer"], abs=5e-4)


def test_communication_costs_more_utilisation_over_rdma_than_over_ub():
    rows = compare(256)["systems"]
    ub, gpu = rows["cloudmatrix-pooled"], rows["deepseek-h800"]
    lost = lambda r: r["mfu_compute_only"] - r["mfu"]
    assert lost(gpu) > lost(ub) > 0
    assert compare(256)["claims"]["large_scale_training_utilisation"]["after_communication"] == 0.52


# ---- the diurnal source keeps its phase across chunks --------------------------------------------
def test_live_diurnal_source_follows_the_sine_across_chunks():
    src = SyntheticSource(100.0, 0, dict(diurnal_amplitude=0.8, diurnal_period_s=120.0,
                                         input=LengthDist.fixed(16), output=LengthDist.fixed(4)))
    a = src.take(120.0).arrival
    peak, trough = ((a >= 30) & (a < 60)).sum(), ((a >= 90) & (a < 120)).sum()
    expect = 3000 + 80 * 120 / (2 * math.pi)         # integral of 100 (1 + 0.8 sin) over the quarter
    assert peak == pytest.approx(expect, rel=0.05)
    assert trough == pytest.approx(6000 - expect, rel=0.08)


# ---- CLI -----------------------------------------------------------------------------------------
def test_run_copool_day_json_reports_every_policy(capsys):
    assert main(["run", "--scenario", "copool-day", "--duration", "6", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert set(d["policies"]) == {"copool", "dedicated", "inference-only"}
    for r in d["policies"].values():
        assert {"utilisation", "training_steps", "switches", "cost_per_million_tokens"} <= set(r)
        assert "slo_attainment" in r["inference"] and "supernode" in r["utilisation"]
    assert d["policies"]["inference-only"]["training_steps"] == 0


@pytest.mark.parametrize("argv,message", [
    (["run", "--scenario", "copool-day", "--rate", "5"], "--rate: scenario 'copool-day' is a co-pool day"),
    (["cloud", "--pue", "5", "--duration", "1"], "prices.pue = 5.0"),
    (["cloud", "--lend-below", "abc"], "lend_below = 'abc': not a number"),
    (["cloud", "--policy", "dedicated", "--dedicated-decode-groups", "3", "--duration", "1"],
     "dedicated_decode_groups = 3: allowed 0..2")])
def test_cli_errors_are_one_line_with_status_2(capsys, argv, message):
    with pytest.raises(SystemExit) if "abc" in argv else _nothing():
        rc = main(argv)
        assert rc == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_dedicated_split_is_editable_on_the_cli(capsys):
    assert main(["cloud", "--policy", "dedicated", "--dedicated-prefill-groups", "4",
                 "--dedicated-decode-groups", "1", "--duration", "4", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)["policies"]["dedicated"]
    # 4 x 16 + 32 = 96 NPUs train from t = 0 (none switching): 96 of every 384 NPU-hours
    h = r["npu_hours"]
    assert h["training"] / (h["prefill"] + h["decode"] + h["training"]) == pytest.approx(96 / 384, abs=0.003)
    assert r["npu_hours"]["switching"] == 0 and r["switches"] == 0
    assert r["training_steps"] == 0          # below the job's 112-NPU minimum: the NPUs wait


# ---- live: the co-pool knobs as an engine command ---------------------------------------------
def _live(const):
    from twin.cloud import live
    eng = live.attach(Engine("copool-day", seed=3, predictor=const("cloudmatrix-pooled")))
    return eng, eng.extensions.get("copool"), live


def test_a_live_policy_change_moves_groups_through_drain_and_switch(const):
    eng, pool, live = _live(const)
    eng.advance(1.5)
    eng.submit(live.SetCoPool({"policy": "dedicated", "dedicated_prefill_groups": 2, "dedicated_decode_groups": 1}))
    eng.advance(0.0)
    lent = [w["group"] for w in pool.switches]
    assert lent == ["prefill-16", "prefill-17", "decode-2"]
    assert {g.inst.name: g.state for g in pool.lent()} == dict.fromkeys(lent, "draining")
    eng.advance(2.0)                                  # drained (a 1 s prefill batch at most), then 65 s / 144
    assert pool.training_npus() == 64
    assert eng.snapshot().cloud["npus"]["training"] == 64 and eng.snapshot().cloud["params"]["policy"] == "dedicated"
    eng.submit(live.SetCoPool({"policy": "inference-only"}))
    eng.advance(0.0)
    assert [w["to"] for w in pool.switches[3:]] == ["serving"] * 3 and pool.moves == 6
    assert pool.policy_moves == 6 and eng.snapshot().cloud["policy_moves"] == 6   # every move came from a change
    eng.advance(65 / 144 + 1e-6)
    assert pool.lent() == [] and all(g.inst.alive for g in pool.groups)
    eng.advance(10)
    assert eng.audit()["lost"] == 0 and eng.audit()["conserved"]


def test_live_commands_are_checked_when_built_and_when_they_land(const):
    eng, pool, live = _live(const)
    with pytest.raises(ValueError, match=r"copool\.nope: unknown knob"):
        live.SetCoPool({"nope": 1})
    with pytest.raises(ValueError, match=r"copool\.lend_below = 2"):
        live.SetCoPool({"lend_below": 2})
    with pytest.raises(ValueError, match=r"dedicated_prefill_groups = 17: allowed 0\.\.16"):
        live.check({"dedicated_prefill_groups": 17}, eng.snapshot().cloud)
    with pytest.raises(ValueError, match="does not run a co-pool day"):
        live.check({"policy": "copool"}, None)
    eng.submit(live.SetCoPool({"train_from_h": 3, "train_to_h": 3}))   # each fine, together empty
    eng.advance(0.0)
    assert pool.params.train_from_h == 0 and "copool refused: copool.train_to_h = 3.0" in eng.events[-1]["message"]
    plain = Engine("copool-day", seed=3, predictor=const("cloudmatrix-pooled"))
    assert plain.snapshot().cloud is None
    plain.submit(live.SetCoPool({"policy": "dedicated"}))
    plain.advance(0.0)
    assert "runs no co-pool day" in plain.events[-1]["message"]


def test_a_live_day_keeps_a_bounded_timeline(const):
    eng, pool, live = _live(const)
    pool.keep_rows = 5
    eng.advance(8.5)
    rows = eng.snapshot().cloud["timeline"]
    assert [r["t"] for r in rows] == [4.0, 5.0, 6.0, 7.0, 8.0]


# ---- comparisons whose verdict holds (issue 23 A) ---------------------------------------------

def _report(util, usd):
    return {"utilisation": {"supernode": util}, "cost_per_million_tokens": usd}


def test_a_comparison_runs_every_policy_under_every_seed_and_reports_each_run(monkeypatch):
    from twin.cloud import cost
    runs, ticks = [], []
    monkeypatch.setattr(cost, "run_day", lambda sc, p, seed, **kw: runs.append((p.policy, seed, kw)) or (None, p))
    monkeypatch.setattr(cost, "day_usage", lambda p: {"policy": p.policy})
    out = cost.comparison(40, {}, ticks.append, seeds=3)
    assert [(p, s) for p, s, _ in runs] == [(p, s) for s in range(3) for p in ("copool", "dedicated", "inference-only")]
    assert all(kw == {"duration_s": 40, "diurnal_period_s": 40} for *_, kw in runs)
    assert ticks == list(range(1, 10)) and out["dedicated"] == [{"policy": "dedicated"}] * 3
    assert cost.comparison_cost_s(40, seeds=3) == pytest.approx(3 * cost.comparison_cost_s(40, seeds=1))


def test_interval_is_a_student_t_95_percent_interval():
    from twin.cloud.cost import interval
    i = interval([1.0, 2.0, 3.0])
    assert i["mean"] == 2.0 and i["hi"] - 2.0 == pytest.approx(4.303 / 3 ** 0.5)
    assert interval([5.0]) == {"mean": 5.0, "lo": None, "hi": None, "n": 1}


def test_the_verdict_is_settled_only_when_the_paired_difference_excludes_zero():
    from twin.cloud.cost import verdict
    clear = {"copool": [_report(0.80, 1.00), _report(0.81, 1.02), _report(0.79, 0.99)],
             "dedicated": [_report(0.70, 1.10), _report(0.71, 1.12), _report(0.70, 1.08)]}
    v = verdict(clear)
    assert v["supernode_util"]["ahead"] == "copool" and v["usd_per_m_tokens"]["ahead"] == "copool"  # lower $ wins
    assert v["supernode_util"]["diff"]["mean"] == pytest.approx(0.0967, abs=1e-4)
    noisy = {"copool": [_report(0.80, 1.0), _report(0.60, 1.2), _report(0.72, 1.1)],
             "dedicated": [_report(0.70, 1.1), _report(0.70, 1.1), _report(0.70, 1.1)]}
    assert verdict(noisy)["supernode_util"]["ahead"] is None and verdict(noisy)["usd_per_m_tokens"]["ahead"] is None
    one = {"copool": [_report(0.9, 1.0)], "dedicated": [_report(0.7, 1.1)]}
    assert verdict(one)["supernode_util"]["ahead"] is None          # one seed settles nothing


def test_cli_day_lengths_prints_intervals_and_the_verdict(capsys, monkeypatch):
    from twin.cloud import cost
    monkeypatch.setattr(cost, "run_day", lambda sc, p, seed, **kw: (None, (p.policy, seed)))
    base = {"copool": 0.8, "dedicated": 0.7}
    monkeypatch.setattr(cost, "day_usage", lambda ps: {"u": base[ps[0]] + 0.01 * ps[1], "usd": 2 - base[ps[0]]})
    monkeypatch.setattr("twin.cli.cloud.priced", lambda u, pr: _report(u["u"], u["usd"]))
    assert main(["cloud", "--day-lengths", "60,120", "--seeds", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[0] == "60" and "81.0% [78.5%, 83.5%]" in out[1]
    assert out[1].endswith("util: copool; $/M: copool") and len(out) == 3
