"""`sweep`, `capacity`, `compare` and `explore-bench` commands (registered by twin/__main__.py).

Errors follow the CLI's rule: one line naming the flag and what is allowed, exit status 2, raised
as ValueError before any work starts (twin.__main__.main prints them)."""
from __future__ import annotations

import argparse

from ..cli_args import dumps, field_number, name, number, out_path
from ..engine.scenario import Scenario
from . import runner
from .cache import Cache
from .evaluate import METRICS
from .points import SOURCES, parse_vary, plan
from .sweep import run_sweep, summarize

DEFAULT_DEPLOYMENT = "cloudmatrix-infer-paper"
DEFAULT_SCENARIO = "paper-decode"


def _client(a):
    addr = runner.scheduler_address(a.scheduler)
    return runner.connect(addr) if addr else None


def _table(rows: list[dict], cols: list[str]) -> None:
    widths = [max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in cols]
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    for r in rows:
        print("  ".join(_fmt(r.get(c)).rjust(w) for c, w in zip(cols, widths)))


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def cmd_sweep(a) -> int:
    varies = [parse_vary(v) for v in a.vary]
    tasks = plan(a.deployment, a.scenario, varies, a.seeds, a.duration, a.source)
    client = _client(a)
    try:
        rows, counts = run_sweep(tasks, None if a.no_cache else Cache(), a.workers, client,
                                 progress=not a.no_progress)
    finally:
        if client is not None:
            client.close()
    if a.out:
        import pandas as pd
        df = pd.DataFrame(rows)
        df.to_parquet(a.out, index=False) if a.out.endswith(".parquet") else df.to_csv(a.out, index=False)
    names = [n for n, _ in varies]
    points = summarize(rows, names)
    if a.json:
        print(dumps({"rows": rows, "points": points, **counts}))
    else:
        _table(points, names + ["seeds", "source", *METRICS])
        print(f"{counts['runs']} runs, {counts['cached']} from the cache")
    return 0


def add_explore_commands(sub) -> None:
    sw = sub.add_parser("sweep", help="run the engine (or the perf model) over a grid of settings")
    sw.add_argument("--deployment", default=DEFAULT_DEPLOYMENT, type=name("a deployment name"))
    sw.add_argument("--scenario", default=DEFAULT_SCENARIO, type=name("a scenario name"),
                    help=f"named scenario (default {DEFAULT_SCENARIO})")
    sw.add_argument("--vary", action="append", required=True, metavar="KEY=V1,V2,...",
                    help="a key and its values (or LO:HI:STEP); repeat for a grid")
    sw.add_argument("--seeds", type=number(1, 32, integer=True), default=1, help="seeds per point (1..32)")
    sw.add_argument("--duration", type=field_number(Scenario, "duration_s", unit="s"), default=30.0,
                    help="simulated seconds per run (default 30)")
    sw.add_argument("--source", choices=SOURCES, default="engine",
                    help="engine (simulate) or model (perf-model steady state, no queueing)")
    sw.add_argument("--scheduler", help="Dask scheduler tcp://HOST:PORT (default: TWIN_DASK_SCHEDULER, "
                                        "else a local process pool)")
    sw.add_argument("--workers", type=number(1, 256, integer=True), default=None,
                    help="local pool size (default: CPU count)")
    sw.add_argument("--out", type=out_path, help="write the rows to FILE.parquet (or .csv)")
    sw.add_argument("--no-cache", action="store_true", help="ignore and do not fill the Parquet cache")
    sw.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    sw.add_argument("--json", action="store_true")
    sw.set_defaults(fn=cmd_sweep)
