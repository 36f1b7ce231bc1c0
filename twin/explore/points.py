"""The keys a sweep may vary, and how each value becomes a deployment or scenario override.

A point is a set of KEY=value pairs applied to a catalog deployment and a named scenario; the
result is validated by the same typed models the catalog and the CLI use (config.Deployment with
check_deployment, engine.scenario.Scenario), so a value out of range is refused with the model's
own bounds before any work starts. A Task is one point at one seed: plain data, picklable and
hashed (the cache key) over the full resulting configuration.
"""
from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from twin.model.config import CatalogError, Deployment, _validate, catalog, check_deployment
from twin.engine.scenario import load_scenario
from twin.engine.scheduling import DEFAULTS as POLICY_DEFAULTS
from twin.engine.scheduling import REGISTRY as POLICIES
from twin.i18n import N_
from twin.workload import TRACES

# Size limits of one sweep (assumptions sized to this twin's speed: a 30 s paper-decode point takes
# ~0.25 s of one core, so the largest sweep is ~15 core-minutes).
MAX_POINTS = 500            # grid points (product of the value lists)
MAX_SEEDS = 32
MAX_RUNS = 2000             # points x seeds
MAX_SIM_SECONDS = 200_000   # points x seeds x duration, simulated seconds
MAX_VALUES = 100            # values in one --vary list or range
SOURCES = ("engine", "model")


@dataclass(frozen=True)
class Key:
    name: str
    kind: str                     # "int" | "float" | "bool" | "choice"
    help: str
    apply: Callable[[dict, dict, Any], None] | None   # (deployment dict, scenario dict, value)
    choices: Callable[[], tuple] = tuple


def _set(*path: str):
    """Apply by setting one nested field ("dep" or "sc" first)."""
    def f(dep: dict, sc: dict, v) -> None:
        d = dep if path[0] == "dep" else sc
        for p in path[1:-1]:
            d = d[p]
        d[path[-1]] = v
    return f


def _both_pools(field: str):
    def f(dep: dict, sc: dict, v) -> None:
        dep["prefill"][field] = dep["decode"][field] = v
    return f


def _ep(pool: str):
    """EP degree = the instance's dies (one EP group per instance, DP = EP, as every catalog row)."""
    def f(dep: dict, sc: dict, v) -> None:
        dep[pool]["ep"] = dep[pool]["dies_per_instance"] = v
    return f


def _fixed_length(field: str):
    def f(dep: dict, sc: dict, v) -> None:
        sc[field] = {"kind": "fixed", "value": v}
    return f


def _ems(dep: dict, sc: dict, v: str) -> None:
    if v == "off":
        dep["ems_nodes"] = 0
    elif not dep["ems_nodes"]:
        raise ValueError("the deployment has no EMS nodes (ems_nodes = 0); allowed: off")
    else:
        dep["cache_plane"] = v


def _trace(dep: dict, sc: dict, v: str) -> None:
    sc.update(workload="trace", trace=v, rate=None)


POLICY_HELP = {"prefill_batching": N_("prefill batching policy"), "placement": N_("placement policy"),
               "decode_admission": N_("decode admission policy"), "kv_placement": N_("KV placement policy")}


def _policy(kind: str) -> Key:
    """A scheduling decision of the scenario, by registered policy name (twin.engine.scheduling)."""
    return Key(kind, "choice", POLICY_HELP.get(kind, f"{kind.replace('_', ' ')} policy"),
               _set("sc", "scheduling", kind), lambda: tuple(POLICIES[kind]))


def _deployments() -> tuple:
    return tuple(catalog().deployments)


KEYS: dict[str, Key] = {k.name: k for k in (
    # system (applied first: every other key changes the chosen deployment)
    Key("deployment", "choice", N_("catalog deployment (system and model)"), None, _deployments),
    # deployment
    Key("prefill_instances", "int", N_("prefill instances"), _set("dep", "prefill", "instances")),
    Key("decode_instances", "int", N_("decode instances"), _set("dep", "decode", "instances")),
    Key("prefill_ep", "int", N_("prefill EP degree in dies (= dies per prefill instance)"), _ep("prefill")),
    Key("decode_ep", "int", N_("decode EP degree in dies (= dies per decode instance)"), _ep("decode")),
    Key("decode_batch_per_die", "int", N_("decode batch cap per die"), _set("dep", "decode", "batch_per_die")),
    Key("prefill_tokens_per_die", "int", N_("prefill batch tokens per die"),
        _set("dep", "prefill", "tokens_per_die")),
    Key("tpot_slo_ms", "float", N_("TPOT SLO, ms"), _set("dep", "tpot_slo_ms")),
    Key("ttft_slo_ms", "float", N_("TTFT SLO, ms"), _set("dep", "ttft_slo_ms")),
    Key("mtp", "bool", N_("multi-token prediction on or off"), _set("dep", "mtp")),
    Key("mtp_acceptance", "float", N_("MTP draft acceptance, 0..1"), _set("dep", "mtp_acceptance")),
    Key("microbatch", "bool", N_("two-microbatch pipelines (both pools)"), _both_pools("microbatch")),
    Key("precision", "choice", N_("GEMM precision"), _set("dep", "precision"), lambda: ("int8", "bf16", "fp8")),
    Key("ems", "choice", N_("EMS cache pool over UB, over VPC, or off"), _ems, lambda: ("ub", "vpc", "off")),
    Key("redundant_experts", "int", N_("redundant experts (both pools)"), _both_pools("redundant_experts")),
    Key("kv_transfer_plane", "choice", N_("plane carrying KV from prefill to decode"),
        _set("dep", "kv_transfer_plane"), lambda: ("rdma", "ub")),
    # workload
    Key("rate", "float", N_("arrival rate, req/s (synthetic)"), _set("sc", "rate")),
    Key("load", "float", N_("arrival rate as a fraction of capacity (synthetic)"), _set("sc", "load")),
    Key("input_len", "int", N_("prompt tokens (fixed length)"), _fixed_length("input")),
    Key("output_len", "int", N_("output tokens (fixed length)"), _fixed_length("output")),
    Key("reuse_rate", "float", N_("prefix reuse probability, 0 <= r < 1"), _set("sc", "reuse_rate")),
    Key("prefix_pool", "int", N_("distinct shared prefixes"), _set("sc", "prefix_pool")),
    Key("trace", "choice", N_("replay a named trace instead of synthetic arrivals"), _trace,
        lambda: tuple(TRACES)),
    # scheduling policies
    *(_policy(kind) for kind in POLICY_DEFAULTS),
)}


