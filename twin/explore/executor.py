"""Run a function over many inputs: in this process, on a local process pool, or on a Dask
distributed cluster (`--scheduler tcp://HOST:PORT` or TWIN_DASK_SCHEDULER). Results come back in
input order whatever order they finish in, so local and distributed sweeps give the same rows."""
from __future__ import annotations

import multiprocessing
import os
import re
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Callable, Sequence

_ADDRESS = re.compile(r"^tcp://[A-Za-z0-9_.\-\[\]:]{1,200}:\d{1,5}$")
CONNECT_TIMEOUT_S = 5
ROOT = Path(__file__).resolve().parents[2]      # this checkout, which a cluster's processes must import


def scheduler_address(text: str | None) -> str | None:
    """The Dask scheduler to use: the flag, else TWIN_DASK_SCHEDULER, else None (local)."""
    addr = text if text is not None else os.environ.get("TWIN_DASK_SCHEDULER") or None
    if addr is not None and not _ADDRESS.match(addr):
        raise ValueError(f"--scheduler {addr!r}: allowed tcp://HOST:PORT (a Dask scheduler address)")
    return addr


def connect(address: str):
    """A Dask client, or a one-line error before any work starts."""
    from distributed import Client
    try:
        return Client(address, timeout=f"{CONNECT_TIMEOUT_S}s", set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise ValueError(f"--scheduler {address}: unreachable ({' '.join(str(exc).split())[:160]})") from None


def result(future, address: str):
    """A Dask future's result; a scheduler or worker that cannot import this `twin` (started
    without the checkout on its PYTHONPATH) is a one-line error, not Dask's traceback."""
    try:
        return future.result()
    except (ModuleNotFoundError, RuntimeError) as exc:
        chain, e = [], exc
        while e is not None and len(chain) < 8:
            chain.append(e)
            e = e.__cause__ or e.__context__
        if not any(isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0] == "twin"
                   or "different environments" in str(e) for e in chain):
            raise
        raise ValueError(f"--scheduler {address}: its scheduler or workers cannot import twin (start both "
                         f"with this checkout on PYTHONPATH: PYTHONPATH={ROOT} dask scheduler, and the "
                         f"same for dask worker)") from None


def _bar(total: int, progress, desc: str):
    if callable(progress):
        return _Callback(progress, total)
    from tqdm import tqdm
    return tqdm(total=total, file=sys.stderr, desc=desc, unit="pt", disable=not progress or not total)


class _Callback:
    """A progress sink calling fn(done, total) (the dashboard's progress bar)."""

    def __init__(self, fn, total: int):
        self.fn, self.total, self.n = fn, total, 0

    def update(self, k: int = 1) -> None:
        self.n += k
        self.fn(self.n, self.total)

    def close(self) -> None:
        pass


def run(fn: Callable, items: Sequence, workers: int | None = None, client=None,
        progress=True, desc: str = "points") -> list:
    """[fn(x) for x in items], computed in parallel; progress is a bool (tqdm on stderr) or a
    callable(done, total). workers=1 runs in this process; otherwise every task runs in a worker
    process (an engine task registers its derived deployment in its process's catalog)."""
    items = list(items)
    bar = _bar(len(items), progress, desc)
    out: list = [None] * len(items)
    try:
        if not items:
            return out
        if client is not None:
            futures = client.map(fn, items, pure=False)
            for i, f in enumerate(futures):     # in input order: the bar may lag, never runs ahead
                out[i] = result(f, client.scheduler.address)
                bar.update(1)
            return out
        n = workers or os.cpu_count() or 1
        if n == 1:          # only when asked: in a web process a task must not touch its catalog
            for i, x in enumerate(items):
                out[i] = fn(x)
                bar.update(1)
            return out
        ctx = multiprocessing.get_context("forkserver")      # safe beside the web app's threads
        ctx.set_forkserver_preload([getattr(fn, "__module__", "twin")])   # workers start with it imported
        with ProcessPoolExecutor(max_workers=min(n, len(items)), mp_context=ctx) as pool:
            futs = {pool.submit(fn, x): i for i, x in enumerate(items)}
            for f in as_completed(futs):
                out[futs[f]] = f.result()
                bar.update(1)
        return out
    finally:
        bar.close()
