"""A dashboard sweep as a job of the web process's job pool (twin.live.jobs): its size limits, its cost
estimate from its size, and the function its job process runs.

Cost (CPU seconds of one core) = runs x (build + duration x per-sim-second + requests x per-request),
requests = rate x duration. The three constants are upper ends measured on this machine's kind
(`python -m twin bench`-style runs of paper-decode, bursty-chat, diurnal and default at 10 simulated
seconds, rates 80 to 99,000 req/s: 1-20 us a request at high rates, 0.01-0.02 s per simulated second
at low rates); they are assumptions for budgeting, not model constants.
"""
from __future__ import annotations

from functools import lru_cache

from twin.explore.points import Task
from twin.explore.sweep import run_sweep, summarize
from twin.explore.rowcache import Cache

# Page limits (assumptions: a sweep a viewer waits for, ~1 min on one core at ~0.25 s a run).
LIMITS = {"points": 60, "seeds": 4, "runs": 120, "sim_seconds": 120 * 60}
MAX_DURATION_S = 60.0
BUILD_S = 0.3             # assumption: building an engine and reading its summary
PER_SIM_S = 0.02          # assumption: CPU s per simulated second at a low rate
PER_REQUEST_S = 20e-6     # assumption: CPU s per arriving request at a high rate
MODEL_RUN_S = 0.05        # assumption: one perf-model evaluation


@lru_cache(maxsize=32)
def _capacity(scenario: str, deployment: str) -> float:
    from twin.explore.evaluate import point_rate
    return point_rate(scenario, deployment, 1.0)


def task_rate(task: Task) -> float:
    """The arrival rate (req/s) a task offers: its scenario's rate, else its load x the base
    deployment's capacity (overrides change capacity a little; the estimate is for budgeting)."""
    sc = task.scenario
    if sc.get("rate"):
        return float(sc["rate"])
    return float(sc.get("load") or 1.0) * _capacity(sc["name"], task.deployment)


def cost_s(tasks: list[Task]) -> float:
    """Estimated CPU seconds of a sweep (cached points included: the estimate is an upper bound)."""
    total = 0.0
    for t in tasks:
        if t.source == "model":
            total += MODEL_RUN_S
        else:
            total += BUILD_S + t.duration_s * (PER_SIM_S + task_rate(t) * PER_REQUEST_S)
    return total


def sweep_job(tasks: list[Task], varied: list[str], progress) -> dict:
    """Run in a job process: the sweep's rows (one process, so progress counts runs) and points."""
    rows, _ = run_sweep(tasks, Cache(), 1, None, lambda done, _total: progress(done))
    return {"rows": rows, "points": summarize(rows, varied), "varied": varied}
