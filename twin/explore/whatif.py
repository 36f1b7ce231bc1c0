"""Compare's variants beside the CloudMatrix384 baseline: the paper's directions for later as what-ifs
(`cloudmatrix-unified`: one scale-out plane over UB; `cloudmatrix-cpu-pool`: CPUs pooled for EMS) and
the Atlas 950 SuperPoD (`atlas-950-infer`, a prediction).

The step-time model sees chips, parallelism and fabrics, not the KV path between pools nor the size of
the EMS pool, so a what-if's step figures equal the baseline's; what differs is measured on the engine:
one short fixed-seed run of the baseline and of each such variant on the same scenario (the `python -m
twin run` path), cached on disk (twin.explore.rowcache) and, on the page, run as a job of the job pool.
The Atlas entry differs in the step model already; at 8,192 NPUs a run costs minutes, so it has none.
"""
from __future__ import annotations

import hashlib
import json
from functools import lru_cache

from twin.engine import Engine, load_scenario
from twin.explore.compare import bands, operating_point
from twin.explore.points import code_fingerprint
from twin.explore.rowcache import Cache
from twin.model.config import catalog
from twin.predict import tco
from twin.predict.perf import PerfModel

BASELINE = "cloudmatrix-infer-paper"
VARIANTS = ("cloudmatrix-unified", "cloudmatrix-cpu-pool", "atlas-950-infer")
RUN = {"scenario": "default", "seed": 1, "duration_s": 30.0}     # the default scenario: 90% load, full pipeline
COMMAND = f"python -m twin run --deployment {{name}} --duration {RUN['duration_s']:g} --seed {RUN['seed']} --json"
RUN_CPU_S = 12.0          # assumption for the job's budget: a 30 s run took 0.7-1.3 s of CPU here, 8 s in a cold
#                           process (imports, compiled kernels), 4 Dec 2026
ENGINE_FIGURES = ("ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "token_hit_ratio", "kv_transfer_ms_mean",
                  "completed")
STEP_FIGURES = ("batch_per_chip", "tokens_per_s_per_chip", "tpot_ms", "alltoall_share")
VERSION = 1               # of the measured row's shape (code_fingerprint leaves explore/ out)


def parse_variants(names, flag: str = "--with") -> tuple[str, ...]:
    """Variant names from "a,b" or a list, each checked; repeats dropped, so at most len(VARIANTS)."""
    items = names.split(",") if isinstance(names, str) else list(names or ())
    out = []
    for n in items:
        n = n.strip() if isinstance(n, str) else n
        if n not in VARIANTS:
            raise ValueError(f"{flag} {n!r}: unknown variant; allowed {', '.join(VARIANTS)} (comma-separated)")
        if n not in out:
            out.append(n)
    return tuple(out)


def label(name: str) -> str:
    """"prediction" (announced hardware) or "what-if" (a variant of the paper's deployment)."""
    cat = catalog()
    dep = cat.deployment(name)
    return "prediction" if dep.prediction or cat.system(dep.system).label == "prediction" else "what-if"


@lru_cache(maxsize=16)
def step_model(name: str, slo_ms: float) -> dict:
    """The operating point (Compare's step-time model) and the label of its throughput (kept: the
    page redraws while a job runs; callers do not change it)."""
    pm = PerfModel(name)
    op = operating_point(pm, slo_ms)
    op = {**op, "tokens_per_s_per_chip": round(op["tokens_per_s_per_chip"], 1)}
    return {**{k: op[k] for k in STEP_FIGURES},
            "model_label": bands(name, pm, op, slo_ms)["tokens_per_s_per_chip"]["label"]}


def _same(a: dict, b: dict) -> bool:
    return all(a[k] == b[k] for k in STEP_FIGURES)


def needs_engine(variants, slo_ms: float = 50.0) -> tuple[str, ...]:
    """The baseline and the variants the step-time model cannot tell from it (the what-ifs)."""
    base = step_model(BASELINE, slo_ms)
    same = [v for v in parse_variants(variants) if _same(step_model(v, slo_ms), base)]
    return (BASELINE, *same) if same else ()


