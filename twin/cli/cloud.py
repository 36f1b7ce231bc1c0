"""`cloud` command, and `run --scenario copool-day`: the co-pool day under each policy.

Prints, per policy, utilisation (per pool and supernode), training steps, switches, inference SLO
attainment and cost per million output tokens, with every price and power assumption used.
"""
from __future__ import annotations

import argparse

from twin.cli.args import add_setting, dumps, table
from twin.cloud.copool import POLICIES, Params, load_params
from twin.cloud.cost import SEEDS, Prices, comparison, day_report, interval, load_prices, priced, verdict
from twin.cloud.live import run_day
from twin.cloud.training import compare

SCENARIOS = ("copool-day",)
_RUN_FLAGS = ("trace", "format", "lenient", "deployment", "rate", "speedup", "cache_capacity",
              "faults", "out", "drain")     # `run` flags that have no meaning for a co-pool day


def days(policies, seed=None, duration=None, load=None, params: dict | None = None,
         prices: Prices | None = None, scenario: str = "copool-day") -> dict:
    """The day under each policy (same seed, same arrivals), with the training comparison."""
    prices = prices or Prices()
    out = {"scenario": scenario, "policies": {}}
    for name in policies:
        p = load_params(**{**(params or {}), "policy": name})
        eng, pool = run_day(scenario, p, seed=seed, duration_s=duration, load=load)
        out.setdefault("seed", eng.seed)
        out.setdefault("day_compression", round(pool.compression, 3))
        out["policies"][name] = day_report(pool, prices)
    out["training_mfu"] = compare()
    return out


def _text(d: dict) -> None:
    print(f"scenario {d['scenario']} (seed {d['seed']}; one simulated second = "
          f"{d['day_compression']:g} s of the day)")
    f = lambda x: "-" if x is None else f"{x:.2f}"
    table((("policy", -16), ("util", 7), ("prefill", 9), ("decode", 8), ("train", 7), ("steps", 9),
           ("switches", 9), ("SLO", 8), ("$/M tok", 9), ("$/step", 9)),
          [(name, *(f(r["utilisation"][k]) for k in ("supernode", "prefill", "decode", "training")),
            f"{r['training_steps']:.0f}", r["switches"], f"{r['inference']['slo_attainment'] or 0:.4f}",
            f"{r['cost_per_million_tokens'] or 0:.4f}", f"{r['cost_per_training_step'] or 0:.2f}")
           for name, r in d["policies"].items()])
    print("  assumptions: " + ", ".join(f"{k}={v}" for k, v in next(iter(d["policies"].values()))["assumptions"].items()))
    t = d["training_mfu"]
    for dep, r in t["systems"].items():
        if "mfu" in r:
            print(f"  training MFU on {t['npus']} chips, {r['system']}: {r['mfu']:.1%} (compute alone "
                  f"{r['mfu_compute_only']:.1%}; exposed all-to-all {r['breakdown_s']['all_to_all_exposed']} s "
                  f"of a {r['step_s']} s step)")
    c = t["claims"]["large_scale_training_utilisation"]
    print(f"  claim (ref 6, not fitted): communication drops training utilisation "
          f"{c['before']:.0%} -> {c['after_communication']:.0%}; enterprise clusters ~"
          f"{t['claims']['enterprise_cluster_utilisation']['value']:.0%}")


def cmd_run_day(a) -> int:
    """`run --scenario copool-day`: every policy with the default knobs."""
    given = [f"--{f.replace('_', '-')}" for f in _RUN_FLAGS if getattr(a, f, None) not in (None, False)]
    if given:
        raise ValueError(f"{given[0]}: scenario {a.scenario!r} is a co-pool day; allowed --duration, "
                         f"--load, --seed, --json (more knobs: python -m twin cloud --help)")
    d = days(POLICIES, seed=a.seed, duration=a.duration, load=a.load)
    print(dumps(d)) if a.json else _text(d)
    return 0


