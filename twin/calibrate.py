"""Fit the few calibrated constants of perf.toml to the reference targets (minimax of error/tolerance).

Run `python -m twin calibrate` after changing the model; it prints the fitted values to paste into
twin/catalog/perf.toml. The fit touches only the constants marked "calibrated" there.
"""
from __future__ import annotations

import copy

import numpy as np
from scipy.optimize import minimize

from .perf import PerfModel, constants
from .validate import PAPER, TARGETS

FREE = [("comm", "alpha_us", 0.0, 200.0), ("comm", "beta_us", 0.0, 20.0),
        ("comm", "per_token_us", 0.0, 5.0), ("balance", "load_cv", 0.0, 0.5),
        ("overheads", "ems_block_overhead_us", 0.0, 20000.0),
        ("overheads", "softmax_gelems_per_s", 20.0, 5000.0), ("streams", "sync_us", 0.0, 200.0)]


def score(k: dict) -> float:
    pm = PerfModel(PAPER, k=k)
    return max(abs(t.measure(pm) - t.target) / t.target * 100 / t.tolerance_pct for t in TARGETS)


def _with(base: dict, x) -> dict:
    k = copy.deepcopy(base)
    for (sec, key, lo, hi), v in zip(FREE, x):
        k[sec][key] = float(min(hi, max(lo, v)))
    return k


def _smooth(k: dict) -> float:
    """A smooth stand-in for the worst error: the 8-norm of error/tolerance."""
    pm = PerfModel(PAPER, k=k)
    e = np.array([(t.measure(pm) - t.target) / t.target * 100 / t.tolerance_pct for t in TARGETS])
    return float(np.sum(e ** 8) ** (1 / 8))


def fit() -> tuple[dict, float]:
    """Nelder-Mead from the current values, in units of each constant's range (deterministic)."""
    base = constants()
    lo = np.array([f[2] for f in FREE])
    span = np.array([f[3] - f[2] for f in FREE])
    x0 = (np.array([base[s][k] for s, k, _, _ in FREE], dtype=float) - lo) / span
    res = minimize(lambda u: _smooth(_with(base, lo + u * span)), x0, method="Nelder-Mead",
                   options={"maxiter": 4000, "xatol": 1e-5, "fatol": 1e-6})
    k = _with(base, lo + res.x * span)
    return k, score(k)


def main() -> int:
    k, s = fit()
    for sec, key, *_ in FREE:
        print(f"[{sec}] {key} = {k[sec][key]:.4g}")
    print(f"worst error / tolerance = {s:.3f} ({'all pass' if s <= 1 else 'some targets missed'})")
    return 0 if s <= 1 else 1
