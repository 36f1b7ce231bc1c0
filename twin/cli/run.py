"""`run` and `bench` commands: drive the engine from the command line."""
from __future__ import annotations

import os
import sys
import time

from twin.cli.bench import bench, scaling, table
from twin.cli.bench_turns import in_turns
from twin.cli.args import add_setting, drain_cap, dumps, name, number, out_path
from twin.engine import Engine, report
from twin.engine.faults import load_fault_file
from twin.engine.scenario import load_scenario
from twin.explore import incident
from twin.cli.fingerprint import fingerprints
from twin.workload import FORMATS


def _scenario(a, spec: dict):
    """The run's scenario from the flags; a fault file also names its scenario, seed and duration,
    which the flags override. Flags that the chosen workload would ignore are refused."""
    trace = a.trace     # a file in this folder is a path, not a trace name
    if trace and "/" not in trace and os.path.isfile(trace):
        trace = os.path.join(".", trace)
    scenario = None if trace else (a.scenario or spec.get("scenario") or "default")
    seed = a.seed if a.seed is not None else spec.get("seed")
    kw = dict(deployment=a.deployment, rate=a.rate, speedup=a.speedup,
              cache_capacity=a.cache_capacity,
              duration_s=a.duration if a.duration is not None else spec.get("duration_s"),
              faults=spec.get("path"), load=a.load, deadline_s=a.deadline, trace_format=a.format,
              lenient=True if a.lenient else None)
    if trace:
        kw.update(workload="trace", trace=trace, name="trace")
    sc = load_scenario(scenario, seed=seed, **kw)
    ignored = ([f for f, v in (("--rate", a.rate), ("--load", a.load)) if v is not None]
               if sc.workload == "trace" else
               [f for f, v in (("--speedup", a.speedup), ("--format", a.format), ("--lenient", a.lenient))
                if v not in (None, False)])
    if sc.pipeline == "decode_only" and a.deadline is not None:
        raise ValueError(f"--deadline: scenario {sc.name!r} is decode-only (its KV comes from outside the run: "
                         f"nothing waits for prefill); allowed with a scenario that prefills (pipeline 'full')")
    if ignored:
        kind = ("replays a trace (its own arrival times)" if sc.workload == "trace"
                else "is synthetic (no trace)")
        raise ValueError(f"{ignored[0]}: scenario {sc.name!r} {kind}; allowed "
                         f"{'--speedup, --format, --lenient' if sc.workload == 'trace' else '--rate or --load'}")
    for i, f in enumerate(spec.get("fault", []), 1):
        if f["at_s"] >= sc.duration_s:
            raise ValueError(f"{os.path.basename(spec['path'])}: fault {i} at_s = {f['at_s']:g} s is not before "
                             f"the end of the run (duration_s = {sc.duration_s:g} s); allowed 0 <= at_s < "
                             f"duration_s (raise --duration or move the fault)")
    return sc


def _engine(a):
    return Engine(_scenario(a, load_fault_file(a.faults) if a.faults else {}))


