"""Where a region's groups of supernodes run: all in this process, or one group per Dask worker.

Both answer `call(method, args per group)` with the groups' results in group order, so the driver
is the same whichever runs it. On Dask each group is an actor pinned to its own worker (a local
cluster of `workers` processes when no scheduler is given, as the Explorer's sweeps use one); the
workers must import this `twin` (a remote cluster: the same checkout on its PYTHONPATH).
"""
from __future__ import annotations

from twin.region.member import Group


def partition(n: int, groups: int) -> list[range]:
    """Supernodes 0..n-1 in `groups` contiguous runs, as even as they go."""
    return [range(g * n // groups, (g + 1) * n // groups) for g in range(groups)]


class InProcess:
    """Every group in this process (the single-process reference)."""

    workers = 1

    def __init__(self, parts: list[dict]):
        self.groups = [Group(p) for p in parts]

    def call(self, method: str, args: list[tuple]) -> list:
        return [getattr(g, method)(*a) for g, a in zip(self.groups, args)]

    def call_one(self, g: int, method: str, args: tuple):
        return getattr(self.groups[g], method)(*args)

    def close(self) -> None:
        pass


class OnDask:
    """One group per Dask worker, as an actor; calls to all groups run concurrently."""

    def __init__(self, parts: list[dict], workers: int | None, address: str | None):
        from distributed import LocalCluster

        from twin.explore import executor as runner
        self.cluster = None
        if address is None:
            self.cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                        host="127.0.0.1", dashboard_address=None)
            address = self.cluster.scheduler_address
        self.client = runner.connect(address)
        self.client.direct_to_workers = True     # actor calls go straight to the worker, not through the scheduler
        try:
            if workers:
                self.client.wait_for_workers(workers, timeout=60)
            names = sorted(self.client.scheduler_info()["workers"])
            self.workers = min(len(names), len(parts))       # the workers that hold a group
            with self.client.as_current():      # actors find their client as the current one
                futures = [self.client.submit(Group, p, actor=True, pure=False, workers=[names[k % len(names)]])
                           for k, p in enumerate(parts)]
                self.groups = [runner.result(f, address) for f in futures]
        except BaseException:
            self.close()
            raise

    def call(self, method: str, args: list[tuple]) -> list:
        with self.client.as_current():
            pending = [getattr(g, method)(*a) for g, a in zip(self.groups, args)]
            return [p.result() for p in pending]

    def call_one(self, g: int, method: str, args: tuple):
        with self.client.as_current():
            return getattr(self.groups[g], method)(*args).result()

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
