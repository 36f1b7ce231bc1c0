"""Leave-one-source-out cross-validation: how far the model lands on a source's rows when that
source is taken out of the fit, and the error bands every figure is printed with.

For a source whose rows calibrate fitted constants (calibrate.GROUPS), the group is refitted on the
remaining rows and the left-out rows are predicted; a constant that no remaining row moves is
unidentified without the source, and the source is reported as such (no error, no band from it).
A kernel-table row is left out of its table and predicted by interpolation from the rows around it
(an edge row from the roofline scaled to its neighbour); so is each inner row of a GEMM or
attention table (by M or length). A validation row had nothing fitted to it:
its error is its cross-validation error. `python -m twin calibrate --crossval` refits and writes
twin/catalog/crossval.json; `validate` and the bands read that file.
"""
from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path

import numpy as np

from twin.predict.perf import PerfModel, constants
from twin.predict import kernels
from twin.predict.validate import PAPER, TARGETS, Target, role

PATH = Path(__file__).parent.parent / "catalog" / "crossval.json"
SUPERNODE_DEPS = (PAPER,)


def _error(t: Target, k: dict) -> float:
    return (t.measure(PerfModel(t.deployment, k=k)) - t.target) / t.target * 100


def _unidentified(k: dict, free, rest: list[Target]) -> list[str]:
    """Constants of `free` that move none of `rest` by more than 0.01% when changed by 20%."""
    base = [_error(t, k) for t in rest]
    out = []
    for sec, key, *_ in free:
        k2 = copy.deepcopy(k)
        k2[sec][key] = k[sec][key] * 1.2 + 1e-9
        if max((abs(_error(t, k2) - b) for t, b in zip(rest, base)), default=0.0) < 0.01:
            out.append(f"[{sec}] {key}")
    return out


def _fitted_sources() -> list[dict]:
    from twin.predict.calibrate import GROUPS, fit_group
    base = constants()
    out = []
    for group, free in GROUPS.items():
        rows = [t for t in TARGETS if t.group == group]
        for src in dict.fromkeys(t.source for t in rows):
            held = [t for t in rows if t.source == src]
            rest = [t for t in rows if t.source != src]
            lost = _unidentified(base, free, rest) if rest else [f"[{s}] {k_}" for s, k_, *_ in free]
            entry = {"source": src, "group": group, "rows": [t.name for t in held],
                     "unidentified_without": lost}
            if lost:
                entry["errors_pct"] = None
            else:
                k, _ = fit_group(copy.deepcopy(base), group, rest)
                entry["errors_pct"] = [round(_error(t, k), 2) for t in held]
            out.append(entry)
    return out


def table_rows() -> list[dict]:
    """Each kernel-table row predicted from the other rows of its table (leave one row out)."""
    out = []
    for t in kernels.tables():
        for i, r in enumerate(t.rows):
            rest = t.rows[:i] + t.rows[i + 1:]
            if not rest:
                continue
            if rest[0].ep <= r.ep <= rest[-1].ep:
                sec, how = t.seconds(r.ep, rest), "interpolated"
            else:   # edge: the nearest remaining row, scaled by the roofline (as the predictor does)
                near = rest[0] if r.ep < rest[0].ep else rest[-1]
                pm = PerfModel(_deployment_on(t.system))
                m = pm.model
                nbytes = m.combine_bytes_per_token if t.op == "combine" else m.dispatch_bytes_per_token
                kern = t.kernel
                roof = [pm._a2a_roofline(ep, t.tokens, nbytes, 1, t.op == "combine", kern)
                        for ep in (r.ep, near.ep)]
                sec, how = near.seconds * roof[0] / roof[1], "edge"
            pred = t.published(r.ep, t.tokens, sec, 8)
            out.append({"source": r.source, "table": t.name, "op": t.op, "ep": r.ep, "how": how,
                        "error_pct": round((pred - r.published) / r.published * 100, 2)})
    return out


def compute_rows() -> list[dict]:
    """Each inner row of a compute-kernel table (GEMM by M, attention by length) predicted by
    interpolating its neighbours in the same (N, K) series, as the predictor does between rows."""
    out = []
    for t in kernels.compute_tables():
        pm = PerfModel(next(n for n, d in _deployments() if d.system == _system_of(t.chips[0])))
        for n, k in dict.fromkeys((r.n, r.k) for r in t.rows):
            rows = t.series(n, k)

            def roof(mm, n=n, k=k, grouped=t.layout != "dense"):
                return pm.gemm_seconds(2 * mm * n * k, n * k * 1.0, 1.0, "fp8", grouped)
            for i in range(1, len(rows) - 1):
                r = rows[i]
                rest = rows[:i] + rows[i + 1:]
                pred = (kernels.gemm_rate(rest, r.m, roof) if t.kind == "gemm"
                        else kernels.interpolate(rest, r.m))
                out.append({"source": t.source, "table": t.name, "n": n, "k": k, "m": r.m,
                            "error_pct": round((pred - r.tflops) / r.tflops * 100, 2)})
    return out


def _deployments():
    from twin.model.config import catalog
    return catalog().deployments.items()


def _system_of(chip: str) -> str:
    from twin.model.config import catalog
    return next(n for n, s in catalog().systems.items() if s.accelerator == chip)


def _deployment_on(system: str) -> str:
    from twin.model.config import catalog
    return next(n for n, d in catalog().deployments.items() if d.system == system)


