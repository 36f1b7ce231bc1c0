"""`python -m twin region NAME`: run a region of supernodes and print per-supernode and regional
figures; `--in-process` is the single-process reference, `--weak-scaling 1,2,4` the scaling table."""
from __future__ import annotations

import argparse
import os

from twin.cli.args import add_setting, drain_cap, dumps, name, number
from twin.engine.report import DRAIN_CAP_S
from twin.region.driver import CACHE_REUSE, parse_fault, run_region
from twin.region.routing import REGISTRY
from twin.region.scaling import weak_scaling
from twin.region.spec import names, region


def _ks(text: str) -> list[int]:
    try:
        ks = [int(x) for x in text.split(",")]
    except ValueError:
        ks = []
    if not ks or any(not 1 <= k <= 64 for k in ks) or ks != sorted(set(ks)):
        raise argparse.ArgumentTypeError(f"{text!r}: allowed increasing supernode counts 1..64, e.g. 1,2,4")
    return ks


def cmd_region(a) -> int:
    if a.list:
        for n in names():
            r = region(n)
            print(dumps({"name": n, "supernodes": r.size, "deployments": list(r.deployments),
                         "systems": list(r.systems()), "scenario": r.scenario, "link_gbps": r.link_gbps,
                         "link_latency_us": r.link_latency_us, "description": r.description})
                  if a.json else f"{n:<14}{r.size:>3} x  {', '.join(sorted(set(r.deployments)))}  {r.description}")
        return 0
    if not a.name:
        raise ValueError(f"region: a region name is required (allowed: {', '.join(names())})")
    spec = region(a.name)
    duration = a.duration if a.duration is not None else 30.0
    window = a.window if a.window is not None else 1.0
    if a.weak_scaling:
        out = weak_scaling(spec, a.weak_scaling, duration, window, a.seed, a.load)
        print(dumps(out) if a.json else "\n".join(
            f"K={r['supernodes']:<3} wall {r['wall_s']:>8.2f} s  efficiency {r['efficiency']:.2f}  worker CPU "
            f"{r['worker_cpu_s']}  exchange {r['exchange_ms_per_window']} ms/window" for r in out["rows"]))
        return 0
    if a.in_process and (a.scheduler or a.workers):
        raise ValueError("--in-process runs every supernode in this process; allowed without --scheduler and --workers")
    from twin.explore.executor import scheduler_address
    scheduler = scheduler_address(a.scheduler)
    workers = a.workers or (None if scheduler else min(spec.size, os.cpu_count() or 1))
    drain = drain_cap(a.drain)
    drain = DRAIN_CAP_S if drain == "default" else drain
    faults = tuple(parse_fault(f, spec.size, duration) for f in a.fail or ())
    out = run_region(spec, duration, drain_cap=drain, seed=a.seed, load=a.load, policy=a.policy,
                     cache_reuse=a.cache_reuse, window_s=window, faults=faults, workers=workers,
                     scheduler=scheduler, distributed=not a.in_process)
    if a.json:
        print(dumps(out))
        return 0
    g = out["regional"]
    r = g["requests"]
    print(f"region {out['region']}: {len(out['supernodes'])} supernodes, {out['policy']}, cache reuse "
          f"{out['cache_reuse']}, window {out['window_s']:g} s, {out['workers']} worker(s), seed {out['seed']}: "
          f"{out['duration_s']:g} s simulated in {out['cost']['wall_s']} s, then to {out['sim_seconds']} s "
          f"(drain and report) in {out['cost']['finish_wall_s']} s")
    print(f"  region     arrived {r['arrived']}  completed {r['completed']}  rejected {r['rejected']}  timed out "
          f"{r['timed_out']}  in flight {r['in_flight']}  moved {r['moved']['in']}  lost {r['lost']}")
    print(f"             {g['throughput_rps']} req/s  TTFT ms p50 {g['ttft_ms']['p50']} p99 {g['ttft_ms']['p99']}  "
          f"TPOT ms p50 {g['tpot_ms']['p50']} p99 {g['tpot_ms']['p99']}  fetches {g['fetch']['requests']}")
    for s in out["supernodes"]:
        q = s["requests"]
        print(f"  {s['supernode']:>3} {s['status']:<7}routed {s['routed']}  completed {q['completed']}  in flight "
              f"{q['in_flight']}  TTFT p50 {s['ttft_ms']['p50']}  TPOT p50 {s['tpot_ms']['p50']}")
    return 0


def add_region_command(sub) -> None:
    p = sub.add_parser("region", help="a region of supernodes behind a global router, on Dask workers")
    p.add_argument("name", nargs="?", type=name("a region name"),
                   help="region in twin/catalog/regions.toml (see --list)")
    p.add_argument("--list", action="store_true", help="list the regions")
    add_setting(p, "duration_s", also="default 30")
    add_setting(p, "load", also="of the members' summed capacity; default the scenario's")
    add_setting(p, "seed", default=0)
    p.add_argument("--policy", choices=list(REGISTRY), default="least-load", help="the global router's policy")
    p.add_argument("--cache-reuse", choices=CACHE_REUSE, default="off",
                   help="off, or fetch a prompt's prefix from the supernode holding it over the inter-supernode link")
    p.add_argument("--window", type=number(0.005, 60.0, unit="s"),
                   help="simulated seconds between exchanges (a multiple of 0.005; default 1)")
    p.add_argument("--workers", type=number(1, 64, integer=True),
                   help="Dask workers, one group of supernodes each (default: one per supernode up to the CPUs)")
    p.add_argument("--scheduler", help="Dask scheduler tcp://HOST:PORT (default: TWIN_DASK_SCHEDULER, else a local cluster)")
    p.add_argument("--in-process", action="store_true", help="every supernode in this process (the reference run)")
    p.add_argument("--fail", action="append", metavar="SPEC",
                   help="a fault: supernode:I@T (lost at T) or link:I-J@T[+D] (down from T for D s); repeatable")
    p.add_argument("--drain", nargs="?", const="default", metavar="CAP_S",
                   help="after the duration, run until every admitted request has finished (cap default 600 s)")
    p.add_argument("--weak-scaling", type=_ks, metavar="K,K,...",
                   help="time K supernodes of the region's first deployment on K local workers for each K")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_region)
