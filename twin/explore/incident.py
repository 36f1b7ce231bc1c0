"""What-if of a gray incident, as the field does it: the run beside the same seed without the fault,
and (when it was mitigated) without the mitigation (Lin et al., "Understanding Stragglers in Large
Model Training Using What-if Analysis", OSDI 2025, arXiv 2505.05713: simulate the same job without
the stragglers and contrast it with what happened).

Each counterfactual is one more run of the scenario to its `duration_s` (no drain: nothing it
reports needs one), so a run with gray faults costs three runs. Per gray fault, over its window
(onset to a minute after the mitigation, or to the end of the run when nothing mitigated it):
- `tokens_lost`: output tokens the run made in the window fewer than the run without the fault;
- `tpot_ms_without`, `slo_without`: p50 TPOT from onset to mitigation, and SLO attainment over the
  window, without the fault;
- `won_back_tokens`, `tpot_ms_unmitigated`: tokens the mitigation made over the run without it,
  and that run's p50 TPOT after the moment of mitigation (mitigated faults only).
"""
from __future__ import annotations

import numpy as np

from twin.engine import Engine
from twin.engine.accounting import BEFORE_S
from twin.engine.faults.gray import is_gray, tpot_p50


def _run(sc, step: float, mitigate: bool | None = None) -> Engine:
    eng = Engine(sc)
    if mitigate is not None:     # before the first step: the fault processes read the policy when they start
        eng.faults.policy.mitigate_gray = mitigate
    eng.run(sc.duration_s, step=step)
    return eng


def _tokens(eng: Engine, window: tuple[float, float]) -> float:
    """Output tokens made in the intervals ending in (lo, hi]."""
    h = eng.metrics.history
    t, tps = np.array(h["t"], dtype=float), np.array(h["output_tps"], dtype=float)
    m = (t > window[0] + 1e-9) & (t <= window[1] + 1e-9)
    return float(tps[m].sum() * eng.scenario.interval_s)


def _slo(eng: Engine, window: tuple[float, float]) -> float | None:
    h = eng.metrics.history
    t, slo = np.array(h["t"], dtype=float), np.array(h["slo_attainment"], dtype=float)
    m = (t > window[0] + 1e-9) & (t <= window[1] + 1e-9) & np.isfinite(slo)
    return round(float(slo[m].mean()), 4) if m.any() else None


def whatif(eng: Engine, step: float) -> dict[int, dict]:
    """{fault id: what-if} for the gray faults of a finished run `eng` (its scenario names the
    fault file): the counterfactual runs made here, with the same seed and `step`."""
    sc = eng.scenario
    reports = [r for r in eng.fault_report() if is_gray(r["kind"]) and r["at_s"] < sc.duration_s]
    if not reports:
        return {}
    without = _run(sc.model_copy(update={"faults": ""}), step)
    mitigated = any(r["mitigated_s"] is not None for r in reports)
    unmitigated = _run(sc, step, mitigate=False) if mitigated else None
    end = sc.duration_s
    out = {}
    for r in reports:
        at = r["at_s"]
        m = r["mitigated_s"]
        during = (at, min(end, at + m) if m is not None else end)
        window = (at, min(end, during[1] + BEFORE_S) if m is not None else end)
        made = _tokens(eng, window)
        row = {"window_s": [round(window[0], 3), round(window[1], 3)],
               "tokens_lost": round(_tokens(without, window) - made),
               "tpot_ms_without": tpot_p50(without.faults.gray.step_array(), during),
               "slo_with": _slo(eng, window), "slo_without": _slo(without, window)}
        if m is not None and unmitigated is not None:
            row["won_back_tokens"] = round(made - _tokens(unmitigated, window))
            row["tpot_ms_unmitigated"] = tpot_p50(unmitigated.faults.gray.step_array(), (during[1], window[1]))
        out[r["id"]] = row
    return out
