"""`sweep`, `capacity`, `compare` and `explore-bench` commands (registered by twin/cli/main.py).

Errors follow the CLI's rule: one line naming the flag and what is allowed, exit status 2, raised
as ValueError before any work starts (twin.cli.main.main prints them)."""
from __future__ import annotations

from twin.cli.args import add_setting, dumps, name, number, out_path
from twin.explore import executor as runner
from twin.cli.explore_bench import bench
from twin.explore.capacity import DEFAULT_ATTAINMENT, Spec, capacity, search, search_space, settings
from twin.explore.compare import compare
from twin.explore import whatif
from twin.explore.rowcache import Cache
from twin.explore.evaluate import METRICS
from twin.explore.points import SOURCES, parse_vary, plan
from twin.explore.sweep import run_sweep, summarize

DEFAULT_DEPLOYMENT = "cloudmatrix-infer-paper"
DEFAULT_SCENARIO = "paper-decode"
SEARCH_SCENARIO = "paper-prefill"     # full pipeline (prefill, KV transfer, decode), with output_len 256


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
        import pandas as pd            # here, not at the top: `python -m twin bench` need not load it
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


def _ints(flag: str, text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        vals = [int(v) for v in text.split(",")]
    except ValueError:
        vals = []
    if not vals or any(v < 1 for v in vals):
        raise ValueError(f"{flag} {text!r}: allowed a list of positive integers, e.g. 2,4,6")
    return vals


def cmd_capacity(a) -> int:
    fixed = settings(a.set) + tuple((k, v) for k, v in (("ttft_slo_ms", a.ttft_slo), ("tpot_slo_ms", a.tpot_slo))
                                    if v is not None)
    scenario = a.scenario or (SEARCH_SCENARIO if a.search else DEFAULT_SCENARIO)
    if a.search and a.scenario is None:
        fixed = (("output_len", 256),) + fixed
    spec = Spec(a.deployment, scenario, fixed, a.duration, a.seed,
                DEFAULT_ATTAINMENT if a.attainment is None else a.attainment)
    if not a.search:
        out = capacity(spec)
        print(dumps(out) if a.json else
              f"max rate {out['max_rate']:g} req/s ({out['goodput_per_chip']:g} goodput tokens/s per chip) on "
              f"{out['deployment']} / {out['scenario']}; perf model capacity {out['model_capacity_rps']:g} req/s; "
              f"{len(out['probes'])} engine runs in {out['seconds']:g} s")
        return 0
    pre, dec = search_space(spec, _ints("--prefill-instances", a.prefill_instances),
                            _ints("--decode-ep", a.decode_ep))
    client = _client(a)
    try:
        out = search(spec, pre, dec, a.workers, client, progress=not a.no_progress)
    finally:
        if client is not None:
            client.close()
    if a.json:
        print(dumps(out))
    else:
        _table(out["all"], ["prefill_instances", "prefill_ep", "decode_ep", "decode_batch_per_die",
                            "max_rate", "goodput_per_chip"])
        print(f"{out['tried']} configurations in {out['seconds']:g} s")
    return 0


def cmd_compare(a) -> int:
    variants = whatif.parse_variants(a.with_) if a.with_ else ()
    measured = {n: whatif.run_row(n) if a.no_cache else whatif.measure(n)
                for n in whatif.needs_engine(variants, a.tpot_slo)}
    out = compare(a.tpot_slo)
    if variants:
        out["beside_baseline"] = whatif.beside(variants, a.tpot_slo, measured)
    if a.json:
        print(dumps(out))
        return 0
    print(f"DeepSeek-R1 decode, {out['workload']['prompt']} prompt + {out['workload']['output']} output, "
          f"TPOT SLO {a.tpot_slo:g} ms (source: perf model)")
    _table(out["systems"], ["deployment", "batch_per_chip", "tokens_per_s_per_chip", "tokens_per_s_per_tflops",
                            "tokens_per_s_per_kw", "usd_per_million_tokens", "tpot_ms", "alltoall_share"])
    print("\nEP sweep (batch per die as deployed, or the largest whose KV fits):")
    _table([r for rows in out["ep_sweep"].values() for r in rows],
           ["deployment", "decode_ep", "fabric", "batch_per_chip", "tokens_per_s_per_chip", "tpot_ms",
            "alltoall_share"])
    for s in out["systems"]:
        print(f"  {s['system']}: power {s['chip_power_kw']} kW/chip ({s['chip_power_source']}); "
              f"price ${s['usd_per_chip_hour']}/chip-hour ({s['usd_per_chip_hour_source']})")
    if variants:
        _beside(out["beside_baseline"])
    return 0


def _beside(b: dict) -> None:
    """The variants beside the baseline: step-time figures, engine figures of the what-ifs."""
    print(f"\nBeside the baseline (engine: scenario {b['run']['scenario']}, seed {b['run']['seed']}, "
          f"{b['run']['duration_s']:g} simulated s; {b['run']['command']}):")
    rows = [{"deployment": r["deployment"], "label": r["label"], **r["step_model"],
             "step_same": r["step_equals_baseline"], **{k: (r["engine"] or {}).get(k) for k in whatif.ENGINE_FIGURES}}
            for r in b["rows"]]
    _table(rows, ["deployment", "label", "tokens_per_s_per_chip", "tpot_ms", "step_same", *whatif.ENGINE_FIGURES])
    for r in b["rows"]:
        if r["tco_left_out"]:
            print(f"  {r['deployment']}: no TCO ({r['tco_left_out']})")


def cmd_explore_bench(a) -> int:
    out = bench(a.points, a.duration, runner.scheduler_address(a.scheduler))
    if a.json:
        print(dumps(out))
        return 0
    print(f"{out['sweep']} ({out['cpus']} CPUs; 1-min load average {out['load_average_before']:g} before, "
          f"{out['load_average_after']:g} after)")
    for k in ("one_process", "local_pool_2", "dask_1_worker", "dask_2_workers"):
        print(f"  {k:<16}{out[k]['points_per_minute']:>9g} points/min  ({out[k]['seconds']:g} s)")
    print(f"  Dask 2 workers vs 1: {out['dask_speedup_2_vs_1']:g}x")
    c = out["capacity_search"]
    print(f"  one capacity search ({c['deployment']}, {c['scenario']}): {c['seconds']:g} s, "
          f"{c['engine_runs']} engine runs, max rate {c['max_rate']:g} req/s")
    return 0


def add_explore_commands(sub) -> None:
    sw = sub.add_parser("sweep", help="run the engine (or the perf model) over a grid of settings")
    sw.add_argument("--deployment", default=DEFAULT_DEPLOYMENT, type=name("a deployment name"))
    sw.add_argument("--scenario", default=DEFAULT_SCENARIO, type=name("a scenario name"),
                    help=f"named scenario (default {DEFAULT_SCENARIO})")
    sw.add_argument("--vary", action="append", required=True, metavar="KEY=V1,V2,...",
                    help="a key and its values (or LO:HI:STEP); repeat for a grid")
    sw.add_argument("--seeds", type=number(1, 32, integer=True), default=1, help="seeds per point (1..32)")
    add_setting(sw, "duration_s", "per run; default 30", default=30.0)
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

    cap = sub.add_parser("capacity", help="highest request rate meeting the SLOs (engine), or --search "
                                          "the prefill/decode split and decode EP degree")
    cap.add_argument("--deployment", default=DEFAULT_DEPLOYMENT, type=name("a deployment name"))
    cap.add_argument("--scenario", type=name("a scenario name"),
                     help=f"synthetic scenario (default {DEFAULT_SCENARIO}; with --search {SEARCH_SCENARIO} "
                          f"at output_len=256, the full pipeline)")
    cap.add_argument("--ttft-slo", type=number(0, 600_000, lo_open=True, unit="ms"), help="TTFT SLO, ms")
    cap.add_argument("--tpot-slo", type=number(0, 10_000, lo_open=True, unit="ms"), help="TPOT SLO, ms")
    cap.add_argument("--attainment", type=number(0, 1, lo_open=True), default=None,
                     help="share of requests that must meet both SLOs (default 0.99)")
    cap.add_argument("--set", action="append", metavar="KEY=VALUE", help="a fixed setting (sweep keys)")
    add_setting(cap, "duration_s", "per probe; default 30", default=30.0)
    add_setting(cap, "seed", default=0)
    cap.add_argument("--search", action="store_true",
                     help="search prefill instances x decode EP (the AIConfigurator question)")
    cap.add_argument("--prefill-instances", help="--search: prefill instance counts, e.g. 2,4,6,8")
    cap.add_argument("--decode-ep", help="--search: decode EP degrees in dies, e.g. 64,160,320")
    cap.add_argument("--scheduler", help="Dask scheduler tcp://HOST:PORT (--search)")
    cap.add_argument("--workers", type=number(1, 256, integer=True), default=None)
    cap.add_argument("--no-progress", action="store_true")
    cap.add_argument("--json", action="store_true")
    cap.set_defaults(fn=cmd_capacity)

    cmp = sub.add_parser("compare", help="the same model and workload on CloudMatrix384 and GPU systems")
    cmp.add_argument("--tpot-slo", type=number(0, 10_000, lo_open=True, unit="ms"), default=50.0,
                     help="TPOT SLO of every system's operating point, ms (default 50, ref 4)")
    cmp.add_argument("--with", dest="with_", metavar="NAMES",
                     help=f"variants beside CloudMatrix384, comma-separated: {', '.join(whatif.VARIANTS)} (what-ifs "
                          f"are measured on the engine: a 30 s run each, cached)")
    cmp.add_argument("--no-cache", action="store_true", help="--with: run the engine even if measured before")
    cmp.add_argument("--json", action="store_true")
    cmp.set_defaults(fn=cmd_compare)

    eb = sub.add_parser("explore-bench", help="sweep points per minute (one process, pool, Dask 1 and 2 "
                                             "workers) and one capacity search's time")
    eb.add_argument("--points", type=number(4, 500, integer=True), default=24, help="sweep points (4..500)")
    eb.add_argument("--duration", type=number(1, 600, unit="s"), default=30.0,
                    help="simulated seconds per point (1..600)")
    eb.add_argument("--scheduler", help="run the 2-worker figure on this Dask scheduler instead of a "
                                        "loopback LocalCluster")
    eb.add_argument("--json", action="store_true")
    eb.set_defaults(fn=cmd_explore_bench)