def run() -> dict:
    from twin.predict.validate import rows
    val = [{"source": r["source"], "row": r["name"], "deployment": r["deployment"],
            "error_pct": r["error_pct"]} for r in rows() if r["kind"] == "validation"]
    return {"fitted": _fitted_sources(), "tables": table_rows(), "compute_tables": compute_rows(),
            "validation": val}


def write() -> dict:
    res = run()
    PATH.write_text(json.dumps(res, indent=1) + "\n")
    return res


@lru_cache(maxsize=1)
def stored() -> dict:
    if not PATH.exists():
        raise FileNotFoundError(f"{PATH.name} is missing: run `python -m twin calibrate --crossval`")
    return json.loads(PATH.read_text())


def _worst(errors) -> float:
    errors = [abs(e) for e in errors if e is not None]
    return round(max(errors), 1) if errors else None


def band(kind: str, deployment: str, phase: str, point: tuple | None = None) -> dict:
    """The error band of a figure: its label and +-% from the cross-validation of its class.

    alltoall (phase = a source string): interpolated table rows use the worst leave-one-row-out
    interpolation, the roofline scaled to a table's edge the worst edge prediction, the paper's UB
    kernels the refit of ref 4's table. decode / prefill: the paper's deployment (calibration) and
    every other supernode deployment use the worst left-out CloudMatrix serving source of that
    phase; DeepSeek's profile (calibration: the overlap's stretch is fitted to it), SGLang's
    deployment (validation) and every other GPU deployment (prediction) the worst GPU validation
    row of that phase. With `point` (validate.decode_point / prefill_point), a calibration or
    validation label holds only at a published row's conditions; elsewhere the figure is a prediction.
    """
    cv = stored()
    if kind == "alltoall":
        if phase.startswith("table:"):
            label = "calibration" if ", row " in phase else "prediction"
            pct = (0.0 if label == "calibration"
                   else _worst(r["error_pct"] for r in cv["tables"] if r["how"] == "interpolated"))
            return {"label": label, "band_pct": pct, "band_basis": "kernel table, leave one row out"}
        if phase.startswith("roofline scaled"):
            return {"label": "prediction", "band_pct": _worst(r["error_pct"] for r in cv["tables"]
                                                              if r["how"] == "edge"),
                    "band_basis": "kernel table edge rows predicted from their neighbours"}
        ub = [e for f in cv["fitted"] if f["source"] == "ref 4 MoE communication"
              for e in (f["errors_pct"] or [])]
        return {"label": "prediction", "band_pct": _worst(ub),
                "band_basis": "ref 4 UB table left out of the refit"}
    from twin.model.config import catalog
    dep = catalog().deployment(deployment)
    supernode = catalog().system(dep.system).kind == "supernode"
    if supernode:
        srcs = ("ref 4 " + phase,) + (("ref 3 MTP",) if phase == "decode" else ())
        errs = [e for f in cv["fitted"] if f["group"] == "ascend" and f["source"].startswith(srcs)
                for e in (f["errors_pct"] or [])]
        label = "calibration" if deployment == PAPER else "prediction"
        basis = f"CloudMatrix {phase} rows left out of the refit"
    else:
        overlap = {t.deployment for t in TARGETS if t.group == "sm_overlap"}
        label = ("calibration" if deployment in overlap else "validation"
                 if deployment in {v["deployment"] for v in cv["validation"]} else "prediction")
        errs = [v["error_pct"] for v in cv["validation"] if label == "prediction" or phase in v["row"]]
        basis = (f"GPU {phase} validation rows (nothing fitted to them)" if label == "validation" else
                 f"GPU {phase} validation rows (the overlap's stretch was fitted to this deployment)"
                 if label == "calibration" else
                 "every Hopper validation row; another chip's kernel efficiencies are assumed, so "
                 "the band does not cover that assumption")
    if point is not None and label in ("calibration", "validation"):
        at = role(deployment, point)
        label, basis = (at, basis) if at else ("prediction", f"{basis}; away from their conditions")
    return {"label": label, "band_pct": _worst(errs), "band_basis": basis}


def print_table(cv: dict) -> None:
    print("Leave-one-source-out cross-validation (refit without the source, predict its rows):")
    for f in cv["fitted"]:
        errs = ("unidentified without it: " + ", ".join(f["unidentified_without"])
                if f["errors_pct"] is None else " ".join(f"{e:+.1f}%" for e in f["errors_pct"]))
        print(f"  {f['group']:<12}{f['source']:<40}{errs}")
    tab = cv["tables"]
    for how in ("interpolated", "edge"):
        e = [r["error_pct"] for r in tab if r["how"] == how]
        if e:
            print(f"  {'table':<12}{how + ' rows (leave one row out)':<40}"
                  f"{len(e)} rows, worst {max(e, key=abs):+.1f}%, mean |e| {np.mean(np.abs(e)):.1f}%")
    e = [r["error_pct"] for r in cv.get("compute_tables", [])]
    if e:
        print(f"  {'table':<12}{'GEMM / attention inner rows':<40}"
              f"{len(e)} rows, worst {max(e, key=abs):+.1f}%, mean |e| {np.mean(np.abs(e)):.1f}%")
    for v in cv["validation"]:
        print(f"  {'validation':<12}{v['row']:<64}{v['error_pct']:+.1f}%")
