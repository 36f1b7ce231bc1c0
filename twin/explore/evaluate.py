"""One Task -> one row: measured on the engine, or from the perf model's steady state.

Engine rows measure one cohort: the requests arriving after a warm-up (queues and batches fill
first) until the end of the run; arrivals then stop and the engine drains, so every request of
the cohort is followed to its end (one still unfinished at the drain cap counts as missing its
SLO; one refused as overloaded misses it too: the table's sink gets even those refused without
a row). Model rows are the steady state of the perf model with no queueing: the decode batch that
carries the offered rate (Little's law), its TPOT, and one prefill batch as TTFT.
"""
from __future__ import annotations

import math

import numpy as np

from twin.engine import Engine, load_scenario
from twin.predict.perf import PerfModel
from twin.explore.points import Task, registered

WARMUP_FRACTION = 0.25    # assumption: the first quarter of a run is warm-up, not measured
DRAIN_CAP_S = 120.0       # assumption: a cohort request not finished 120 s after arrivals stop misses
METRICS = ("goodput_per_chip", "tokens_per_s_per_chip", "tokens_per_s_per_user", "ttft_ms_p50",
           "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99", "slo_attainment")
_COLS = ("arrival", "first_token", "finish", "output", "state")


def build_engine(task: Task) -> Engine:
    """The engine of a task, built with its deployment registered (not advanced)."""
    with registered(task) as name:
        return Engine(load_scenario(None, **{**{k: v for k, v in task.scenario.items() if v is not None},
                                             "deployment": name}))


def point_rate(scenario: str, deployment: str, load: float | None) -> float:
    """The arrival rate (req/s) of a point given as a load: load x the deployment's capacity."""
    eng = Engine(load_scenario(scenario, deployment=deployment, load=load))
    return (load if load is not None else eng.scenario.load) * eng.capacity_rps()


def chips(eng: Engine) -> float:
    """Accelerator packages the scenario uses (decode only, or prefill and decode)."""
    pools = eng.decode if eng.scenario.pipeline == "decode_only" else eng.prefill + eng.decode
    return float(sum(p.npus for p in pools))


def _round(v):
    return None if v is None or not math.isfinite(v) else round(float(v), 4)


def evaluate(task: Task) -> dict:
    """The row of one task (the function sent to pool and Dask workers)."""
    row = engine_row(task) if task.source == "engine" else model_row(task)
    return {**dict(task.point), "deployment": task.deployment, "scenario": task.scenario["name"],
            "seed": task.seed if task.source == "engine" else None, "source": task.source,
            **{k: _round(row.get(k)) for k in METRICS}, "chips": row["chips"],
            "requests": row["requests"], "key": task.key}


def engine_row(task: Task) -> dict:
    eng = build_engine(task)
    parts = []
    eng.req.sink = lambda df: parts.append(df.loc[:, list(_COLS)])
    t_end = task.duration_s
    eng.run(t_end)
    eng.drain(DRAIN_CAP_S)
    parts.append(eng.req.frame().loc[:, list(_COLS)])
    import pandas as pd                # here, not at the top: `python -m twin bench` need not load it
    df = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
    t0 = WARMUP_FRACTION * t_end
    c = df[(df["arrival"] >= t0) & (df["arrival"] < t_end)]
    done = (c["state"] == "done").to_numpy()
    out = c["output"].to_numpy()
    ttft = (c["first_token"].to_numpy() - c["arrival"].to_numpy()) * 1e3
    tpot = (c["finish"].to_numpy() - c["first_token"].to_numpy()) / np.maximum(out - 1, 1) * 1e3
    dep = eng.dep
    ok = done & (ttft <= dep.ttft_slo_ms) & ((tpot <= dep.tpot_slo_ms) | (out <= 1))
    n, window = chips(eng), t_end - t0
    pct = lambda a, q: float(np.percentile(a, q)) if len(a) else None
    multi = done & (out > 1)
    tpot50 = pct(tpot[multi], 50)
    return {"goodput_per_chip": out[ok].sum() / window / n,
            "tokens_per_s_per_chip": out[done].sum() / window / n,
            "tokens_per_s_per_user": 1e3 / tpot50 if tpot50 else None,
            "ttft_ms_p50": pct(ttft[done], 50), "ttft_ms_p99": pct(ttft[done], 99),
            "tpot_ms_p50": tpot50, "tpot_ms_p99": pct(tpot[multi], 99),
            "slo_attainment": ok.sum() / len(c) if len(c) else None,
            "chips": n, "requests": int(len(c))}


def model_row(task: Task) -> dict:
    """Steady state with no queueing; an offered rate beyond either pool's capacity is overloaded:
    throughput at capacity, TTFT unbounded (None), no goodput."""
    eng = build_engine(task)              # cheap without advancing: the offered rate and the pools
    sc, dep = eng.scenario, eng.dep
    pm = PerfModel(dep, eng.cat)
    rate = sc.rate or sc.load * eng.capacity_rps()
    inp, out = sc.input.mean_value(), sc.output.mean_value()
    kv = inp + out / 2
    dec_npus = float(sum(d.npus for d in eng.decode))
    cap_b = min(dep.decode.batch_per_die, pm.max_batch_per_die(kv)) * pm.dies_per_npu
    if cap_b < 1:
        raise ValueError(f"deployment {task.deployment}: no decode batch fits {kv:g}-token KV")
    thr = lambda b: pm.decode_step(b, kv).tokens_per_s_per_npu * dec_npus
    demand = rate * out
    overloaded = thr(cap_b) < demand
    lo, hi = 0.0, float(cap_b)
    if not overloaded:                  # smallest batch whose throughput carries the demand
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if thr(mid) >= demand else (mid, hi)
    step = pm.decode_step(hi, kv)
    served = thr(hi) if overloaded else demand
    if sc.pipeline == "full":
        pre = pm.prefill_batch(min(inp, 131072), reuse=min(sc.reuse_rate, 0.99))
        pre_rps = pre.tokens_per_s_per_npu * sum(p.npus for p in eng.prefill) / inp
        overloaded |= rate > pre_rps
        served = min(served, pre_rps * out)
        ttft = pre.ttft_ms + pm.kv_transfer_seconds(inp) * 1e3
    else:
        ttft = step.step_ms
    ok = not overloaded and ttft <= dep.ttft_slo_ms and step.tpot_ms <= dep.tpot_slo_ms
    n = chips(eng)
    return {"goodput_per_chip": served / n if ok else 0.0, "tokens_per_s_per_chip": served / n,
            "tokens_per_s_per_user": 1e3 / step.tpot_ms,
            "ttft_ms_p50": None if overloaded else ttft, "ttft_ms_p99": None if overloaded else ttft,
            "tpot_ms_p50": step.tpot_ms, "tpot_ms_p99": step.tpot_ms,
            "slo_attainment": 1.0 if ok else 0.0, "chips": n, "requests": None}
