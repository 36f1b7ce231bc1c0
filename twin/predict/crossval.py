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
import math
from functools import lru_cache
from pathlib import Path

import numpy as np

from twin.predict.perf import PerfModel, constants
from twin.predict import kernels
from twin.predict.comm import KERNELS
from twin.predict.validate import DEEPEP_ROW, EP_TABLE, PAPER, TARGETS, Target, role

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


# Small samples: a band from fewer than FLOOR_ROWS held-out rows is never narrower than SMALL_FLOOR_PCT,
# and no band is narrower than FLOOR_PCT (assumption: the calibration tolerance, 5%, is what a fitted
# row may still be off by; with few rows the worst seen error understates the spread, so the
# validation tolerance, 10%, is the floor). Issue 38: nor, with fewer than FLOOR_ROWS rows, narrower than
# what every other held-out figure says of the model's spread: the COVER two-sided Student-t bound on
# their RMS error (as many degrees of freedom as figures; assumption: held-out errors exchangeable and
# centred on zero). COVER is the share of held-out figures the bands are meant to hold (issue 38).
FLOOR_PCT, SMALL_FLOOR_PCT, FLOOR_ROWS, COVER = 5.0, 10.0, 5, 0.90
UB_TABLE_TOKENS = 128          # ref 4 MoE communication table: batch 128 per rank


def phase_of(t: Target) -> str:
    """The figure class a row belongs to: decode, prefill (throughput and its gains) or alltoall."""
    name = t.name.lower()
    if t.point:
        return t.point[0]
    if "deepep" in name or " us (" in name or "dispatch" in name or "combine" in name:
        return "alltoall"
    return "decode" if "decode" in name or "mtp" in name else "prefill"


def system_of(deployment: str) -> str:
    from twin.model.config import catalog
    return catalog().deployment(deployment).system


def transfer_rows() -> list[dict]:
    """Leave one system out: each system's rows (kernel-table rows aside) predicted after refitting
    every group its rows calibrated on the other systems' calibration rows alone. A row that a
    constant no other system fixes moves is unidentified for that system (no error)."""
    from twin.predict.calibrate import GROUPS, fit_group
    base = constants()
    rows = [t for t in TARGETS if t.group != "table"]
    out = []
    for system in dict.fromkeys(system_of(t.deployment) for t in rows):
        held = [t for t in rows if system_of(t.deployment) == system]
        k, lost = copy.deepcopy(base), []
        for group, free in GROUPS.items():
            if not any(t.group == group for t in held):
                continue        # nothing of this system fixed the group: its constants stand
            rest = [t for t in rows if t.group == group and system_of(t.deployment) != system]
            miss = _unidentified(k, free, rest) if rest else [f"[{sc}] {key}" for sc, key, *_ in free]
            lost += [f for f in free if f"[{f[0]}] {f[1]}" in miss]
            if rest and len(miss) < len(free):
                k, _ = fit_group(k, group, rest)
        for t in held:
            moved = _unidentified(k, lost, [t]) if lost else []
            blind = len(moved) < len(lost)       # some lost constant moves this row
            out.append({"system": system, "row": t.name, "deployment": t.deployment, "phase": phase_of(t),
                        "kind": t.kind, "error_pct": None if blind else round(_error(t, k), 2)})
    return out


def held_out(cv: dict) -> dict[str, float]:
    """Every published figure predicted with nothing fitted to it, once each (row -> error %): a
    transfer row with an error (its system left out of the fit) and every validation row."""
    out = {r["row"]: r["error_pct"] for r in cv.get("transfer", []) if r["error_pct"] is not None}
    for v in cv.get("validation", []):
        out.setdefault(v["row"], v["error_pct"])
    return out


def pooled_floor(cv: dict, leave: str | None = None) -> tuple[float, int, float]:
    """(bound %, figures, RMS %) of every held-out figure but `leave`: the COVER Student-t bound on
    their RMS error, the spread a band from a small sample may not claim to beat."""
    from scipy.stats import t as student
    errs = np.array([e for row, e in held_out(cv).items() if row != leave])
    if not len(errs):
        return 0.0, 0, 0.0
    rms = float(np.sqrt(np.mean(errs ** 2)))
    return float(student.ppf((1 + COVER) / 2, len(errs)) * rms), len(errs), rms


