"""`run --scenario maas-day`: several models on one supernode through a compressed day."""
from __future__ import annotations

import time

from twin.cli.args import drain_cap, dumps, table
from twin.cloud.maas import Maas, days, load_day

_RUN_FLAGS = ("trace", "format", "lenient", "deployment", "rate", "load", "speedup", "cache_capacity",
              "faults", "out", "deadline")     # `run` flags a MaaS day has no use for (each model has its own)


def cmd_run_maas(a) -> int:
    given = [f"--{f.replace('_', '-')}" for f in _RUN_FLAGS if getattr(a, f, None) not in (None, False)]
    if given:
        raise ValueError(f"{given[0]}: scenario {a.scenario!r} is a MaaS day (each model has its own traffic "
                         f"in twin/catalog/maas.toml); allowed --duration, --seed, --drain, --json")
    cap = drain_cap(a.drain)
    day = Maas(load_day(a.scenario, seed=a.seed))
    t0 = time.perf_counter()
    day.run(a.duration)
    drained = None if cap is None else day.drain() if cap == "default" else {
        m: eng.drain(cap) for m, eng in day.engines.items()}
    out = day.report()
    out["wall_seconds"] = round(time.perf_counter() - t0, 3)
    if drained is not None:
        out["drain"] = {m: {"seconds": d["seconds"], "complete": d["complete"]} for m, d in drained.items()}
    print(dumps(out)) if a.json else _text(out)
    return 0


def _text(d: dict) -> None:
    print(f"{d['scenario']} on {d['system']}: {d['sim_seconds']} s simulated ({d['day_compression']:g} s of the day "
          f"each), moves {'on' if d['moves_enabled'] else 'off'}, {d['wall_seconds']} s wall")
    table((("model", -14), ("arrived", 9), ("done", 9), ("rej", 6), ("t/o", 6), ("lost", 5), ("SLO", 8),
           ("util", 7), ("NPUs", 6), ("$/M tok", 9)),
          [(m, *(r["requests"][k] for k in ("arrived", "completed", "rejected", "timed_out", "lost")),
            f"{r['slo_attainment'] or 0:.3f}", f"{r['utilisation'] or 0:.2f}", f"{r['npus']['mean']:.0f}",
            f"{r['usd_per_million_tokens'] or 0:.3f}") for m, r in d["models"].items()])
    mv = d["moves"]
    print(f"  moves {mv['count']}, {mv['npus_moved']} NPUs moved, weight load {mv['weight_load_s']} s "
          f"(day clock, from {mv['weights_from']}); conserved {d['conserved']}")


def is_maas(scenario: str | None) -> bool:
    return scenario in days()
