"""Random failures: the parts each fault kind can hit and their failure rates (catalog MTBFs,
assumptions), and the processes that inject them with the failure clock compressed: fail-stops at
`mtbf_hours`, and, when asked for, gray failures at `[gray.<kind>]` (a rate, a duration and a
factor per kind) from a generator of their own, so that asking for them leaves the fail-stop
draws as they were."""
from __future__ import annotations

import numpy as np

from twin.engine.faults.kinds import parts
from twin.engine.faults.spec import defaults

GRAY_STREAM = 0x67726179   # the gray failures' generator: the engine's seed and this ("gray")


def random_classes(topo, table: str = "mtbf_hours") -> dict[str, list[str]]:
    """The parts random failures can hit, per fault kind with a catalog MTBF (`table`: the
    fail-stops' "mtbf_hours" or "gray"), in the catalog's order."""
    return {k: parts(topo, k) for k in defaults()[table]}


def failure_rates(topo, table: str = "mtbf_hours") -> tuple[dict[str, list[str]], np.ndarray]:
    """The parts per fault kind and each kind's failures per hour (parts / MTBF): the one rule for
    how often what fails (the engine draws from it; pages can show it)."""
    classes = random_classes(topo, table)
    rows = defaults()[table]
    mtbf = {k: v["mtbf_hours"] if isinstance(v, dict) else v for k, v in rows.items()}
    return classes, np.array([len(v) / mtbf[k] for k, v in classes.items()])


def random_failures(manager, hours_per_sim_s: float, gen: int, rng=None, table: str = "mtbf_hours"):
    """Random failures per component class at the catalog's MTBF (assumptions), with time
    compressed by `hours_per_sim_s` so that failures are seen in a demo. Stops when the
    manager's generation moves on (a new setting). Draws from `rng` (default the engine's). A gray
    failure lasts a duration drawn log-uniformly from its catalog range (sim seconds, as a repair
    takes: only the time between failures is compressed) and slows its part by the catalog's factor."""
    eng = manager.eng
    rng = eng.rng if rng is None else rng
    classes, weights = failure_rates(eng.topo, table)
    rows = defaults()[table]
    total = sum(w for w, v in zip(weights, classes.values()) if v)
    while True:
        gap_h = rng.exponential(1.0 / total)
        yield eng.env.timeout(gap_h / hours_per_sim_s)
        if gen != manager.random_gen:
            return
        k = list(classes)[int(rng.choice(len(classes), p=weights / weights.sum()))]
        target = classes[k][int(rng.integers(len(classes[k])))]
        spec = {"kind": k, "target": target}
        if isinstance(rows[k], dict):
            lo, hi = rows[k]["duration_s"]
            spec["duration_s"] = float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
            spec["factor"] = rows[k]["factor"]
        manager.inject(spec)
