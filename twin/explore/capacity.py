"""Capacity: the highest request rate whose requests meet their SLOs, searched with the engine.

A rate "meets the SLOs" when at least `attainment` of the requests arriving after the warm-up meet
both TTFT and TPOT SLOs (evaluate.py follows each to its end). The search starts at the perf
model's capacity, brackets upward by GROW or downward by halving, then bisects to `REL_TOL`. `search` runs one
capacity search per prefill/decode split and decode EP degree, on the runner's workers.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from twin.explore import executor as runner
from twin.explore.evaluate import build_engine, evaluate
from twin.explore.points import Task, configure, parse_vary

REL_TOL = 0.02          # bisection stops when the bracket is within 2% of the rate
MAX_PROBES = 16         # engine runs per search (bracketing + bisection), a stated bound
MAX_CANDIDATES = 64     # configurations one --search may try
DEFAULT_ATTAINMENT = 0.99   # assumption: 99% of requests within both SLOs
GROW = 1.25             # bracketing step above the model's capacity (the engine is rarely far above it)


@dataclass(frozen=True)
class Spec:
    """One capacity search: a configuration (fixed KEY=value settings) and how to judge it."""
    deployment: str
    scenario: str
    settings: tuple = ()              # ((key, value), ...) applied to every probe
    duration_s: float = 30.0
    seed: int = 0
    attainment: float = DEFAULT_ATTAINMENT


def _task(spec: Spec, rate: float) -> Task:
    point = {**dict(spec.settings), "rate": rate}
    base, dep, sc = configure(spec.deployment, spec.scenario, point,
                              {"duration_s": spec.duration_s, "seed": spec.seed})
    return Task(tuple(point.items()), base, dep, sc, spec.seed, spec.duration_s, "engine")


def check(spec: Spec) -> float:
    """Validate the spec before any work (one-line errors); returns the perf model's capacity, req/s."""
    if not 0 < spec.attainment <= 1:
        raise ValueError(f"--attainment {spec.attainment}: allowed 0 < attainment <= 1")
    probe = _task(spec, 1.0)
    if probe.scenario["workload"] != "synthetic":
        raise ValueError(f"--scenario {spec.scenario}: replays a trace (allowed: a synthetic scenario, "
                         f"whose rate the search sets)")
    return build_engine(probe).capacity_rps()


def capacity(spec: Spec) -> dict:
    """The highest rate meeting the SLOs, its row, the configuration and every probe."""
    t0 = time.perf_counter()
    model_rps = check(spec)
    probes: list[dict] = []

    def ok(rate: float) -> bool:
        row = evaluate(_task(spec, rate))
        probes.append({"rate": round(rate, 4), "slo_attainment": row["slo_attainment"], "row": row})
        return (row["slo_attainment"] or 0) >= spec.attainment

    lo, hi = 0.0, model_rps
    if ok(hi):
        lo, hi = hi, GROW * hi
        while len(probes) < MAX_PROBES // 2 and ok(hi):
            lo, hi = hi, GROW * hi
    else:
        while len(probes) < MAX_PROBES // 2 and not ok(hi / 2):
            hi /= 2
        lo, hi = hi / 2, hi
        if not (probes[-1]["slo_attainment"] or 0) >= spec.attainment:
            lo = 0.0
    while lo > 0 and hi - lo > REL_TOL * lo and len(probes) < MAX_PROBES:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    best = max((p for p in probes if (p["slo_attainment"] or 0) >= spec.attainment),
               key=lambda p: p["rate"], default=None)
    base, dep, _ = configure(spec.deployment, spec.scenario, dict(spec.settings))
    return {"deployment": base, "scenario": spec.scenario, "settings": dict(spec.settings),
            "max_rate": round(lo, 4) if best else 0.0,
            "goodput_per_chip": best["row"]["goodput_per_chip"] if best else 0.0,
            "row": best["row"] if best else None, "model_capacity_rps": round(model_rps, 4),
            "attainment": spec.attainment, "probes": [{k: p[k] for k in ("rate", "slo_attainment")}
                                                      for p in probes],
            "config": _config(dep), "seconds": round(time.perf_counter() - t0, 3)}


