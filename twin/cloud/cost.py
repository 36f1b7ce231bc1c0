"""Utilisation, energy and cost of a co-pool day, from the co-pool record (copool.CoPool).

Utilisation = the fraction of NPU time doing useful work: a serving pool's delivered tokens over
what its serving NPUs could deliver at the perf model's operating point (prefill tokens/s per NPU;
decode tokens/s per NPU at the largest batch within the TPOT SLO); the training pool's NPU time
spent running steps (NPUs lent but switching, or too few to hold the model states, are idle).
How well a running step uses the chips is its MFU (training.py), reported beside it.

Energy: each NPU draws `power_kw_per_npu` x (idle share + (1 - idle share) x its useful fraction)
x PUE. Cost of the day: the supernode's price over its amortisation period plus the energy bill.
Cost is split between serving and training by NPU time (NPUs lent to training, switching
included, are training's), so cost per million output tokens is serving's share over the day's
tokens, and cost per training step training's share over the day's steps. Every assumption is a
field of Prices, editable and printed with the result.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from twin.model.config import _validate, catalog
from twin.cloud.copool import DAY_S, HELD, POLICIES, CoPool, load_params
from twin.cloud.live import run_day


# Cost of a comparison in CPU seconds of one core (assumptions for budgeting a job, measured here: a
# 30/60/120 s copool-day took 1.7/1.6/2.5 s per policy)
DAY_BUILD_S = 0.5
DAY_PER_SIM_S = 0.025
SWITCH_LOG = 100     # switches listed in a report (the count is always complete)
PEAK_WINDOW = 10     # intervals the peak serving load is averaged over (10 s = 24 min of a 600 s day)


class Prices(BaseModel):
    """Price, power and amortisation assumptions, each with its source."""
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    capex_usd: float = Field(8e6, gt=0, le=1e9, description="supernode price (ref 6: about US$8 million, before machine room, power and cooling)")
    amortisation_years: float = Field(4.0, gt=0, le=20, description="assumption: 4-year depreciation")
    usd_per_kwh: float = Field(0.10, ge=0, le=10, description="assumption: industrial electricity")
    pue: float = Field(1.3, ge=1, le=3, description="assumption: power usage effectiveness of the machine room")
    power_kw_per_npu: float | None = Field(None, gt=0, le=100, description="default: the system's chip_power_kw (systems.toml: ref 1 ~559 kW / 384 NPUs [X])")
    idle_power_share: float = Field(0.5, ge=0, le=1, description="assumption: an idle NPU draws half its busy power")


def load_prices(**overrides) -> Prices:
    """Prices with overrides (None = keep); a bad value raises CatalogError naming the field."""
    return _validate(Prices, {k: v for k, v in overrides.items() if v is not None}, "prices")


def npu_seconds(pool: CoPool) -> dict[str, float]:
    """Day-clock NPU-seconds per state over the run, and the useful NPU-seconds of each pool."""
    dt, k = pool.eng.scenario.interval_s, pool.compression
    out = dict.fromkeys(("prefill", "decode", "training", "switching", "training_idle",
                         "useful_prefill", "useful_decode", "useful_training"), 0.0)
    for r in pool.timeline:
        for name in ("prefill", "decode", "training", "switching"):
            out[name] += r[f"{name}_npus"] * dt * k
        out["useful_prefill"] += r["useful_prefill_npus"] * dt * k
        out["useful_decode"] += r["useful_decode_npus"] * dt * k
        run = r["training_npus"] if r["training_running"] else 0.0
        out["useful_training"] += run * dt * k
        out["training_idle"] += (r["training_npus"] - run) * dt * k
    return out


def peak_load(timeline: list[dict], n: int = PEAK_WINDOW) -> float:
    """Highest arrival rate over serving capacity, both averaged over n intervals (one interval's
    Poisson noise is not load)."""
    best = 0.0
    for i in range(len(timeline) - n + 1):
        w = timeline[i:i + n]
        cap = sum(r["serving_capacity_rps"] for r in w)
        if cap:
            best = max(best, sum(r["arrival_rps"] for r in w) / cap)
    return round(best, 4)


def _share(a: float, b: float) -> float | None:
    return round(a / b, 4) if b else None


def day_report(pool: CoPool, prices: Prices | None = None) -> dict:
    """Utilisation, training, inference, energy and cost of the run, scaled to one day."""
    return priced(day_usage(pool), prices)


def day_usage(pool: CoPool) -> dict:
    """Everything of a day that does not depend on prices, as plain data (a job process sends it
    back to the dashboard, which prices it again whenever a price changes)."""
    eng = pool.eng
    s = npu_seconds(pool)
    span = len(pool.timeline) * eng.scenario.interval_s * pool.compression   # day-clock seconds run
    days = span / DAY_S if span else 0.0
    useful = s["useful_prefill"] + s["useful_decode"] + s["useful_training"]
    lent = s["training"] + s["switching"]
    total_npus = sum(g.npus for g in pool.groups)
    tokens = sum(r["output_tokens"] for r in pool.timeline) * pool.compression
    summary = eng.summary()
    good = eng.metrics.history["goodput_tps"]
    peak_npus = int(max((r["training_npus"] for r in pool.timeline), default=0))
    return {
        "policy": pool.params.policy,
        "day_fraction_simulated": round(days, 4),
        "utilisation": {"prefill": _share(s["useful_prefill"], s["prefill"]),
                        "decode": _share(s["useful_decode"], s["decode"]),
                        "training": _share(s["useful_training"], lent),
                        "supernode": _share(useful, total_npus * span)},
        "npu_hours": {k: round(v / 3600, 1) for k, v in s.items()},
        "training_steps": round(pool.steps, 1),
        "training": {"min_npus": pool.min_npus, "deployment": pool.job.deployment,
                     "tokens_per_step": pool.job.global_batch_tokens,
                     "step_at_peak_npus": pool.job.step(peak_npus) if peak_npus else None},
        "peak_serving_load": peak_load(pool.timeline),
        "switches": pool.moves,
        "switch_s": round(pool.switch_day_s, 1),
        "switch_claim_s": f"< 300 (ref 6: under 5 minutes); twin: weights from {pool.params.weights_from} "
                          f"(fault-restart model) + hand-over {pool.params.handover_s:g} s (assumption)",
        "held_by_lent_groups": {k: round(sum(w[k] for w in pool.switches), 3) for k in HELD},
        "switch_log": pool.switches[:SWITCH_LOG],
        "inference": {"slo_attainment": summary["slo_attainment"],
                      "output_tokens_per_day": round(tokens / days) if days else 0,
                      "goodput_tokens_per_s": round(sum(good) / len(good), 1) if good else 0.0,
                      "ttft_ms": summary["ttft_ms"], "tpot_ms": summary["tpot_ms"],
                      "requests": {k: summary["requests"][k] for k in ("arrived", "completed", "in_flight", "lost")}},
        "basis": {"span_s": span, "npus": total_npus, "useful_npu_s": useful, "lent_npu_s": lent,
                  "tokens": tokens, "steps": pool.steps, "chip_power_kw": catalog().system(eng.dep.system).chip_power_kw},
    }


def priced(usage: dict, prices: Prices | None = None) -> dict:
    """A day's usage (day_usage) with its energy and cost under `prices`."""
    prices = prices or Prices()
    b = usage["basis"]
    span, days = b["span_s"], b["span_s"] / DAY_S
    power = prices.power_kw_per_npu or b["chip_power_kw"]
    idle = prices.idle_power_share
    kwh = power * prices.pue * (idle * b["npus"] * span + (1 - idle) * b["useful_npu_s"]) / 3600
    capex = prices.capex_usd / (prices.amortisation_years * 365 * DAY_S) * span
    energy_usd = kwh * prices.usd_per_kwh
    total_usd = capex + energy_usd
    train_share = b["lent_npu_s"] / (b["npus"] * span) if span else 0.0
    tokens, steps = b["tokens"], b["steps"]
    return {
        **{k: v for k, v in usage.items() if k != "basis"},
        "energy_kwh_per_day": round(kwh / days, 1) if days else 0.0,
        "cost_usd_per_day": {"capex": round(capex / days, 2) if days else 0.0,
                             "energy": round(energy_usd / days, 2) if days else 0.0},
        "cost_per_million_tokens": round(total_usd * (1 - train_share) / (tokens / 1e6), 4) if tokens else None,
        "cost_per_training_step": round(total_usd * train_share / steps, 2) if steps else None,
        "assumptions": {**prices.model_dump(), "power_kw_per_npu": power},
    }