def key(name: str) -> str:
    blob = json.dumps({"code": code_fingerprint(), "v": VERSION, "deployment": name, **RUN}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def run_row(name: str) -> dict:
    """One engine run as `python -m twin run` does it, and the figures Compare shows."""
    eng = Engine(load_scenario(RUN["scenario"], seed=RUN["seed"], deployment=name, duration_s=RUN["duration_s"]))
    dur = eng.scenario.duration_s
    eng.run(dur, step=max(eng.scenario.interval_s, min(60.0, dur / 20)))
    s, kv = eng.summary(), eng.kv
    return {"key": key(name), "deployment": name, **RUN, "source": "engine",
            "ttft_ms_p50": s["ttft_ms"]["p50"], "ttft_ms_p99": s["ttft_ms"]["p99"], "tpot_ms_p50": s["tpot_ms"]["p50"],
            "token_hit_ratio": s["cache"]["token_hit_ratio"],
            "kv_transfer_ms_mean": round(kv.landed_s / kv.landed * 1e3, 3) if kv.landed else None,
            "kv_transfers": kv.landed, "kv_plane": kv.plane, "arrived": s["requests"]["arrived"],
            "completed": s["requests"]["completed"], "lost": s["requests"]["lost"]}


def measure(name: str, cache: Cache | None = None) -> dict:
    """The engine row of `name`, from the cache when this twin has measured it before."""
    cache = cache or Cache()
    row = cache.get(key(name))
    if row is None:
        row = run_row(name)
        cache.put(row)
    return row


def cached(names) -> dict[str, dict]:
    """The rows already measured (a file read each: cheap enough for a page callback)."""
    cache = Cache()
    return {n: r for n in names if (r := cache.get(key(n))) is not None}


def cost_s(names) -> float:
    """Estimated CPU seconds of measuring `names` (the job pool's budget; cached names count too)."""
    return RUN_CPU_S * len(names)


def measure_job(names: tuple[str, ...], progress) -> dict[str, dict]:
    """Run in a job process: each name measured in turn (cached rows cost a file read)."""
    out = {}
    for i, n in enumerate(names, 1):
        out[n] = measure(n)
        progress(i)
    return out


TCO_LEFT_OUT = {"prediction": "price and power of announced hardware are not public",
                "what-if": "what the variant saves (NICs, cards) or costs is not priced in the sources"}


def tco_left_out(name: str) -> str | None:
    """Why a variant has no TCO (its system has no tco.toml entry), or None when it has one."""
    try:
        tco.per_chip_hour(catalog().deployment(name).system)
    except ValueError:
        return TCO_LEFT_OUT[label(name)]
    return None


def beside(variants, slo_ms: float = 50.0, measured: dict[str, dict] | None = None) -> dict:
    """The baseline and each variant: its label, what it changes, its step-time figures (and whether
    they equal the baseline's), and its engine figures when measured (None until then)."""
    measured = measured or {}
    base = step_model(BASELINE, slo_ms)
    cat = catalog()
    rows = []
    for n in (BASELINE, *parse_variants(variants)):
        sm = step_model(n, slo_ms)
        same = _same(sm, base)
        rows.append({"deployment": n, "label": "baseline" if n == BASELINE else label(n),
                     "description": cat.deployment(n).description, "step_model": sm, "step_equals_baseline": same,
                     "engine": measured.get(n) if same else None, "engine_run": same,
                     "tco_left_out": None if n == BASELINE else tco_left_out(n)})
    if all(not r["engine_run"] for r in rows[1:]):
        rows[0]["engine_run"], rows[0]["engine"] = False, None    # nothing to measure beside
    return {"baseline": BASELINE, "run": {**RUN, "command": COMMAND.format(name="NAME")}, "rows": rows}