def _allowed(key: Key) -> str:
    if key.kind == "choice":
        return "one of " + ", ".join(key.choices())
    return {"int": "integers", "float": "numbers", "bool": "true or false"}[key.kind] + \
        (" (a list V1,V2,... or a range LO:HI:STEP)" if key.kind != "bool" else "")


def _scalar(key: Key, text: str, flag: str = "--vary"):
    t = text.strip()
    if key.kind == "bool":
        if t.lower() in ("true", "on", "1", "yes"):
            return True
        if t.lower() in ("false", "off", "0", "no"):
            return False
    elif key.kind == "choice":
        if t in key.choices():
            return t
    else:
        try:
            v = int(t) if key.kind == "int" else float(t)
        except ValueError:
            v = None
        if v is not None and math.isfinite(v):
            return v
    raise ValueError(f"{flag} {key.name}={text!r}: not allowed (allowed: {_allowed(key)})")


def _range(key: Key, text: str, flag: str) -> list:
    lo, hi, step = (_scalar(key, p, flag) for p in text.split(":"))
    if step <= 0:
        raise ValueError(f"{flag} {key.name}={text}: step must be > 0")
    if hi < lo:
        raise ValueError(f"{flag} {key.name}={text}: inverted range (LO {lo} > HI {hi}; allowed LO <= HI)")
    n = math.floor((hi - lo) / step + 1e-9) + 1
    if n > MAX_VALUES:
        raise ValueError(f"{flag} {key.name}={text}: {n} values (allowed at most {MAX_VALUES} per key)")
    return [lo + i * step if key.kind == "int" else round(lo + i * step, 12) for i in range(n)]


def parse_vary(text: str, flag: str = "--vary") -> tuple[str, list]:
    """'KEY=V1,V2,...' or 'KEY=LO:HI:STEP' -> (key, values); one-line errors naming the field."""
    name, sep, values = (text or "").partition("=")
    name = name.strip()
    if name not in KEYS:
        raise ValueError(f"{flag} {name or text!r}: unknown key (allowed: {', '.join(KEYS)})")
    key = KEYS[name]
    if not sep or not values.strip():
        raise ValueError(f"{flag} {name}: empty value list (allowed: {_allowed(key)})")
    if values.count(":") == 2 and key.kind in ("int", "float"):
        out = _range(key, values, flag)
    else:
        out = [_scalar(key, v, flag) for v in values.split(",")]
    if len(out) > MAX_VALUES:
        raise ValueError(f"{flag} {name}: {len(out)} values (allowed at most {MAX_VALUES} per key)")
    if len(set(out)) != len(out):
        raise ValueError(f"{flag} {name}={values}: a value is repeated (allowed: distinct values)")
    return name, out


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Hash of the engine's code and catalog: a cached row is reused only by the same twin."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    files = sorted(p for p in root.rglob("*") if p.suffix in (".py", ".toml")
                   and not {"ui", "explore", "__pycache__"} & set(p.relative_to(root).parts))
    for p in files:
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Task:
    """One point at one seed, with the full configuration it runs."""
    point: tuple                 # ((key, value), ...) in --vary order
    deployment: str              # catalog deployment the overrides start from
    dep: dict                    # full deployment after overrides
    scenario: dict               # full scenario after overrides
    seed: int
    duration_s: float
    source: str                  # "engine" | "model"

    @property
    def key(self) -> str:
        sc = {k: v for k, v in self.scenario.items() if k not in ("name", "description")}
        blob = json.dumps({"code": code_fingerprint(), "dep": self.dep, "sc": sc, "seed": self.seed,
                           "duration_s": self.duration_s, "source": self.source},
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:24]

    def deployment_model(self) -> Deployment:
        return Deployment.model_validate(self.dep)