def _config(dep: dict) -> dict:
    """The settings a capacity answer is about (the AIConfigurator question)."""
    return {"prefill_instances": dep["prefill"]["instances"], "prefill_ep": dep["prefill"]["ep"],
            "decode_instances": dep["decode"]["instances"], "decode_ep": dep["decode"]["ep"],
            "decode_batch_per_die": dep["decode"]["batch_per_die"],
            "tpot_slo_ms": dep["tpot_slo_ms"], "ttft_slo_ms": dep["ttft_slo_ms"]}


def candidates(spec: Spec, prefill_instances: list[int], decode_ep: list[int]) -> list[Spec]:
    """Every valid prefill-instances x decode-EP configuration (invalid ones, e.g. more dies than
    the system has, are skipped and counted)."""
    out = []
    for p in prefill_instances:
        for ep in decode_ep:
            s = Spec(spec.deployment, spec.scenario,
                     spec.settings + (("prefill_instances", p), ("decode_ep", ep)),
                     spec.duration_s, spec.seed, spec.attainment)
            try:
                check(s)
            except ValueError:
                continue
            out.append(s)
    if len(out) > MAX_CANDIDATES:
        raise ValueError(f"--search: {len(out)} configurations (allowed at most {MAX_CANDIDATES}; "
                         f"fewer --prefill-instances or --decode-ep values)")
    return out


def search(spec: Spec, prefill_instances: list[int], decode_ep: list[int], workers=None, client=None,
           progress=True, top: int = 5) -> dict:
    """Capacity of every candidate, best goodput per chip first."""
    t0 = time.perf_counter()
    if _task(spec, 1.0).scenario["pipeline"] != "full":
        raise ValueError(f"--search: scenario {spec.scenario!r} runs decode only, so the prefill/decode "
                         f"split would not matter (allowed: a full-pipeline scenario such as paper-prefill)")
    specs = candidates(spec, prefill_instances, decode_ep)
    if not specs:
        raise ValueError(f"--search: no valid configuration among prefill instances {prefill_instances} "
                         f"x decode EP {decode_ep} on {spec.deployment}")
    results = runner.run(capacity, specs, workers=workers, client=client, progress=progress,
                         desc="configurations")
    ranked = sorted(results, key=lambda r: (-(r["goodput_per_chip"] or 0), -r["max_rate"]))
    return {"deployment": spec.deployment, "scenario": spec.scenario, "tried": len(specs),
            "best": ranked[:top], "all": [{**r["config"], "max_rate": r["max_rate"],
                                           "goodput_per_chip": r["goodput_per_chip"]} for r in ranked],
            "seconds": round(time.perf_counter() - t0, 3)}


def settings(texts: list[str] | None) -> tuple:
    """--set KEY=VALUE (one value each) -> ((key, value), ...)."""
    out = []
    for t in texts or []:
        k, vals = parse_vary(t, flag="--set")
        if len(vals) != 1:
            raise ValueError(f"--set {t}: one value (allowed KEY=VALUE; use sweep for lists)")
        out.append((k, vals[0]))
    return tuple(out)


DEFAULT_PREFILL_INSTANCES = (2, 4, 6, 8)
DEFAULT_DECODE_EP = (64, 160, 320)


def search_space(spec: Spec, prefill_instances: list[int] | None, decode_ep: list[int] | None):
    """The lists --search tries (defaults: the paper's 6 prefill instances and EP320 with neighbours)."""
    pre = list(prefill_instances or DEFAULT_PREFILL_INSTANCES)
    dec = list(decode_ep or DEFAULT_DECODE_EP)
    if len(pre) * len(dec) > MAX_CANDIDATES:
        raise ValueError(f"--search: {len(pre)} x {len(dec)} configurations (allowed at most {MAX_CANDIDATES})")
    return pre, dec
