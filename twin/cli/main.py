"""Command line: perf, validate, calibrate, topology, run, bench (and sweep, capacity, compare, serve, faults).

Every error a user can cause prints one line naming what was wrong and exits with status 2.
"""
from __future__ import annotations

import argparse
import os
import sys

from twin.predict.ems import BLOCK_TOKENS
from twin.predict import calibrate
from twin.predict import crossval
from twin.predict import disagg
from twin.cli.args import dumps, number
from twin.cli.run import add_run_commands
from twin.cli.cloud import SCENARIOS, add_cloud_command, cmd_run_day
from twin.cli.maas import cmd_run_maas, is_maas
from twin.model.config import CatalogError
from twin.cli.explore import add_explore_commands
from twin.cli.faults import add_faults_command
from twin.predict.comm import KERNELS
from twin.predict.perf import PerfModel, economics
from twin.predict.operators import SUPERNODE_KERNELS
from twin.cli.region import add_region_command
from twin.cli.serve import add_serve_commands
from twin.topology import topology_summary
from twin.predict.validate import decode_point, predictions, prefill_point, rows


def _print(obj, as_json: bool, text) -> None:
    if as_json:
        print(dumps(obj))
    else:
        text(obj)


def _text_step(d: dict) -> None:
    head = {k: v for k, v in d.items() if not isinstance(v, dict)}
    print("  ".join(f"{k}={v}" for k, v in head.items()))
    src = d.get("kernel_sources", {})
    for name, ms in d["breakdown"].items():
        print(f"  {name:<18} {ms:10.3f} ms" + (f"   {src[name]}" if name in src else ""))


