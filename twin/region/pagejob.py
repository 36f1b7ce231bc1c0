"""A region run from the dashboard, as a job of the web process's job pool (twin.live.jobs): the
form's bounds, the run's cost estimate from its size, and the function its job process runs (every
supernode in that one process, drained to the end).

Cost (CPU seconds of one core) = START_S + supernodes x PER_SUPERNODE_S + requests x PER_REQUEST_S
+ windows x supernodes x PER_WINDOW_S, requests = the region's rate x duration. Measured in one
process with the drain (`Region(..., distributed=False)`, 2026-12-04, this machine): cm384-pair 10 s
1.9 CPU-s (2,219 requests); cm384-trio 30 s, supernode 1 lost at 15 s, 3.6 (9,914); the same with
prefix affinity and fetch 4.9; cm384-quad 60 s 9.5 (26,526); cm384-mixed 60 s, supernode 0 lost at
30 s, 5.8 (19,904); cm384-pair 30 s at a 0.1 s window 3.6 (6,576). The constants are upper ends of
those: assumptions for budgeting, not model constants. At the form's highest load (2 x the summed
capacity, 2026-12-05, the call alone): cm384-pair 10 s 1.5 CPU-s (4,882 requests, estimate 3.9),
cm384-quad 30 s 3.0 (29,613, estimate 17.2): the estimate stays an upper end there too.
"""
from __future__ import annotations

import math
from functools import lru_cache

from twin.region.driver import parse_fault, run_region
from twin.region.spec import region

MIN_DURATION_S, MAX_DURATION_S = 5.0, 120.0   # assumption: a run a viewer waits for (cm384-quad 120 s: ~30 CPU-s)
MIN_WINDOW_S, MAX_WINDOW_S = 0.1, 10.0        # assumption: shorter windows cost exchanges and show nothing new (docs)
MIN_LOAD, MAX_LOAD = 0.1, 2.0                 # assumption: x the summed capacity; at 2 every member is overloaded
DRAIN_CAP_S = 600.0                           # as the command's --drain
START_S = 0.6             # assumption: a job process's imports and the report
PER_SUPERNODE_S = 0.4     # assumption: building one supernode's engine
PER_REQUEST_S = 0.5e-3    # assumption: one request routed, served and drained (fetches included)
PER_WINDOW_S = 1e-3       # assumption: one supernode advanced to one window edge


@lru_cache(maxsize=16)
def _workload(name: str) -> tuple[float | None, float, float]:
    """(the scenario's rate per supernode or None, its load, the members' summed capacity in req/s:
    each member's perf model, built once per deployment)."""
    from twin.engine.scenario import load_scenario
    from twin.explore.evaluate import point_rate
    spec = region(name)
    sc = load_scenario(spec.scenario)
    return sc.rate, sc.load, sum(point_rate(spec.scenario, d, 1.0) for d in spec.deployments)


def default_load(name: str) -> float:
    """The load the region's scenario serves unless the form says otherwise."""
    return _workload(name)[1]


def region_rate(name: str, load: float | None = None) -> float:
    """The region's arrival rate (req/s) as `Region` sets it: the scenario's rate per supernode, else
    `load` (the scenario's when None) x the members' summed capacity."""
    rate, scenario_load, capacity = _workload(name)
    if rate:
        return rate * region(name).size
    return (scenario_load if load is None else load) * capacity


def windows(duration_s: float, window_s: float) -> int:
    return max(1, math.ceil(duration_s / window_s - 1e-9))


def cost_s(name: str, duration_s: float, window_s: float, load: float | None = None) -> float:
    """Estimated CPU seconds of one run of region `name` (an upper end, see the module's docstring)."""
    k = region(name).size
    return (START_S + k * PER_SUPERNODE_S + region_rate(name, load) * duration_s * PER_REQUEST_S
            + windows(duration_s, window_s) * k * PER_WINDOW_S)


def region_job(name: str, duration_s: float, policy: str, cache_reuse: str, window_s: float,
               faults: tuple[str, ...], seed: int, load: float, progress) -> dict:
    """Run in a job process: the region's report (`run_region`'s), progress in windows. `faults` are
    the runner's (`supernode:I@T`, `link:I-J@T[+D]`), none or a supernode's and a link's from the form."""
    spec = region(name)
    parsed = tuple(parse_fault(f, spec.size, duration_s) for f in faults)
    return run_region(spec, duration_s, drain_cap=DRAIN_CAP_S, progress=progress, seed=seed, load=load, policy=policy,
                      cache_reuse=cache_reuse, window_s=window_s, faults=parsed, distributed=False)
