"""The co-pool day on an engine (the wiring that builds one): `run_day` runs a day under one policy,
and a live twin whose scenario is a co-pool day runs the scheduler inside its own engine (`attach`,
called by the runner's factory: the scheduler registers itself as the engine's "copool" extension),
its snapshots carry the day (`CoPool.view`), and the policy knobs are a typed engine command
(`SetCoPool`), checked once when built (against the day the twin shows, `check`) and merged with the
live knobs when it lands, sent through the twin's action path (twin.live.actions: logged on the
shared twin, rate-limited per client).

A live twin runs on past one day: the timeline keeps the last TIMELINE_ROWS intervals and the
switch log the last SWITCH_ROWS moves (memory bounds per twin; `moves` counts them all).
"""
from __future__ import annotations

from dataclasses import dataclass

from twin.model.config import CatalogError, _validate
from twin.engine import Engine
from twin.engine.commands import Command
from twin.engine.ports import CommandTarget
from twin.i18n import N_
from twin.cloud.copool import EXTENSION, CoPool, Params, load_params
from twin.cloud.training import TrainingJob

SCENARIOS = ("copool-day",)
TIMELINE_ROWS = 1200            # two 600 s days at 1 s intervals (~0.5 MB per twin)
SWITCH_ROWS = 500
CHANGES_PER_MIN = 12            # co-pool changes a client may send one twin per minute
KNOBS = tuple(k for k in Params.model_fields)


def attach(eng: Engine) -> Engine:
    """Run the co-pool scheduler (policy copool, default knobs) in a co-pool scenario's engine."""
    if eng.scenario.name in SCENARIOS and EXTENSION not in eng.extensions:
        CoPool(eng, Params(), TrainingJob(eng.scenario.deployment), keep_rows=TIMELINE_ROWS,
               keep_switches=SWITCH_ROWS)
    return eng


def factory(**params) -> Engine:
    """The live runner's engine factory: an Engine, with the co-pool day attached when it is one."""
    return attach(Engine(**params))


def run_day(scenario: str = "copool-day", params: Params | None = None, job: TrainingJob | None = None,
            seed: int | None = None, **overrides) -> tuple[Engine, CoPool]:
    """Run the scenario's day under one policy; returns the engine and the co-pool record."""
    eng = Engine(scenario, seed=seed, **overrides)
    pool = CoPool(eng, params or Params(), job or TrainingJob(eng.scenario.deployment))
    eng.advance(eng.scenario.duration_s)
    return eng, pool


def merged(fields, current: dict | None) -> Params:
    """The knobs after a change (`fields` over `current`; None: each field alone, no cross-field
    check); ValueError naming a bad field."""
    if not isinstance(fields, dict) or not fields:
        raise ValueError(f"copool: allowed a table of knobs, e.g. {{'policy': 'dedicated', "
                         f"'dedicated_prefill_groups': 4}} (knobs: {', '.join(KNOBS)})")
    unknown = [k for k in fields if k not in KNOBS]
    if unknown:
        raise ValueError(f"copool.{str(unknown[0])[:40]}: unknown knob (allowed: {', '.join(KNOBS)})")
    try:
        if current is None:
            return _validate(Params, fields, "copool")
        return load_params(**{**current, **fields})
    except CatalogError as exc:
        raise ValueError(str(exc)) from None


def check(fields, view: dict | None) -> "SetCoPool":
    """A co-pool change checked against the day a snapshot shows (None: no day runs there), as the
    engine's command (checked here once; the engine merges it with the knobs it has when it lands)."""
    if not view:
        raise ValueError(f"copool: this twin does not run a co-pool day; load scenario "
                         f"{SCENARIOS[0]} first")
    p = merged(fields, view["params"])
    for kind in ("prefill", "decode"):
        n, keep, have = (getattr(p, f"dedicated_{kind}_groups"), getattr(p, f"min_{kind}_groups"),
                         view["groups"][kind])
        if n > have - keep:
            raise ValueError(f"copool.dedicated_{kind}_groups = {n}: allowed 0..{max(have - keep, 0)} "
                             f"({have} {kind} groups, {keep} must serve)")
    return SetCoPool(dict(fields), checked=True)


@dataclass(frozen=True)
class SetCoPool(Command):
    """Co-pool knobs to change (the rest stay as they are)."""
    name = "copool"

    fields: dict
    checked: bool = False        # built by `check` (the knobs already checked against the day)

    def __post_init__(self):
        if not self.checked:
            merged(self.fields, None)             # unknown knobs and bad values: refused here
        object.__setattr__(self, "fields", dict(self.fields))

    def apply(self, eng: CommandTarget) -> None:
        pool = eng.extensions.get(EXTENSION)
        if pool is None:
            raise ValueError("copool: this engine runs no co-pool day")
        pool.configure(merged(self.fields, pool.params.model_dump()))
        eng.log("copool", N_("co-pool: %(fields)s"), fields=", ".join(f"{k}={v}" for k, v in self.fields.items()))


def day_figures(view: dict) -> dict:
    """Figures of the day so far (the kept timeline): utilisation per account, training steps."""
    rows, n = view["timeline"], 384.0
    if not rows:
        return {}
    n = sum(view["npus"].values()) or n
    useful = sum(r["useful_prefill_npus"] + r["useful_decode_npus"]
                 + (r["training_npus"] if r["training_running"] else 0.0) for r in rows)
    lent = sum(r["training_npus"] + r["switching_npus"] for r in rows)
    return {"supernode_util": useful / (n * len(rows)),
            "lent_share": lent / (n * len(rows)),
            "slo": rows[-1]["slo_attainment"], "steps": view["steps"], "moves": view["moves"],
            "hours": len(rows) * 24.0 / view["period_s"]}