def cmd_perf(a) -> int:
    if a.deployment in disagg.forms():          # MoE-attention disaggregated (twin/catalog/disagg.toml)
        if a.phase != "decode":
            raise ValueError(f"--deployment {a.deployment}: a MoE-attention disaggregated form predicts decode only "
                             f"(allowed: perf decode)")
        out = disagg.Disaggregated(a.deployment).report()
        _print(out, a.json, lambda d: print("  ".join(f"{k}={v}" for k, v in d.items())))
        return 0
    pm = PerfModel(a.deployment)
    if a.phase == "alltoall":
        if a.ep is None or a.tokens is None:
            raise ValueError("perf alltoall needs --ep N and --tokens T (tokens per rank)")
        out = pm.alltoall(a.ep, a.tokens, a.kernel, a.pool)
        out["deployment"] = a.deployment
        for op in ("dispatch", "combine"):
            b = crossval.band("alltoall", a.deployment, out[f"{op}_source"], (a.ep, a.tokens, op, out[f"{op}_us"]))
            out.update({f"{op}_{k}": v for k, v in b.items()})
        _print(out, a.json, lambda d: print("  ".join(f"{k}={v}" for k, v in d.items())))
        return 0
    mtp, mb = (False if a.no_mtp else None), (False if a.no_microbatch else None)   # None: the deployment's
    if a.phase == "decode":
        kv = a.kv if a.kv is not None else a.prompt + a.output / 2
        cap = pm.max_batch_per_die(kv) * pm.dies_per_npu
        if cap == 0:                # not one sequence: only a shorter one helps
            most = int(pm.kv_capacity_bytes_per_die() // pm.kv_bytes_per_token())
            raise ValueError(f"kv = {kv:g}: one sequence's KV cache does not fit on a die of {a.deployment} "
                             f"(allowed: a KV length <= {most} tokens, from --kv or --prompt + --output / 2)")
        if a.batch > cap:
            raise ValueError(f"batch = {a.batch:g}: the KV cache of {kv:g} tokens per sequence fits at "
                             f"most {cap} sequences per chip on {a.deployment} (allowed: --batch <= "
                             f"{cap}, or a shorter --kv)")
        r = pm.decode_step(a.batch, kv, mtp=mtp, microbatch=mb, precision=a.precision, balance=a.eplb)
        out = r.as_dict()
        out.update(deployment=a.deployment, batch_per_npu=a.batch, kv_len=kv,
                   kv_capacity_gb_per_npu=round(pm.kv_capacity_bytes_per_die() * pm.dies_per_npu / 1e9, 2),
                   kv_limit_batch_per_npu=pm.max_batch_per_die(kv) * pm.dies_per_npu,
                   hbm_budget=pm.hbm_budget(kv, a.batch),
                   slo=pm.max_batch_for_slo(kv_len=kv, mtp=mtp, microbatch=mb, precision=a.precision,
                                            balance=a.eplb))
        point = decode_point(a.batch, kv, a.eplb, mtp, mb, a.precision)
    else:
        r = pm.prefill_batch(a.prompt, a.tokens_per_npu, reuse=a.reuse, balance=a.eplb,
                             precision=a.precision, microbatch=mb, block_tokens=BLOCK_TOKENS)
        out = r.as_dict()
        out.update(deployment=a.deployment, prompt=a.prompt, reuse=a.reuse)
        point = prefill_point(a.prompt, a.tokens_per_npu, a.eplb, a.reuse, mb, a.precision)
    out.update(economics(pm, r.tokens_per_s_per_npu))
    # every figure above shares this band; its label is a row's role only at that row's conditions
    out.update(crossval.band(a.phase, a.deployment, a.phase, point))
    _print(out, a.json, _text_step)
    return 0


def cmd_validate(a) -> int:
    table, preds = rows(), predictions()
    ok = all(r["pass"] for r in table)
    if a.json:
        print(dumps({"targets": table, "predictions": preds, "all_pass": ok}))
        return 0 if ok else 1
    for kind, title in (("calibration", "Calibration rows (a constant of perf.toml was fitted to each):"),
                        ("validation", "Validation rows (nothing fitted to them):")):
        print(title)
        print(f"  {'row':<64}{'published':>10}{'twin':>11}{'err %':>8}{'tol %':>7}  pass")
        for r in (r for r in table if r["kind"] == kind):
            print(f"  {r['name']:<64}{r['target']:>10g}{r['twin']:>11.2f}{r['error_pct']:>8.2f}"
                  f"{r['tolerance_pct']:>7g}  {'PASS' if r['pass'] else 'FAIL'}")
        print()
    _print_groups()
    crossval.print_table(crossval.stored())
    print()
    print("Every deployment at its operating point (label: calibrated / validated / model / prediction):")
    print(f"  {'deployment':<26}{'phase':<9}{'label':<12}{'tok/s/chip':>11}{'/TFLOPS':>9}{'/kW':>9}"
          f"{'$/M tok':>9}  setting")
    for p in preds:
        usd = f"{p['usd_per_million_tokens']:.3f}" if p["usd_per_million_tokens"] else "-"
        print(f"  {p['deployment']:<26}{p['phase']:<9}{p['label']:<12}{p['tokens_per_s_per_chip']:>11.1f}"
              f"{p['tokens_per_s_per_tflops'] or 0:>9.3f}{p['tokens_per_s_per_kw']:>9.1f}{usd:>9}  "
              f"{p['setting']}" + (f", TPOT {p['tpot_ms']} ms" if p["tpot_ms"] else ""))
    return 0 if ok else 1


def _print_groups() -> None:
    """Which constants each calibration source fixes, so no row's role is implicit."""
    from twin.predict.validate import TARGETS
    print("Calibration rows by the constants fitted to them (python -m twin calibrate):")
    for group, free in [*calibrate.GROUPS.items(), ("table", None)]:
        what = (", ".join(f"[{s}] {k}" for s, k, *_ in free) if free
                else "kernel tables by shape (kernels.toml), read by the predictor")
        srcs = dict.fromkeys(t.source.split(",")[0] for t in TARGETS if t.group == group)
        print(f"  {group:<12}{what}")
        print(f"  {'':<12}<- {'; '.join(srcs)}")
    print()


def cmd_calibrate(a) -> int:
    if a.crossval:                  # crossval refits with calibrate's groups: calibrate never imports it
        crossval.print_table(crossval.write())
        return 0
    return calibrate.main()


def cmd_topology(a) -> int:
    s = topology_summary(a.system)

    def text(d):
        print(f"system {d['system']}  {d['kind']}  fabric {d['fabric']}  ({d['label']})")
        print(f"  npus {d['npus']}  dies {d['dies']}  cpus {d['cpus']}  nodes {d['nodes']}  "
              f"bisection {d['bisection_gbps']:,.0f} GB/s ({d['bisection']})")
        for k, v in d["counts"].items():
            print(f"  {k:<24}{v:>8}")
    _print(s, a.json, text)
    return 0


class _Parser(argparse.ArgumentParser):
    """Argument errors in one line (what was wrong and what is allowed), status 2."""

    def error(self, message: str):
        if message.endswith("expected one argument"):   # e.g. "--batch -inf": argparse sees an option
            message += " (a value starting with '-' is written --flag=VALUE)"
        self.exit(2, f"error: {self.prog}: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m twin", description="CloudMatrix384 digital twin")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    perf = sub.add_parser("perf", help="time of one decode step or prefill batch")
    perf.add_argument("phase", choices=["decode", "prefill", "alltoall"])
    perf.add_argument("--deployment", default="cloudmatrix-infer-paper")
    # Input bounds (assumptions, far beyond any catalog deployment): they keep every result finite.
    perf.add_argument("--batch", type=number(0, 8192, lo_open=True), default=96,
                      help="decode batch per NPU (0 < batch <= 8192)")
    perf.add_argument("--prompt", type=number(1, 1_000_000), default=4096,
                      help="prompt tokens (1..1,000,000)")
    perf.add_argument("--output", type=number(1, 1_000_000), default=256,
                      help="output tokens, decode (1..1,000,000)")
    perf.add_argument("--kv", type=number(1, 2_000_000), default=None,
                      help="KV length, 1..2,000,000 (default: prompt + output/2, the mean over the decode)")
    perf.add_argument("--tokens-per-npu", type=number(1, 1 << 20), default=None,
                      help="prefill batch tokens per NPU (1..1,048,576)")
    perf.add_argument("--reuse", type=number(0, 1, hi_open=True), default=0.0,
                      help="EMS token reuse fraction [0, 1); served in whole 512-token blocks")
    perf.add_argument("--eplb", choices=["default", "perfect"], default="default")
    perf.add_argument("--no-mtp", action="store_true")
    perf.add_argument("--no-microbatch", action="store_true")
    perf.add_argument("--precision", choices=["int8", "bf16", "fp8", "nvfp4", "mxfp4"], default=None,
                      help="GEMM type of the whole model (default: the deployment's precision and moe_precision)")
    perf.add_argument("--ep", type=int, default=None, help="alltoall: expert-parallel ranks")
    perf.add_argument("--tokens", type=float, default=None, help="alltoall: tokens per rank")
    perf.add_argument("--kernel", choices=list(dict.fromkeys([*KERNELS, *SUPERNODE_KERNELS])), default=None,
                      help="alltoall: DeepEP's kernel by generation (normal, low-latency: V1; normal-v2: "
                           "V2), DeepEP-Ascend's on a supernode (one rank per die), or ub: the paper's "
                           "kernels (supernode only, one rank per NPU); default: the deployment's own "
                           "kernel for --pool")
    perf.add_argument("--pool", choices=["decode", "prefill"], default="decode",
                      help="alltoall: whose kernel is the default (decode: low-latency on DeepEP decode)")
    perf.add_argument("--json", action="store_true")
    perf.set_defaults(fn=cmd_perf)

    val = sub.add_parser("validate", help="calibration targets vs the twin")
    val.add_argument("--json", action="store_true")
    val.set_defaults(fn=cmd_validate)

    cal = sub.add_parser("calibrate", help="refit the calibrated constants of perf.toml")
    cal.add_argument("--crossval", action="store_true",
                     help="leave-one-source-out cross-validation; writes twin/catalog/crossval.json")
    cal.set_defaults(fn=cmd_calibrate)

    top = sub.add_parser("topology", help="component and link counts and bisection bandwidth of a system")
    top.add_argument("--system", default="cloudmatrix384",
                     help="a system of twin/catalog/systems.toml (its topology is built from that description)")
    top.add_argument("--json", action="store_true")
    top.set_defaults(fn=cmd_topology)

    add_run_commands(sub)
    add_cloud_command(sub)
    add_explore_commands(sub)
    add_region_command(sub)
    add_serve_commands(sub)
    add_faults_command(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cmd == "run" and args.scenario in SCENARIOS:    # a co-pool day: every policy
        args.fn = cmd_run_day
    elif args.cmd == "run" and is_maas(args.scenario):     # several models on one supernode
        args.fn = cmd_run_maas
    try:
        return args.fn(args)
    except (CatalogError, ValueError, KeyError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"error: {msg}", file=sys.stderr)
    except BrokenPipeError:         # output piped into e.g. head: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError as exc:          # e.g. --out on a full disk
        print(f"error: {exc.filename or ''}{': ' if exc.filename else ''}{exc.strerror or exc}",
              file=sys.stderr)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