def cmd_run(a) -> int:
    drain = drain_cap(a.drain)
    sink = _RowWriter(a.out) if a.out else None
    eng = _engine(a)
    if sink:
        eng.req.sink = sink.write            # rows leaving the engine's window go to disk
    duration = eng.scenario.duration_s
    t0 = time.perf_counter()
    step = max(eng.scenario.interval_s, min(60.0, duration / 20))
    eng.run(duration, step=step)
    if drain == "default":
        eng.drain()
    elif drain is not None:
        eng.drain(drain)
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    whatifs = {} if a.no_whatif else incident.whatif(eng, step)     # windows end at duration_s, as theirs
    out = eng.summary()
    out["wall_seconds"] = round(wall, 3)
    if eng.faults.faults:   # goodput over a window with no finished interval: None, not measured
        out["faults"] = [{**r, "whatif": whatifs[r["id"]]} if r["id"] in whatifs else r for r in eng.fault_report()]
    out["detector"] = eng.faults.detector.summary()
    if whatifs:
        out["whatif_wall_seconds"] = round(time.perf_counter() - t1, 3)
    if eng.faults.totals:
        out["fault_totals"] = eng.faults.totals
    notes = list(getattr(getattr(eng.source, "workload", None), "notes", ()))
    for note in notes:              # e.g. trace rows re-sorted: nothing changes silently
        print(f"note: {note}", file=sys.stderr)
    if notes:
        out["trace_notes"] = notes
    if sink:
        sink.write(eng.req.frame())
        sink.close()
        _write(eng, a.out)
        out["out"] = a.out
    if a.json:
        print(dumps(out))
    else:
        r = out["requests"]
        print(f"{out['scenario']} on {out['deployment']}, {out['sim_seconds']} s simulated in {wall:.2f} s (seed {out['seed']})")
        print(f"  requests   arrived {r['arrived']}  completed {r['completed']}  in flight {r['in_flight']}  rejected {r['rejected']}"
              f"  timed out {r['timed_out']}"
              f"  lost {r['lost']}  tokens short {r['tokens_short']}  conserved {r['conserved']}")
        if out.get("drain"):
            d = out["drain"]
            print(f"  drain      {d['seconds']} s (cap {d['cap_s']:g} s), "
                  + ("every request finished" if d["complete"] else f"{d['still_in_flight']} still in flight at the cap"))
        print(f"  tokens/s per NPU   prefill {out['prefill']['tokens_per_s_per_npu']}  decode {out['decode']['tokens_per_s_per_npu']}")
        print(f"  TTFT ms  p50 {out['ttft_ms']['p50']}  p99 {out['ttft_ms']['p99']}    TPOT ms  p50 {out['tpot_ms']['p50']}  p99 {out['tpot_ms']['p99']}")
        if out.get("trace_rows_skipped"):
            print(f"  lenient trace: {out['trace_rows_skipped']} bad row(s) skipped")
        print(f"  SLO attainment {out['slo_attainment']}   cache hit ratio: block {out['cache']['block_hit_ratio']}  token {out['cache']['token_hit_ratio']}")
        for f in out.get("faults", []):
            print(f"  fault {f['kind']} {f['target']}: detect {f['detect_s']} s, recover {f['recover_s']} s, "
                  f"affected {f['requests_affected']}, requeued {f['requeued']}, lost {f['lost']}")
            if "tpot_before_ms" in f:
                print(f"    TPOT p50 ms before {f['tpot_before_ms']}  during {f['tpot_during_ms']}  after "
                      f"{f['tpot_after_ms']}  ({f['detected_by']}; {f['mitigation'] or 'not mitigated'})")
            if "whatif" in f:
                print(f"    what-if: {f['whatif']}")
        d = out["detector"]
        print(f"  detector   {d['flags']} flag(s), {d['false_alarms']} false alarm(s) "
              f"(threshold {d['threshold']}x the group's median for {d['window_s']} s)")
    return 0


def _out_ext(path: str) -> str:
    ext = os.path.splitext(path)[1]
    if ext not in (".parquet", ".csv"):
        raise ValueError(f"--out = {path!r}: allowed extensions .parquet or .csv")
    return ext


class _RowWriter:
    """Per-request rows streamed to PATH in chunks (Parquet row groups or CSV appends), so a run
    of any length never holds them all."""

    def __init__(self, path: str):
        self.path, self.ext = path, _out_ext(path)
        self._pq = None
        self._first = True

    def write(self, df) -> None:
        if self.ext == ".csv":
            df.to_csv(self.path, mode="w" if self._first else "a", header=self._first, index=False)
        else:
            import pyarrow as pa               # lazy: only a .parquet --out needs pyarrow (heavy)
            import pyarrow.parquet as pq
            table = pa.Table.from_pandas(df, preserve_index=False)
            if self._pq is None:
                self._pq = pq.ParquetWriter(self.path, table.schema)
            self._pq.write_table(table.cast(self._pq.schema))
        self._first = False

    def close(self) -> None:
        if self._pq is not None:
            self._pq.close()


def _write(eng, path: str) -> None:
    """Per-interval, per-link and per-die rows beside the streamed request rows at PATH
    (PATH.intervals.EXT, PATH.links.EXT, PATH.dies.EXT), Parquet or CSV by extension."""
    ext = _out_ext(path)
    base = path[:-len(ext)]
    frames = ((eng.metrics.frame(), f"{base}.intervals{ext}"),
              (report.link_frame(eng), f"{base}.links{ext}"), (report.die_frame(eng), f"{base}.dies{ext}"))
    for df, p in frames:
        if ext == ".parquet":
            df.to_parquet(p)
        else:
            df.to_csv(p, index=False)