SEEDS = 3                # seeds a comparison runs (one seed can flip a close verdict: README, "Verdict")
T95 = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776, 6: 2.571, 7: 2.447, 8: 2.365, 9: 2.306, 10: 2.262}
VERDICT = (("supernode_util", "higher"), ("usd_per_m_tokens", "lower"))   # (figure, which way is better)


def comparison_cost_s(day_s: float, seeds: int = SEEDS, policies=POLICIES) -> float:
    """Estimated CPU seconds of `comparison` for a day of `day_s` simulated seconds."""
    return seeds * len(policies) * (DAY_BUILD_S + DAY_PER_SIM_S * day_s)


def comparison(day_s: float, knobs: dict, progress=lambda done: None, seeds: int = SEEDS,
               policies=POLICIES) -> dict:
    """The whole day compressed into `day_s` under every policy and each of `seeds` seeds (0, 1, ...;
    the policies of one seed see the same arrivals), as usage to price: {policy: [usage per seed]}.
    Run in a job process (twin.live.jobs); `progress` gets the runs done so far."""
    out = {name: [] for name in policies}
    for seed in range(seeds):
        for name in policies:
            _, pool = run_day("copool-day", load_params(**knobs, policy=name), seed=seed, duration_s=day_s,
                              diurnal_period_s=day_s)
            out[name].append(day_usage(pool))
            progress(sum(len(v) for v in out.values()))
    return out