def _band_of(errors: list[float], cv: dict, leave: str | None = None) -> tuple[float, str]:
    """(band %, note) of a set of held-out errors: the worst, never below the floor; with fewer than
    FLOOR_ROWS rows, never below the pooled spread of every other held-out figure either."""
    n = len(errors)
    worst = max((abs(e) for e in errors), default=0.0)
    note = f"{n} row{'s' if n != 1 else ''}"
    if n >= FLOOR_ROWS:
        return round(max(worst, FLOOR_PCT), 1), note + (f", floor {FLOOR_PCT:g}%" if worst < FLOOR_PCT else "")
    pooled, m, rms = pooled_floor(cv, leave)
    floor = max(SMALL_FLOOR_PCT, pooled)
    if worst < floor:
        note += (f", small-sample floor {floor:.1f}%: the {COVER:.0%} t-bound on the RMS error ({rms:.1f}%) of "
                 f"{m} held-out figures" if pooled > SMALL_FLOOR_PCT else f", floor {floor:g}%")
    return round(max(worst, floor), 1), note


def transfer_band(system: str, phase: str, cv: dict | None = None, leave: str | None = None) -> dict:
    """Band of a decode or prefill figure on `system` from leave-one-system-out transfer: the worst
    error of that system's own rows when nothing was fitted to the system, or, for a system with no
    identified rows of its own, of every other system of its kind. `leave`: a row left out of the
    basis (coverage)."""
    from twin.model.config import catalog
    cv = cv or stored()
    kind = catalog().system(system).kind
    tr = [r for r in cv.get("transfer", []) if r["phase"] == phase and r["error_pct"] is not None
          and r["row"] != leave]
    own = [r["error_pct"] for r in tr if r["system"] == system]
    if own:
        pct, note = _band_of(own, cv, leave)
        return {"band_pct": pct, "band_basis": f"leave-one-system-out transfer: {system}'s own {phase} "
                                               f"rows with nothing fitted to {system} ({note})"}
    peers = sorted({r["system"] for r in tr if catalog().system(r["system"]).kind == kind})
    pct, note = _band_of([r["error_pct"] for r in tr if r["system"] in peers], cv, leave)
    basis = (f"leave-one-system-out transfer across {', '.join(peers) or 'no'} {kind} systems "
             f"({phase}, {note}); {system} has no {phase} row predicted without fitting to it")
    chip = catalog().system(system).accelerator
    if chip not in {catalog().system(r["system"]).accelerator for r in cv.get("transfer", [])}:
        basis += f"; no published row on {chip}: its kernel efficiencies are another chip's (assumption), which the band does not cover"
    return {"band_pct": pct, "band_basis": basis}


def row_band(row: str, cv: dict, leave: str | None = None) -> float:
    """The band printed for a published row's figure (as `band` prints it), computed without `leave`:
    an EMS reuse row's the EMS band, an all-to-all row's its kernel's, any other row's its system's
    transfer band for the row's phase."""
    t = next(t for t in TARGETS if t.name == row)
    if any(v["row"] == row for v in _ems_rows(cv)):
        return ems_band(cv, leave)[0]
    if phase_of(t) == "alltoall":
        return kernel_band(_kernel_of(row), cv, leave)[0]
    return transfer_band(system_of(t.deployment), phase_of(t), cv, leave)["band_pct"]