def day_lengths(lengths, seeds: int, params: dict, prices: Prices) -> list[dict]:
    """Co-pool against the dedicated split with the whole day compressed into each of `lengths`
    simulated seconds (as the Cloud page runs it), over `seeds` seeds: each figure's mean and 95%
    interval, and the verdict per figure (None: the interval of the difference spans zero)."""
    rows = []
    for d in lengths:
        usage = comparison(d, params, seeds=seeds, policies=("copool", "dedicated"))
        reports = {k: [priced(u, prices) for u in v] for k, v in usage.items()}
        row = {"day_s": d, "seeds": seeds, "verdict": verdict(reports)}
        for name, rs in reports.items():
            row[name] = {"supernode_util": interval([r["utilisation"]["supernode"] for r in rs]),
                         "usd_per_m_tokens": interval([r["cost_per_million_tokens"] for r in rs])}
        rows.append(row)
    return rows


def _verdict_text(rows: list[dict]) -> None:
    ci = lambda i, f: f"{f(i['mean'])} [{f(i['lo'])}, {f(i['hi'])}]" if i["lo"] is not None else f(i["mean"])
    pct, usd = (lambda x: f"{x:.1%}"), (lambda x: f"{x:.3f}")
    print(f"{'day s':>6}  {'co-pool util':<24}{'dedicated util':<24}{'co-pool $/M':<22}{'dedicated $/M':<22}verdict")
    for r in rows:
        v = r["verdict"]
        say = lambda fig: v[fig]["ahead"] or "not settled"
        print(f"{r['day_s']:>6g}  {ci(r['copool']['supernode_util'], pct):<24}{ci(r['dedicated']['supernode_util'], pct):<24}"
              f"{ci(r['copool']['usd_per_m_tokens'], usd):<22}{ci(r['dedicated']['usd_per_m_tokens'], usd):<22}"
              f"util: {say('supernode_util')}; $/M: {say('usd_per_m_tokens')}")


def cmd_cloud(a) -> int:
    params = {k: getattr(a, k) for k in Params.model_fields if k != "policy" and getattr(a, k, None) is not None}
    prices = load_prices(**{k: getattr(a, k) for k in Prices.model_fields})
    load_params(**params)                      # refuse a bad knob before the first run
    if a.day_lengths:
        rows = day_lengths(a.day_lengths, a.seeds, params, prices)
        print(dumps(rows)) if a.json else _verdict_text(rows)
        return 0
    d = days(a.policy or POLICIES, seed=a.seed, duration=a.duration, load=a.load,
             params=params, prices=prices)
    print(dumps(d)) if a.json else _text(d)
    return 0


def add_cloud_command(sub) -> None:
    c = sub.add_parser("cloud", help="co-pool day: serving and training on one supernode, per policy")
    c.add_argument("--policy", action="append", choices=POLICIES,
                   help="policy to run (repeatable; default: all three)")
    add_setting(c, "duration_s", also="default: the scenario's day, 600")
    add_setting(c, "load", also="the day's mean")
    add_setting(c, "seed")
    for model in (Params, Prices):
        for name, f in model.model_fields.items():
            if name == "policy":
                continue
            kind = str if f.annotation in (str,) or "Literal" in str(f.annotation) else float
            typ = _bounded(model, name) if kind is float else str
            c.add_argument(f"--{name.replace('_', '-')}", type=typ, default=None,
                           help=f"{f.description or name} (default {f.default})")
    c.add_argument("--day-lengths", type=_lengths, metavar="D,D,...",
                   help="compare co-pool and the dedicated split with the whole day compressed into each of "
                        "these simulated seconds (as the Cloud page does), over --seeds seeds, with 95%% intervals")
    c.add_argument("--seeds", type=int, default=SEEDS, choices=range(1, 11), metavar="N",
                   help=f"seeds per day length with --day-lengths (1 to 10, default {SEEDS})")
    c.add_argument("--json", action="store_true")
    c.set_defaults(fn=cmd_cloud)


def _lengths(text: str) -> list[float]:
    try:
        out = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"day lengths = {text!r}: comma-separated seconds, e.g. 60,120,300") from None
    if not all(10 <= x <= 3600 for x in out):
        raise argparse.ArgumentTypeError(f"day lengths = {text!r}: each 10 to 3600 simulated seconds")
    return out


def _bounded(model, name: str):
    """A number whose range is checked when the model validates it (the error names the field)."""
    def parse(text: str):
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} = {text!r}: not a number") from None
        return int(x) if model.model_fields[name].annotation is int and x == int(x) else x
    return parse