def configure(deployment: str, scenario: str, point: dict, overrides: dict | None = None) -> tuple[str, dict, dict]:
    """(base deployment name, deployment dict, scenario dict) of one point, validated.
    `overrides` are fixed scenario fields (e.g. duration_s, seed) applied before the point."""
    base = point.get("deployment", deployment)
    cat = catalog()
    dep = cat.deployment(base).model_dump()
    sc = load_scenario(scenario, deployment=base, **(overrides or {})).model_dump()
    where = ", ".join(f"{k}={v}" for k, v in point.items())
    for name, v in point.items():
        if KEYS[name].apply is not None:
            try:
                KEYS[name].apply(dep, sc, v)
            except ValueError as exc:
                raise ValueError(f"{name}={v}: {exc}") from None
    if "rate" in point and "load" in point:
        raise ValueError("--vary rate and --vary load: choose one (allowed: rate or load)")
    if sc["workload"] == "trace" and ("rate" in point or "load" in point):
        raise ValueError(f"--vary {'rate' if 'rate' in point else 'load'}: the workload replays a trace "
                         f"(allowed: synthetic scenarios only)")
    if "load" in point:
        sc["rate"] = None
    try:
        model = _validate(Deployment, dep, f"deployment [{base}] at {where}")
        check_deployment(cat, base, model)
        scm = load_scenario(None, **{k: v for k, v in sc.items() if v is not None})
    except CatalogError as exc:
        raise ValueError(f"point {where}: {exc}") from None
    if not model.decode.instances or (scm.pipeline == "full" and not model.prefill.instances):
        raise ValueError(f"point {where or base}: deployment {base} has no "
                         f"{'decode' if not model.decode.instances else 'prefill'} instance for scenario "
                         f"{scenario!r} (allowed: a decode_only scenario such as paper-decode, or "
                         f"--vary prefill_instances=N with N >= 1)")
    return base, model.model_dump(), scm.model_dump()


def grid(varies: list[tuple[str, list]], max_points: int = MAX_POINTS) -> list[dict]:
    """Every combination of the varied values (the first key varies slowest), counted first."""
    names = [n for n, _ in varies]
    if len(set(names)) != len(names):
        raise ValueError(f"--vary {next(n for n in names if names.count(n) > 1)}: given twice "
                         f"(allowed: each key once, with a list of values)")
    n = math.prod(len(v) for _, v in varies)
    if n > max_points:
        raise ValueError(f"--vary: {n} grid points (allowed at most {max_points} per sweep)")
    return [dict(zip(names, combo)) for combo in itertools.product(*(v for _, v in varies))]


def plan(deployment: str, scenario: str, varies: list[tuple[str, list]], seeds: int = 1,
         duration_s: float = 30.0, source: str = "engine", limits: dict | None = None) -> list[Task]:
    """Every Task of a sweep, validated and within the size limits, before any work starts."""
    lim = {"points": MAX_POINTS, "seeds": MAX_SEEDS, "runs": MAX_RUNS, "sim_seconds": MAX_SIM_SECONDS,
           **(limits or {})}
    if source not in SOURCES:
        raise ValueError(f"--source {source!r}: allowed {', '.join(SOURCES)}")
    if not (isinstance(seeds, int) and 1 <= seeds <= lim["seeds"]):
        raise ValueError(f"--seeds {seeds}: allowed 1 to {lim['seeds']}")
    points = grid(varies, lim["points"])
    runs = len(points) * (1 if source == "model" else seeds)
    if runs > lim["runs"]:
        raise ValueError(f"sweep: {len(points)} points x {seeds} seeds = {runs} runs "
                         f"(allowed at most {lim['runs']}; fewer values or seeds)")
    if source == "engine" and runs * duration_s > lim["sim_seconds"]:
        raise ValueError(f"sweep: {runs} runs x {duration_s:g} s = {runs * duration_s:g} simulated seconds "
                         f"(allowed at most {lim['sim_seconds']:,}; shorter --duration or fewer points)")
    tasks = []
    for p in points:
        base, dep, sc = configure(deployment, scenario, p, {"duration_s": duration_s})
        if source == "model" and sc["workload"] != "synthetic":
            raise ValueError(f"--source model: scenario {scenario!r} replays a trace (allowed: a synthetic "
                             f"scenario; the perf model needs a rate and mean lengths)")
        for s in range(1 if source == "model" else seeds):
            tasks.append(Task(tuple(p.items()), base, dep, {**sc, "seed": s}, s, duration_s, source))
    return tasks


@contextlib.contextmanager
def registered(task: Task):
    """The task's deployment under a name the catalog knows, while an engine is built from it
    (the engine and scenario take deployments by name). A catalog deployment is used as it is."""
    cat = catalog()
    if cat.deployments.get(task.deployment) is not None and \
            cat.deployments[task.deployment].model_dump() == task.dep:
        yield task.deployment
        return
    name = f"{task.deployment}~{task.key[:10]}"
    cat.deployments[name] = task.deployment_model()
    try:
        yield name
    finally:
        cat.deployments.pop(name, None)
