"""A sweep: every Task of a plan -> one row each (from the cache when the same config ran before),
then per point the mean over seeds with a 95% confidence interval, and the Pareto frontier."""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from twin.explore import executor as runner
from twin.explore.rowcache import Cache
from twin.explore.evaluate import METRICS, evaluate
from twin.explore.points import Task


def run_sweep(tasks: list[Task], cache: Cache | None = None, workers: int | None = None,
              client=None, progress=True) -> tuple[list[dict], dict]:
    """(rows in task order, counts {"runs", "cached"}); cache=None skips the cache."""
    cached = {t.key: cache.get(t.key) for t in tasks} if cache else {}
    todo = [t for t in tasks if cached.get(t.key) is None]
    fresh = runner.run(evaluate, todo, workers=workers, client=client, progress=progress)
    by_key = {r["key"]: r for r in fresh}
    if cache:
        for r in fresh:
            cache.put(r)
    rows = [cached.get(t.key) or by_key[t.key] for t in tasks]
    return rows, {"runs": len(todo), "cached": len(tasks) - len(todo)}


def ci95(values: list[float]) -> tuple[float | None, float | None]:
    """(mean, half-width of the 95% Student-t interval); the width is None below two values."""
    v = np.array([x for x in values if x is not None], dtype=float)
    if not len(v):
        return None, None
    mean = float(v.mean())
    if len(v) < 2:
        return mean, None
    from scipy import stats            # here, not at the top: `python -m twin bench` need not load it
    half = float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))
    return mean, half


def summarize(rows: list[dict], varied: list[str]) -> list[dict]:
    """One entry per point (in first-seen order): the varied values, seeds, and for each metric
    its mean and 95% half-width (`<metric>_ci95`)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[tuple(r.get(k) for k in ("deployment", "scenario", "source", *varied))].append(r)
    out = []
    for g in groups.values():
        p = {k: g[0][k] for k in ("deployment", "scenario", "source", *varied)}
        p["seeds"] = len(g)
        for m in METRICS:
            mean, half = ci95([r[m] for r in g])
            p[m] = None if mean is None else round(mean, 4)
            p[f"{m}_ci95"] = None if half is None else round(half, 4)
        out.append(p)
    return out


def pareto(points: list[dict], x: str = "tokens_per_s_per_user", y: str = "goodput_per_chip",
           x_larger_better: bool = True) -> list[int]:
    """Indices of the points no other point beats on both x and y (y maximised; x maximised, or
    minimised for a latency), in order of x."""
    sign = 1 if x_larger_better else -1
    pts = [(sign * p[x], p[y], i) for i, p in enumerate(points) if p.get(x) is not None and p.get(y) is not None]
    front, best_y = [], -math.inf
    for px, py, i in sorted(pts, key=lambda t: (-t[0], -t[1])):
        if py > best_y:
            front.append(i)
            best_y = py
    return sorted(front, key=lambda i: points[i][x])
