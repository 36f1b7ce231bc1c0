"""What an engine reports as a whole: the metrics context of an interval, KPIs and per-die busy
fractions (its snapshot reporters), the run summary, per-link and per-die frames, and the request
lifecycle audit and drain. It reads the engine through the `ReportSource` port; the other snapshot
fields are declared by the parts that own them (twin.engine.registry)."""
from __future__ import annotations

import math

import numpy as np

from twin.engine.ports import ReportSource
from twin.engine.snapshot import DECODE_OP_CTX
from twin.engine.traffic import link_utilisation

DRAIN_CAP_S = 600.0       # a drain stops after this many simulated seconds (stated bound)
DECODE_TPS_GRID = 4        # decode model tok/s: batch-per-NPU grid, linear in between (assumption)


def reports(eng: ReportSource) -> dict:
    """Snapshot fields: the KPIs and each die's busy fraction."""
    return {"kpis": lambda: kpis(eng), "die_util": lambda: die_util(eng)}


def interval_context(eng: ReportSource) -> dict:
    """What Metrics.close needs from the engine at an interval's end."""
    eng.catch_up()
    for d in eng.decode:
        d.flush_inbox()
    dram, ssd = eng.ems.resident_bytes() if eng.ems else (0.0, 0.0)
    return {"ttft_slo_ms": eng.dep.ttft_slo_ms, "tpot_slo_ms": eng.dep.tpot_slo_ms,
            "prefill_npus": sum(p.npus for p in eng.prefill),
            "decode_npus": sum(d.npus for d in eng.decode),
            "ems_dram_bytes": dram, "ems_ssd_bytes": ssd,
            "queue_prefill": sum(len(p.queue) for p in eng.prefill),
            "queue_decode": sum(len(d.queue) for d in eng.decode),
            "decode_op_tps_per_npu": eng.decode_rate.op(), "decode_model_tps": eng.decode_rate}


class DecodeRate:
    """Model tok/s per decode NPU at a batch per NPU and DECODE_OP_CTX, healthy fabric: the
    predictor at batches on a 1/DECODE_TPS_GRID grid (memoised, at most the batch cap's worth of
    points), linear in between (grid points, such as the operating point, are exact; the error
    elsewhere is printed by tests/test_speed.py). Every interval reads it, and the predictor
    costs about 0.8 ms a call: one call per interval was 6% of a diurnal run."""

    def __init__(self, pm, dep):
        self.pm = pm
        self.op_batch = dep.decode.batch_per_die * pm.dies_per_npu    # the operating point: the batch cap
        self.memo: dict[int, float] = {}

    def __call__(self, batch_per_npu: float) -> float:
        memo = self.memo
        x = max(batch_per_npu, 0.0) * DECODE_TPS_GRID
        k = math.floor(x)
        lo = memo.get(k)
        if lo is None:
            lo = memo[k] = self.pm.decode_step(max(k / DECODE_TPS_GRID, 0.01), DECODE_OP_CTX).tokens_per_s_per_npu
        if x == k:
            return lo
        hi = memo.get(k + 1)
        if hi is None:
            hi = memo[k + 1] = self.pm.decode_step((k + 1) / DECODE_TPS_GRID, DECODE_OP_CTX).tokens_per_s_per_npu
        return lo + (hi - lo) * (x - k)

    def op(self) -> float:
        """Model tok/s per decode NPU at the deployment's operating point."""
        return self(self.op_batch)


def kpis(eng: ReportSource) -> dict:
    """Latest values over the last window of intervals, plus run totals."""
    m, req = eng.metrics, eng.req
    eng.catch_up()
    k = {key: m.window(key) for key in m.history}
    for i, name in enumerate(("ttft", "tpot")):
        arr = np.concatenate([r[i] for r in m.recent]) if m.recent else np.zeros(0)
        if len(arr):
            k[f"{name}_p50_ms"] = float(np.percentile(arr, 50))
            k[f"{name}_p99_ms"] = float(np.percentile(arr, 99))
    k.update(req.counts())
    t = m.running_totals()
    k["total_block_hit_ratio"] = t["hit_blocks"] / t["lookup_blocks"] if t["lookup_blocks"] else float("nan")
    k["sim_time"] = eng.env.now
    k["decode_op_tps_per_npu"] = eng.decode_rate.op()
    return k


def die_util(eng: ReportSource, dtype=np.float32) -> np.ndarray:
    """Busy fraction of each die over the last interval (its instance's)."""
    util = np.zeros(len(eng.die_pool), dtype=dtype)
    for inst in eng.instances:
        util[inst.dies] = eng.metrics.last_busy[inst.slot]
    return util


