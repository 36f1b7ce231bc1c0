"""Weak scaling of a region on local Dask workers: K supernodes on K workers, K = 1, 2, 4, ...

Each K runs the named region's first member K times over at the same load per supernode, one
supernode per worker, and reports wall and CPU time. `efficiency` is the wall time at the first K
over the wall time at K (1.0: no cost of scale, if every worker has a core of its own);
`cpu_efficiency` the same from CPU seconds per supernode-second (workers plus the driver, whose
process also hosts a local cluster's scheduler), which a machine shared with others distorts less. The projection to a larger K
uses the measured costs that grow with K: the driver's routing and the exchange per window
(fitted as a + b K over the measured points); the workers' own compute per window stays flat.
"""
from __future__ import annotations

import os

import numpy as np

from twin.region.driver import run_region
from twin.region.spec import RegionSpec


def weak_scaling(spec: RegionSpec, ks: list[int], duration_s: float, window_s: float, seed: int,
                 load: float | None = None, project_to: int = 64) -> dict:
    rows = []
    for k in ks:
        before = os.getloadavg()[0]
        out = run_region(spec.resized(k), duration_s, seed=seed, load=load, window_s=window_s, workers=k)
        c = out["cost"]
        cpu = sorted({p["worker_cpu_s"] for p in out["supernodes"]})
        rows.append({"supernodes": k, "workers": out["workers"], "wall_s": c["wall_s"],
                     "sim_s_per_wall_s": round(duration_s / c["wall_s"], 3),
                     "worker_cpu_s": cpu, "driver_cpu_s": c["driver_cpu_s"], "windows": c["windows"],
                     "exchange_ms_per_window": c["exchange_ms_per_window"],
                     "driver_ms_per_window": round(1e3 * c["driver_cpu_s"] / c["windows"], 3),
                     "route_ms_per_window": c["route_ms_per_window"], "round_trip_ms": c["round_trip_ms"],
                     "sent_bytes_per_window": c["sent_bytes_per_window"],
                     "reply_bytes_per_window": c["reply_bytes_per_window"],
                     "completed": out["regional"]["requests"]["completed"],
                     "load_average_1m": [round(before, 2), round(os.getloadavg()[0], 2)]})
    for r in rows:        # CPU of the workers and the driver (with its scheduler) per supernode-second
        r["cpu_ms_per_supernode_s"] = round(1e3 * (sum(r["worker_cpu_s"]) + r["driver_cpu_s"])
                                            / r["supernodes"] / duration_s, 3)
    base = rows[0]                        # the first K (1 in the table the docs show)
    for r in rows:
        r["efficiency"] = round(base["wall_s"] / r["wall_s"], 3)
        r["cpu_efficiency"] = round(base["cpu_ms_per_supernode_s"] / r["cpu_ms_per_supernode_s"], 3)
    return {"region": spec.name, "deployment": spec.deployments[0], "duration_s": duration_s,
            "window_s": window_s, "cpus": os.cpu_count(), "rows": rows,
            "projection": project(rows, project_to)}


def project(rows: list[dict], k: int) -> dict:
    """Efficiency at `k` supernodes on `k` workers (a core each) from the measured costs. A window
    takes the driver's routing, a round trip to every worker, and one worker's compute (its CPU per
    window at the first K: one supernode); routing and the round trip are fitted as a + b K (b >= 0:
    a slope below zero is the noise of a shared machine, taken as flat at the largest measured)."""
    ks = np.array([r["supernodes"] for r in rows], dtype=float)
    compute = 1e3 * max(rows[0]["worker_cpu_s"]) / rows[0]["windows"] / rows[0]["supernodes"]
    fit = {}
    for key in ("route_ms_per_window", "round_trip_ms", "sent_bytes_per_window"):
        y = np.array([r[key] for r in rows], dtype=float)
        b, a = np.polyfit(ks, y, 1) if len(ks) > 1 else (0.0, y[0])
        if b < 0:              # noise on a shared machine: a cost does not fall with K
            b, a = 0.0, float(y.max())
        fit[key] = {"a": round(float(a), 3), "b_per_supernode": round(float(b), 3)}
    window = lambda n: compute + sum(max(f["a"] + f["b_per_supernode"] * n, 0.0)
                                     for key, f in fit.items() if key != "sent_bytes_per_window")
    return {"supernodes": k, "worker_compute_ms_per_window": round(compute, 3), "fits": fit,
            "window_ms": {"1": round(window(1), 3), str(k): round(window(k), 3)},
            "sent_bytes_per_window": round(fit["sent_bytes_per_window"]["a"]
                                           + fit["sent_bytes_per_window"]["b_per_supernode"] * k),
            "efficiency": round(window(1) / window(k), 3)}
