"""The cloud argument: a training job on the twin's perf model (training.py), a co-pool scheduler
that lends serving groups to it over a simulated day (copool.py), and what that costs (cost.py)."""