def cmd_bench(a) -> int:
    """Engine speed on one scenario, or (--scaling) against load and deployment size."""
    if not a.against and (a.slice is not None or a.runs is not None):
        raise ValueError("bench: --slice and --runs go with --against CHECKOUT (they time two checkouts in turns)")
    if a.fingerprint:
        rows = fingerprints(a.seed)
        print(dumps(rows) if a.json else "\n".join(
            f"{r['run']:<58}{r['rows']:>14}{r['summary']:>14}{r['events']:>14}{r['simpy_events']:>10}"
            for r in rows))
        return 0
    if a.against:
        out = in_turns(a.against, a.scenario, a.duration or 600.0, a.slice or 10.0, a.seed, a.runs or 1,
                       deployment=a.deployment, load=a.load)
        print(dumps(out) if a.json else "\n".join(f"{k:<30}{v}" for k, v in out.items()))
        return 0
    if a.scaling:
        rows = scaling(a.duration or 60.0, a.seed)
        print(dumps(rows) if a.json else table(rows))
        return 0
    out = bench(a.scenario, a.duration, a.seed, load=a.load, deployment=a.deployment,
                cache_capacity=a.cache_capacity)
    if a.json:
        print(dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:<30}{v}")
    return 0


def add_run_commands(sub) -> None:
    run = sub.add_parser("run", help="simulate a scenario or a trace and print a summary")
    src = run.add_mutually_exclusive_group()
    src.add_argument("--scenario", type=name("a scenario name"),
                     help="named scenario (twin/catalog/scenarios.toml; default: default)")
    src.add_argument("--trace", type=name("a trace file or a trace name"),
                     help="trace file (Mooncake JSONL, Azure CSV or BurstGPT CSV) or name")
    run.add_argument("--format", choices=FORMATS, help="trace format (default: detect)")
    run.add_argument("--lenient", action="store_true", help="skip bad trace rows and report how many")
    run.add_argument("--deployment", type=name("a deployment name"))
    add_setting(run, "duration_s")
    rate = run.add_mutually_exclusive_group()
    add_setting(rate, "rate")
    add_setting(rate, "load")
    add_setting(run, "speedup")
    add_setting(run, "deadline_s")
    run.add_argument("--cache-capacity", help="EMS DRAM bytes in total (1..1e18), 'default' or 'unlimited'")
    run.add_argument("--faults", type=name("a fault file (TOML) or a demo name"),
                     help="fault scenario file (TOML) or a demo name in twin/catalog/faults")
    add_setting(run, "seed")
    run.add_argument("--out", type=out_path,
                     help="stream per-request and per-interval data (.parquet or .csv) into an existing folder")
    run.add_argument("--drain", nargs="?", const="default", metavar="CAP_S",
                     help="after the duration, stop arrivals and run until every admitted request "
                          "has finished, at most CAP_S simulated seconds (default 600)")
    run.add_argument("--no-whatif", action="store_true",
                     help="with gray faults in --faults: skip the what-if (two more runs of the same seed: "
                          "without the fault, and without its mitigation)")
    run.add_argument("--json", action="store_true")
    run.set_defaults(fn=cmd_run)

    bench = sub.add_parser("bench", help="engine speed: one scenario, or --scaling (load and size)")
    bench.add_argument("--scenario", default="paper-decode", type=name("a scenario name"),
                       help="named scenario (default paper-decode: the paper's decode setting at 90%% load)")
    add_setting(bench, "duration_s", also="default: the scenario's; 60 with --scaling")
    add_setting(bench, "load")
    bench.add_argument("--deployment", type=name("a deployment name"))
    bench.add_argument("--cache-capacity", help="EMS DRAM bytes in total (1..1e18), 'default' or 'unlimited'")
    mode = bench.add_mutually_exclusive_group()
    mode.add_argument("--scaling", action="store_true",
                      help="table of wall time against load (0.3, 0.6, 0.9) and deployment size")
    mode.add_argument("--fingerprint", action="store_true",
                      help="hashes of request rows, summary and event log of 7 fixed-seed runs (a speed "
                           "change should leave them alone)")
    mode.add_argument("--against", metavar="CHECKOUT", type=name("a folder"),
                      help="time this checkout and another (e.g. a git worktree of an older commit) in "
                           "turns on the same run: the CPU each takes on the same machine")
    bench.add_argument("--slice", type=number(0.1, 3600.0),
                       help="--against: simulated seconds per turn (0.1..3600, default 10)")
    bench.add_argument("--runs", type=number(1, 20, integer=True), help="--against: runs each (1..20)")
    add_setting(bench, "seed", default=0)
    bench.add_argument("--json", action="store_true")
    bench.set_defaults(fn=cmd_bench)
