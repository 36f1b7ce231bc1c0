"""Explorer: parameter sweeps, capacity search and system comparison on the engine and perf model.

points.py   the keys a sweep may vary, their bounds, and how each maps onto a deployment or scenario
evaluate.py one point (a Task) -> one row, by the engine or by the perf model (source says which)
sweep.py    grid x seeds -> rows (cached), with per-point means and 95% confidence intervals
capacity.py highest request rate meeting the SLOs (engine), and the prefill/decode x EP search
compare.py  the same model and workload on CloudMatrix384 and the GPU systems
whatif.py   variants beside the CloudMatrix384 baseline: step-time figures, and engine runs of the what-ifs
cache.py    Parquet cache keyed by a hash of the full config
runner.py   local process pool, or a Dask distributed cluster
jobs.py     background sweeps for the dashboard, bounded per viewer
bench.py    points per minute (one process, pool, Dask) and one capacity search's time
cli.py      `python -m twin sweep | capacity | compare | explore-bench`
"""
