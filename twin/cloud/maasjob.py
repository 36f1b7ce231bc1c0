"""A MaaS day from the dashboard, as a job of the web process's job pool (twin.live.jobs).

The command's day (3,600 simulated s) takes about 17 wall minutes, so the page runs the same day
compressed further (MIN_DAY_S..MAX_DAY_S simulated seconds stand for 24 hours; the policy's knobs,
control step and cooldown stay the catalog's), optionally with one model's traffic doubled, in a
process of its own. Besides the day's report it keeps what the page replays with its time slider:
after every control step the ledger (which model holds each 16-NPU unit, and whether that unit's
group serves, drains or loads its weights) and each model's completions and output tokens.

Cost (CPU seconds of one core) = START_S + requests x PER_REQUEST_S, requests = the day's mean
arrival rate (each model's load x its starting capacity, doubled for the doubled model) x day_s.
Measured 2026-12-06 on this machine: maas-day at day_s = 120, 39,126 requests, 14.7 CPU-s with the
drain and the start (building four engines, about 5 CPU-s). The constants are upper ends of that:
assumptions for budgeting, not model constants.
"""
from __future__ import annotations

import math
from functools import lru_cache

from twin.cloud.maas import UNIT_NPUS, Day, Maas, load_day

MIN_DAY_S, MAX_DAY_S, DEFAULT_DAY_S = 60.0, 300.0, 120.0   # assumption: a day a viewer waits for (300 s: ~45 CPU-s)
FACTOR = 2.0              # "what if this model's traffic doubles"
START_S = 8.0             # assumption: a job process's imports, four engines built, the report
PER_REQUEST_S = 0.4e-3    # assumption: one request of the day served and drained
DRAIN_CAP_S = 600.0       # as the command's --drain
CALIBRATED = {"deepseek-r1"}   # ref 3: the model the perf model is calibrated on; the others are predictions
STATES = ("serving", "draining", "loading", "waiting")    # a unit's group, as the ledger frames code it


def day_for(name: str, day_s: float, double: str | None, seed: int) -> Day:
    """The named day compressed to `day_s`, `double`'s mean load x FACTOR (None: as the catalog);
    ValueError or CatalogError naming what is allowed."""
    base = load_day(name)
    if double is not None and double not in base.models:
        raise ValueError(f"traffic doubles for = {double!r}: allowed none or one of {', '.join(base.models)}")
    if not MIN_DAY_S <= day_s <= MAX_DAY_S:
        raise ValueError(f"day length = {day_s:g} s: allowed {MIN_DAY_S:g} to {MAX_DAY_S:g} simulated s")
    models = {m: {**v.model_dump(), **({"load": v.load * FACTOR} if m == double else {})}
              for m, v in base.models.items()}
    return load_day(name, day_s=float(day_s), seed=seed, models=models)


def start_owner(day: Day) -> list[str | None]:
    """Which model holds each ledger unit at the start, as Maas lays it out (models in order, each
    its prefill then its decode groups), from the catalog alone (no engine)."""
    from twin.model.config import catalog
    cat = catalog()
    sysm = cat.system(day.system)
    dpn = cat.chip(sysm.accelerator).dies_per_package
    owner: list[str | None] = []
    for model, m in day.models.items():
        dep = cat.deployment(m.deployment)
        for pool, n in ((dep.prefill, m.prefill_groups), (dep.decode, m.decode_groups)):
            owner += [model] * (n * int(pool.dies_per_instance / dpn) // UNIT_NPUS)
    return owner + [None] * (sysm.nodes * sysm.npus_per_node // UNIT_NPUS - len(owner))


@lru_cache(maxsize=4)
def _start_rates(name: str) -> dict[str, float]:
    """Each model's mean arrival rate (req/s) on the catalog's day: load x starting capacity (its
    engines built once per day name; the rate does not depend on the day's length)."""
    day = Maas(load_day(name, day_s=MIN_DAY_S))
    return {m: day.day.models[m].load * day.capacity(m) for m in day.engines}


def steps(day: Day) -> int:
    return max(1, math.ceil(day.day_s / day.control_s - 1e-9))


def cost_s(day: Day, double: str | None) -> float:
    """Estimated CPU seconds of the job (an upper end, see the module's docstring)."""
    rate = sum(r * (FACTOR if m == double else 1.0) for m, r in _start_rates(day.name).items())
    return START_S + rate * day.day_s * PER_REQUEST_S


def frame(day: Maas, done: dict[str, tuple[int, int]]) -> dict:
    """The ledger after a control step: per unit the model's index (-1 free) and its group's state
    (index into STATES), per model completions and output tokens since the last frame."""
    models = list(day.engines)
    state = [0] * len(day.owner)
    for g in day.groups:
        for u in g.units:
            state[u] = STATES.index(g.state) if g.state in STATES else 0
    out = {"t": round(day.now, 3), "clock_h": round(day.clock_h(), 3),
           "owner": [models.index(o) if o is not None else -1 for o in day.owner], "state": state,
           "completed": {}, "output_tokens": {}}
    for m, eng in day.engines.items():
        c, tok = eng.req.counts()["completed"], int(eng.metrics.running_totals()["output_tokens"])
        out["completed"][m], out["output_tokens"][m] = c - done[m][0], tok - done[m][1]
        done[m] = (c, tok)
    return out


def partial(day: Maas, f: dict, new_moves: int) -> dict:
    """What a control step adds to the page while the day runs: the ledger's frame and the moves
    it made (as logged at that moment: a donor still draining has no drain time yet)."""
    return {"frame": f, "moves": [dict(mv) for mv in day.moves[len(day.moves) - min(new_moves, len(day.moves)):]],
            "models": list(day.engines), "day_s": day.day.day_s, "unit_npus": UNIT_NPUS}


def maas_job(name: str, day_s: float, double: str | None, seed: int, progress) -> dict:
    """Run in a job process: the day's report (Maas.report) with the SLOs, the ledger's frames and
    the per-step signals (Maas.timeline); progress in control steps, each with what the page shows
    while the day runs (`partial`)."""
    d = day_for(name, day_s, double, seed)
    day = Maas(d)
    done = dict.fromkeys(day.engines, (0, 0))
    frames = [frame(day, done)]
    for i in range(steps(d)):
        logged = day.move_count
        day.run(min((i + 1) * d.control_s, d.day_s))
        frames.append(frame(day, done))
        progress(i + 1, partial(day, frames[-1], day.move_count - logged))
    drained = {m: eng.drain(DRAIN_CAP_S) for m, eng in day.engines.items()}
    rep = day.report()
    for m, eng in day.engines.items():
        rep["models"][m].update(ttft_slo_ms=eng.dep.ttft_slo_ms, tpot_slo_ms=eng.dep.tpot_slo_ms,
                                label="calibration" if eng.dep.model in CALIBRATED else "prediction",
                                drain_complete=drained[m]["complete"])
    return {**rep, "day_s": d.day_s, "control_s": d.control_s, "doubled": double, "factor": FACTOR,
            "usd_per_chip_hour": day.usd_per_npu_s * 3600, "unit_npus": UNIT_NPUS, "frames": frames,
            "timeline": day.timeline}