def figures(report: dict) -> dict:
    """The two figures a verdict compares, from one priced day."""
    return {"supernode_util": report["utilisation"]["supernode"], "usd_per_m_tokens": report["cost_per_million_tokens"]}


def interval(xs: list[float]) -> dict:
    """Mean and 95% interval (Student t) of values across seeds; one value has no interval."""
    n = len(xs)
    mean = sum(xs) / n
    if n < 2:
        return {"mean": mean, "lo": None, "hi": None, "n": n}
    sd = (sum((x - mean) ** 2 for x in xs) / (n - 1)) ** 0.5
    half = T95.get(n, 1.96) * sd / n ** 0.5
    return {"mean": mean, "lo": mean - half, "hi": mean + half, "n": n}


def verdict(reports: dict, a: str = "copool", b: str = "dedicated") -> dict:
    """Policy `a` against `b`, figure by figure: the 95% interval of the per-seed difference a - b
    (paired: both policies of a seed see the same arrivals), and who is ahead, or None when the
    interval spans zero (the day is too short or too noisy to settle it)."""
    out = {}
    for fig, better in VERDICT:
        diffs = [figures(ra)[fig] - figures(rb)[fig] for ra, rb in zip(reports[a], reports[b])
                 if figures(ra)[fig] is not None and figures(rb)[fig] is not None]
        if not diffs:
            out[fig] = {"diff": None, "ahead": None}
            continue
        d = interval(diffs)
        settled = d["lo"] is not None and (d["lo"] > 0 or d["hi"] < 0)
        a_better = (d["mean"] > 0) == (better == "higher")
        out[fig] = {"diff": d, "ahead": (a if a_better else b) if settled else None}
    return out
