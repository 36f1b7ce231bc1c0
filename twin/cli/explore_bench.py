"""Explorer benchmark: sweep points per minute in one process, on a local pool and on Dask with one
and two workers (a loopback LocalCluster unless a scheduler is given), and one capacity search."""
from __future__ import annotations

import os
import time

from twin.explore import executor as runner
from twin.explore.capacity import Spec, capacity
from twin.explore.points import plan
from twin.explore.sweep import run_sweep

DEPLOYMENT, SCENARIO = "cloudmatrix-infer-paper", "paper-decode"


def _rate(tasks, **kw) -> dict:
    t0 = time.perf_counter()
    run_sweep(tasks, None, progress=False, **kw)
    s = time.perf_counter() - t0
    return {"seconds": round(s, 2), "points_per_minute": round(len(tasks) / s * 60, 1)}


def _on_dask(tasks, workers: int, address: str | None) -> dict:
    from distributed import LocalCluster
    cluster = None
    t0 = time.perf_counter()
    if address is None:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address=None)
        address = cluster.scheduler_address
    client = runner.connect(address)
    try:
        client.wait_for_workers(workers)
        start = round(time.perf_counter() - t0, 2)
        run_sweep(tasks[:workers], None, client=client, progress=False)    # workers import the twin
        return {**_rate(tasks, client=client), "workers": len(client.scheduler_info()["workers"]),
                "cluster_start_seconds": start}
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def bench(points: int = 24, duration_s: float = 30.0, scheduler: str | None = None) -> dict:
    loads = [round(0.3 + 0.9 * i / max(points - 1, 1), 4) for i in range(points)]
    tasks = plan(DEPLOYMENT, SCENARIO, [("load", loads)], duration_s=duration_s)
    out = {"sweep": f"{points} points of {SCENARIO} on {DEPLOYMENT}, {duration_s:g} s simulated each, no cache",
           "cpus": os.cpu_count(), "load_average_before": round(os.getloadavg()[0], 2)}
    out["one_process"] = _rate(tasks, workers=1)
    out["local_pool_2"] = _rate(tasks, workers=2)
    out["dask_1_worker"] = _on_dask(tasks, 1, None)
    out["dask_2_workers"] = _on_dask(tasks, 2, scheduler)
    out["dask_speedup_2_vs_1"] = round(out["dask_2_workers"]["points_per_minute"]
                                       / out["dask_1_worker"]["points_per_minute"], 2)
    out["load_average_after"] = round(os.getloadavg()[0], 2)     # other processes share the cores
    cap = capacity(Spec(DEPLOYMENT, SCENARIO))
    out["capacity_search"] = {"seconds": cap["seconds"], "engine_runs": len(cap["probes"]),
                              "max_rate": cap["max_rate"], "deployment": DEPLOYMENT, "scenario": SCENARIO}
    return out
