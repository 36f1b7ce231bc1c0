"""Fit the few calibrated constants of perf.toml to their calibration rows (minimax of error/tolerance).

Run `python -m twin calibrate` after changing the model; it prints the fitted values to paste into
twin/catalog/perf.toml. Constants are fitted in groups, each only to its own rows (validate.py
`Target.group`): the Ascend/UB constants to the paper's rows, the GPU fabric's to DeepEP's kernel
tables, the GPU overlap's co-run stretch and per-layer sync to DeepSeek's H800 profile rows and
SGLang's small-batch H200 row, the CPU scheduler's exposed time to the same H200 row without the
overlap scheduler (the one row that shows it). Validation rows are never used.
"""
from __future__ import annotations

import copy

import numpy as np

from twin.predict.perf import PerfModel, constants
from twin.predict.validate import TARGETS, Target

GROUPS: dict[str, list[tuple[str, str, float, float]]] = {
    "ascend": [("comm", "alpha_us", 0.0, 200.0), ("comm", "beta_us", 0.0, 20.0),
               ("comm", "per_token_us", 0.0, 5.0),
               ("comm", "combine_reduce_gbps", 20.0, 5000.0), ("balance", "load_cv", 0.0, 0.5),
               ("overheads", "softmax_gelems_per_s", 20.0, 5000.0), ("streams", "sync_us", 0.0, 200.0)],
    "nvlink_rdma": [("nvlink_rdma", "nvlink_efficiency", 0.2, 1.0),
                    ("nvlink_rdma", "rdma_efficiency", 0.2, 1.0),
                    ("nvlink_rdma", "rdma_peer_gbps", 5.0, 100.0),
                    ("nvlink_rdma", "ll_fixed_us", 0.0, 100.0),
                    ("nvlink_rdma", "rdma_qp_penalty", 0.0, 1.0)],
    "sm_overlap": [("sm_overlap", "corun_stretch", 0.0, 3.0), ("step", "layer_sync_us", 0.0, 500.0)],
    "scheduler": [("step", "scheduler_ms", 0.0, 50.0)],
    "ems": [("ems", "server_gbps", 0.05, 200.0)],
}


class _Steps:
    """A deployment's predictor for one evaluation of the rows: a step that several rows read (the
    TPOT and the tokens/s of one batch) is worked out once. The predictor is pure: the same
    arguments give the same step."""

    def __init__(self, pm: PerfModel):
        self._pm, self._steps = pm, {}

    def __getattr__(self, name):
        return getattr(self._pm, name)

    def _once(self, kind: str, args: tuple, kw: dict):
        key = (kind, args, tuple(sorted(kw.items())))
        if key not in self._steps:
            self._steps[key] = getattr(self._pm, kind)(*args, **kw)
        return self._steps[key]

    def decode_step(self, *args, **kw):
        return self._once("decode_step", args, kw)

    def prefill_batch(self, *args, **kw):
        return self._once("prefill_batch", args, kw)


def _errors(k: dict, targets: list[Target]) -> np.ndarray:
    models: dict[str, _Steps] = {}
    return np.array([(t.measure(models.setdefault(t.deployment, _Steps(PerfModel(t.deployment, k=k))))
                      - t.target) / t.target * 100 / t.tolerance_pct for t in targets])


def _with(base: dict, free, x) -> dict:
    k = copy.deepcopy(base)
    for (sec, key, lo, hi), v in zip(free, x):
        k[sec][key] = float(min(hi, max(lo, v)))
    return k


def fit_group(base: dict, group: str, targets: list[Target] | None = None) -> tuple[dict, float]:
    """Nelder-Mead on the largest error/tolerance, in units of each constant's range, from the
    current values and from the 8-norm optimum; the better of the two (never worse than perf.toml).
    `targets`: a subset of the group's rows (cross-validation), default all of them."""
    free = GROUPS[group]
    targets = [t for t in (TARGETS if targets is None else targets) if t.group == group]
    from scipy.optimize import minimize  # here, not at the top: `python -m twin bench` need not load it
    lo = np.array([f[2] for f in free])
    span = np.array([f[3] - f[2] for f in free])
    x0 = (np.array([base[s][k] for s, k, _, _ in free], dtype=float) - lo) / span

    def worst(u):
        return float(np.max(np.abs(_errors(_with(base, free, lo + u * span), targets))))
    starts = [x0]
    if len(free) > 1:   # the smooth 8-norm finds a basin; polish it and the current values on the max
        starts.append(minimize(lambda u: float(np.sum(_errors(_with(base, free, lo + u * span), targets)
                                                      ** 8) ** (1 / 8)), x0, method="Nelder-Mead",
                               options={"maxiter": 4000, "xatol": 1e-5, "fatol": 1e-6}).x)
    res = min((minimize(worst, x, method="Nelder-Mead",
                        options={"maxiter": 4000, "xatol": 1e-7, "fatol": 1e-8}) for x in starts),
              key=lambda r: r.fun)
    k = _with(base, free, lo + res.x * span)
    return k, float(np.max(np.abs(_errors(k, targets))))


def fit() -> tuple[dict, float]:
    """Every group in order (the overlap stretch is fitted on the fitted fabric)."""
    k, worst = copy.deepcopy(constants()), 0.0
    for group in GROUPS:
        k, s = fit_group(k, group)
        worst = max(worst, s)
    return k, worst


def main() -> int:
    k, s = fit()
    for group, free in GROUPS.items():
        for sec, key, *_ in free:
            print(f"[{sec}] {key} = {k[sec][key]:.6g}    ({group})")
    print(f"worst error / tolerance = {s:.3f} ({'all pass' if s <= 1 else 'some targets missed'})")
    return 0 if s <= 1 else 1