def link_frame(eng: ReportSource):
    """Per link over the last interval: ends, plane, kind, capacity, traffic and utilisation."""
    import pandas as pd     # pandas only for frames (the engine's hot path never needs it)
    la = eng.topo.link_arrays()
    util = link_utilisation(eng)
    cap = np.asarray(la.capacity_gbps, dtype=float)
    return pd.DataFrame({"u": [e[0] for e in la.ends], "v": [e[1] for e in la.ends],
                         "plane": [e[2] for e in la.ends], "kind": [e[3] for e in la.ends],
                         "capacity_gbps": cap, "traffic_gbps": util * cap, "util": util})


def die_frame(eng: ReportSource):
    """Per die over the last interval: pool and busy fraction."""
    import pandas as pd     # lazy, as above
    return pd.DataFrame({"die": eng.topo.die_ids, "pool": eng.die_pool,
                         "util": die_util(eng, float)})


def summary(eng: ReportSource) -> dict:
    """Run totals over every request so far (the CLI prints this)."""
    eng.catch_up()
    lat = eng.metrics.run_latency(eng.req, interval_context(eng))
    t, dur = eng.metrics.running_totals(), max(eng.env.now, 1e-9)
    pct = lambda h, q: None if h.n == 0 else round(h.quantile(q / 100), 3)
    a = audit(eng)
    completed = a["completed"]
    pre_npus = sum(p.npus for p in eng.prefill)
    dec_npus = sum(d.npus for d in eng.decode)
    skipped = getattr(getattr(eng.source, "workload", None), "skipped", 0)
    return {
        "scenario": eng.scenario.name, "deployment": eng.scenario.deployment,
        **({"trace_rows_skipped": skipped} if skipped else {}),
        "seed": eng.seed, "sim_seconds": round(eng.env.now, 3),
        "requests": a,
        **({"drain": eng.drained} if eng.drained is not None else {}),
        "prefill": {"tokens_per_s_per_npu": round(t["input_tokens"] / dur / pre_npus, 2) if pre_npus else 0.0,
                    "npus": pre_npus},
        "decode": {"tokens_per_s_per_npu": round(t["output_tokens"] / dur / dec_npus, 2),
                   "npus": dec_npus},
        "ttft_ms": {"p50": pct(lat["ttft"], 50), "p99": pct(lat["ttft"], 99)},
        "tpot_ms": {"p50": pct(lat["tpot"], 50), "p99": pct(lat["tpot"], 99)},
        "latency_relative_accuracy": lat["ttft"].rel,
        "slo_attainment": round(lat["slo_met"] / completed, 4) if completed else None,
        "cache": {"block_hit_ratio": round(t["hit_blocks"] / t["lookup_blocks"], 4) if t["lookup_blocks"] else None,
                  "token_hit_ratio": round(t["hit_tokens"] / t["lookup_tokens"], 4) if t["lookup_tokens"] else None},
    }


# ---- lifecycle audit ---------------------------------------------------------------------------
def held_ids(eng: ReportSource) -> np.ndarray:
    """Every request some part of the engine holds: prefill queues and batches, KV transfers,
    decode queues and batches."""
    parts = [np.fromiter(i.queue, dtype=np.int64, count=len(i.queue)) for i in eng.instances]
    parts += [np.asarray(p.running, dtype=np.int64) for p in eng.prefill]
    parts += [d.ids for d in eng.decode] + list(eng.kv.transfers.values())
    parts += [ids for d in eng.decode for _, ids in d.inbox]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def audit(eng: ReportSource) -> dict:
    """The request table's conservation audit, checked against what the engine holds;
    `lost` = in-flight requests nothing holds (they can never finish), or after a drain every
    admitted request neither completed nor rejected."""
    a = eng.req.audit(held_ids(eng))
    a["lost"] = a["in_flight"] if eng.drained is not None else a["orphaned"]
    return a


def lost_ids(eng: ReportSource) -> np.ndarray:
    live = eng.req.in_flight_ids()
    return live if eng.drained is not None else np.setdiff1d(live, held_ids(eng))


def drain(eng: ReportSource, cap_s: float = DRAIN_CAP_S, step_s: float = 1.0) -> dict:
    """Stop arrivals and run until every admitted request has finished or `cap_s` simulated
    seconds have passed; returns (and keeps in `eng.drained`) how it ended."""
    if not (0 < cap_s <= 86400 and 0 < step_s):
        raise ValueError(f"drain cap = {cap_s}: allowed 0 < cap <= 86400 simulated seconds")
    eng.catch_up()
    eng.arrivals_on = False
    env, t0 = eng.env, eng.env.now
    while eng.req.in_flight and env.now < t0 + cap_s - 1e-9:
        env.run(until=min(env.now + step_s, t0 + cap_s))
    left = eng.req.in_flight
    eng.drained = {"cap_s": cap_s, "seconds": round(env.now - t0, 3),
                   "complete": not left, "still_in_flight": left}
    eng.version += 1
    return eng.drained