def coverage(cv: dict | None = None) -> dict:
    """How many held-out figures (`held_out`: every published figure nothing was fitted to) fall
    inside the band printed for them, each band computed without the row itself."""
    cv = cv or stored()
    held = [(row, err, row_band(row, cv, leave=row)) for row, err in held_out(cv).items()]
    outside = [row for row, err, pct in held if abs(err) > pct]
    return {"held_out": len(held), "inside": len(held) - len(outside),
            "fraction": round(1 - len(outside) / len(held), 3) if held else None, "outside": outside}


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
            "validation": val, "transfer": transfer_rows()}


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
    kernels the refit of ref 4's table at its conditions and `_ub_beyond` away from them (`point` =
    (ep, tokens per rank, op, us)), a GPU kernel with no table on the system its own held-out rows
    (`kernel_band`), never UB's. decode / prefill: the paper's deployment (calibration) and
    every other supernode deployment use the worst left-out CloudMatrix serving source of that
    phase; DeepSeek's profile (calibration: the overlap's stretch is fitted to it), SGLang's
    deployment (validation) and every other GPU deployment (prediction) the worst GPU validation
    row of that phase. With `point` (validate.decode_point / prefill_point), a calibration or
    validation label holds only at a published row's conditions; elsewhere the figure is a prediction.
    """
    from twin.model.config import catalog
    cv = stored()
    dep = catalog().deployment(deployment)
    supernode = catalog().system(dep.system).kind == "supernode"
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
        kernel = _roofline_kernel(phase)
        if kernel in KERNELS and not supernode:     # a GPU kernel with no table here: its own rows, never UB's
            pct, basis = kernel_band(kernel, cv)
            return {"label": "prediction", "band_pct": pct, "band_basis": basis}
        ub = [e for f in cv["fitted"] if f["source"] == "ref 4 MoE communication"
              for e in (f["errors_pct"] or [])]
        if point is not None and not _in_ub_table(*point[:2]):
            return {"label": "prediction", **_ub_beyond(cv, *point)}
        return {"label": "prediction", "band_pct": _worst(ub),
                "band_basis": "ref 4 UB table left out of the refit"}
    if supernode:
        srcs = ("ref 4 " + phase,) + (("ref 3 MTP",) if phase == "decode" else ())
        errs = [e for f in cv["fitted"] if f["group"] == "ascend" and f["source"].startswith(srcs)
                for e in (f["errors_pct"] or [])]
        label = "calibration" if deployment == PAPER else "prediction"
        basis = f"CloudMatrix {phase} rows left out of the refit"
    else:       # a GPU system: leave-one-system-out transfer (transfer_band), never another's error
        fitted = {t.deployment for t in TARGETS if t.kind == "calibration" and t.group != "table"}
        label = ("calibration" if deployment in fitted else "validation"
                 if deployment in {v["deployment"] for v in cv["validation"]} else "prediction")
        b = transfer_band(dep.system, phase, cv)
        if point is not None and label in ("calibration", "validation"):
            at = role(deployment, point)
            label, b["band_basis"] = ((at, b["band_basis"]) if at else
                                      ("prediction", f"{b['band_basis']}; away from their conditions"))
        return {"label": label, **b}
    pct = _worst(errs)
    if phase == "prefill" and point is not None and point[4] > 0:     # EMS reuse: its own rows
        pct, basis = ems_band(cv)
    if point is not None and label in ("calibration", "validation"):
        at = role(deployment, point)
        label, basis = (at, basis) if at else ("prediction", f"{basis}; away from their conditions")
    return {"label": label, "band_pct": pct, "band_basis": basis}


def _in_ub_table(ep: int, tokens: float) -> bool:
    """Whether an all-to-all lies at ref 4's table's conditions (EP 8-256, 128 tokens per rank)."""
    return min(EP_TABLE) <= ep <= max(EP_TABLE) and tokens == UB_TABLE_TOKENS


def _ub_beyond(cv: dict, ep: int, tokens: float, op: str, us: float) -> dict:
    """Band of a UB all-to-all away from ref 4's table, where no published all-to-all row exists: the
    small-sample floor (zero rows), and for combine with fewer tokens per rank than the table's at least
    the gap to the structure nothing published rules out there: combine waiting on dispatch's count
    exchange (beta log2 EP). At 128 tokens the table rejects it (docs/fidelity.md); with few tokens per
    rank that wait would be most of the kernel."""
    pct, note = _band_of([], cv)
    basis = (f"beyond ref 4's UB table (EP {min(EP_TABLE)}-{max(EP_TABLE)}, {UB_TABLE_TOKENS} tokens per "
             f"rank): no published all-to-all row here ({note})")
    if op == "combine" and tokens < UB_TABLE_TOKENS and us > 0:
        wait = constants()["comm"]["beta_us"] * math.log2(max(ep, 1))
        gap = 100 * wait / us
        if gap > pct:
            pct = gap
            basis += (f"; combine with dispatch's count-exchange wait ({wait:.1f} us) would be {gap:.0f}% "
                      f"slower, which no published figure rules out here")
    return {"band_pct": round(pct, 1), "band_basis": basis}


def _ems_rows(cv: dict) -> list[dict]:
    return [v for v in cv.get("validation", []) if v["source"].startswith("ref 3 context caching")]


def ems_band(cv: dict, leave: str | None = None) -> tuple[float, str]:
    """Band of a prefill figure with EMS reuse on a supernode: the error of the context-caching
    experiment's TTFT rows, which nothing was fitted to (floored like any small sample); `leave`: a
    row left out of the basis (coverage)."""
    pct, note = _band_of([v["error_pct"] for v in _ems_rows(cv) if v["row"] != leave], cv, leave)
    return pct, f"EMS reuse: ref 3 context-caching TTFT rows, nothing fitted to them ({note})"


def _roofline_kernel(source: str) -> str | None:
    """The kernel of an all-to-all figure the roofline gave for want of a table (kernels.lookup's
    source "roofline: no kernel table for K op on system"), else None."""
    head = "roofline: no kernel table for "
    return source[len(head):].split(" ")[0] if source.startswith(head) else None


def _kernel_of(row: str) -> str | None:
    """The GPU kernel a published all-to-all row measured (validate.DEEPEP_ROW's names)."""
    return next((k for (k, _), name in DEEPEP_ROW.items() if row.startswith(name.split(" (")[0] + " (")), None)


def kernel_band(kernel: str, cv: dict, leave: str | None = None) -> tuple[float, str]:
    """Band of a GPU all-to-all figure the roofline gives for `kernel` with no table on the system:
    the errors of that kernel's published rows nothing was fitted to (validation), floored like any
    small sample; a kernel with none has the pooled floor alone."""
    errs = [v["error_pct"] for v in cv.get("validation", []) if v["row"] != leave and _kernel_of(v["row"]) == kernel]
    pct, note = _band_of(errs, cv, leave)
    return pct, (f"{kernel}: its published rows predicted by the roofline with nothing fitted to them ({note})"
                 if errs else f"{kernel}: no published row held out here ({note})")


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
    print()
    print_transfer(cv)


def print_transfer(cv: dict) -> None:
    """Per-system transfer bands (leave one system out) and how many held-out figures they cover."""
    from twin.model.config import catalog
    print("Leave-one-system-out transfer (refit without the system, predict its rows) and the band "
          "every system's figures are printed with:")
    for system in dict.fromkeys(r["system"] for r in cv.get("transfer", [])):
        rows = [r for r in cv["transfer"] if r["system"] == system]
        known = [r for r in rows if r["error_pct"] is not None]
        errs = " ".join(f"{r['error_pct']:+.1f}%" for r in known)
        print(f"  {system:<22}{len(known)}/{len(rows)} rows identified without it  {errs}")
    for name, sysd in catalog().systems.items():
        if sysd.kind != "cluster":
            continue
        for phase in ("decode", "prefill"):
            b = transfer_band(name, phase, cv)
            print(f"  {name:<22}{phase:<8} +-{b['band_pct']:g}%  {b['band_basis']}")
    c = coverage(cv)
    if c["held_out"]:
        print(f"  held-out figures (nothing fitted to them) inside the band printed for them (band without the row): "
              f"{c['inside']}/{c['held_out']} ({c['fraction']:.0%})"
              + (f"; outside: {', '.join(c['outside'])}" if c["outside"] else ""))
