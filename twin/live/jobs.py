"""Heavy work outside the web process: a bounded queue of jobs, each run in a process of its own at
the lowest CPU priority, watched, and killed past its ceilings or on Cancel.

Why a process per job (not Dash background callbacks, not the Explorer's Dask client): the shared
twin and every viewer's polls live in the web process and share its GIL, so no multi-second job
may run there at all; a child at `nice 19` gets only the CPU the web process leaves idle (the
Linux scheduler gives a nice-0 process ~70x its weight), so the shared twin's pace is protected by
design, not by luck (on Linux the job is also in the SCHED_IDLE class: it runs only on CPU time
nothing else wants). A fresh process per job also gives its memory back to the OS when it ends,
and Cancel or a ceiling is a plain `kill` with nothing to clean up. Dash's background callbacks
would need a disk cache and a second server process for no gain here; Dask stays the choice for
command-line sweeps on a cluster (twin.explore.executor).

Budgets (assumptions, sized to a two-core machine that also serves the room; all stated in the
README): WORKERS jobs run at once, MAX_QUEUED wait; a viewer (browser) may have one job queued or
running, an address PER_ADDRESS; each job is refused up front if its estimated CPU time (from its
size: rate x duration x runs, see twin.explore.cost) exceeds MAX_JOB_CPU_S, an address may ask for
at most ADDRESS_CPU_PER_HOUR estimated CPU-seconds an hour, and while it runs a job is killed when
its measured CPU time passes its ceiling (twice its estimate plus a margin, at most MAX_JOB_CPU_S)
or its memory passes MAX_JOB_RSS_MB. A job may send something with its progress (`progress(done,
partial)`: what a page shows while it runs, e.g. the MaaS day's ledger after each step); the pool
keeps at most `total` of those. The module never imports dash.
"""
from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Callable

import psutil

log = logging.getLogger(__name__)

WORKERS = max(1, int(os.environ.get("TWIN_JOB_WORKERS", "1")))   # jobs at once (a core for the room)
MAX_QUEUED = 8                 # jobs waiting, all viewers
PER_CLIENT = 1                 # jobs queued or running per browser
PER_ADDRESS = 2                # ... per network address (a browser can mint secrets, not addresses)
MAX_JOB_CPU_S = 600.0          # the largest job: 10 CPU-minutes
ADDRESS_CPU_PER_HOUR = 1800.0  # estimated CPU-seconds one address may ask for in an hour
CEILING_MARGIN_S = 30.0        # a job may use 2 x its estimate + this before it is stopped
MAX_JOB_RSS_MB = 1024          # memory of one job process
KEEP_DONE = 64                 # finished jobs kept for their pages (results are small)
POLL_S = 0.2                   # how often the supervisor reads progress and checks ceilings
NICE = 19                      # a job's CPU priority: the lowest (and the idle scheduling class, on Linux)


class JobRefused(ValueError):
    """A job the pool will not take; the message says which limit and what is allowed."""


@dataclass
class Job:
    id: str
    kind: str
    client: str
    addr: str | None
    total: int
    cost_s: float                       # estimated CPU seconds
    ceiling_s: float                    # CPU seconds after which it is stopped
    fn: Callable | None = None
    args: tuple = ()
    env: dict | None = None             # the web process's environment when the job was asked for
    done: int = 0
    partial: list = field(default_factory=list)   # what the job sent with its progress, at most `total` items
    state: str = "queued"               # queued | running | done | error | cancelled
    result: Any = None
    message: str = ""
    submitted: float = field(default_factory=time.monotonic)
    cpu_s: float = 0.0
    proc: Any = None
    conn: Any = None

    @property
    def active(self) -> bool:
        return self.state in ("queued", "running")


def _child(conn, fn, args, env) -> None:
    """A job process: lowest priority, the environment of the request that asked for it (the
    forkserver this process comes from keeps the one it started with: a TWIN_SWEEP_CACHE set later
    would not reach the job, which would then cache its rows where the page does not read them),
    fn(*args, progress=...), its result or one line back."""
    os.environ.clear()
    os.environ.update(env)
    try:
        os.nice(NICE)
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))   # only CPU nothing else wants
    except (OSError, AttributeError):     # not Linux: nice alone
        pass
    try:
        result = fn(*args, progress=lambda done, partial=None: conn.send(("progress", int(done), partial)))
        conn.send(("done", result))
    except BaseException as exc:      # noqa: BLE001 - one line for the page; the pool lives on
        conn.send(("error", " ".join(f"{type(exc).__name__}: {exc}".split())[:200]))
    finally:
        conn.close()


class JobPool:
    """The web process's heavy-job queue (one per process: `pool()`)."""

    def __init__(self, workers: int = WORKERS, *, max_queued: int = MAX_QUEUED, per_client: int = PER_CLIENT,
                 per_address: int = PER_ADDRESS, max_cost_s: float = MAX_JOB_CPU_S,
                 address_cpu_per_hour: float = ADDRESS_CPU_PER_HOUR, max_rss_mb: float = MAX_JOB_RSS_MB,
                 margin_s: float = CEILING_MARGIN_S, clock: Callable[[], float] = time.monotonic):
        self.workers, self.max_queued = workers, max_queued
        self.per_client, self.per_address = per_client, per_address
        self.max_cost_s, self.address_cpu_per_hour, self.max_rss_mb = max_cost_s, address_cpu_per_hour, max_rss_mb
        self.margin_s = margin_s
        self._clock = clock
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._asked: dict[str, deque] = {}            # addr -> (time, estimated cpu s) of the last hour
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.refused: dict[str, int] = {}            # refusals by limit (the attack benchmark reads them)

    # ---- asking --------------------------------------------------------------------------------

    def submit(self, kind: str, fn: Callable, args: tuple, *, total: int, cost_s: float, client: str,
               addr: str | None) -> str:
        """Queue fn(*args, progress=callable(done, partial=None)) for `client`; JobRefused names the limit."""
        with self._lock:
            self._check(client, addr, cost_s)
            ceiling = min(self.max_cost_s, 2 * float(cost_s) + self.margin_s)
            job = Job(f"{kind[:2]}{next(self._ids)}", kind, client, addr, max(int(total), 1), float(cost_s),
                      ceiling, fn, tuple(args), env=dict(os.environ))
            self._jobs[job.id] = job
            if addr is not None:
                self._asked.setdefault(addr, deque()).append((self._clock(), job.cost_s))
            self._forget_done()
        self._start_supervisor()
        self._wake.set()
        log.info("job %s (%s) queued: %.0f CPU-s estimated, %d steps", job.id, kind, job.cost_s, job.total)
        return job.id

    def _check(self, client: str, addr: str | None, cost_s: float) -> None:
        active = [j for j in self._jobs.values() if j.active]

        def refuse(limit: str, msg: str):
            self.refused[limit] = self.refused.get(limit, 0) + 1
            raise JobRefused(msg)
        if cost_s > self.max_cost_s:
            refuse("size", f"this job would take about {cost_s:,.0f} CPU-seconds (allowed at most "
                           f"{self.max_cost_s:,.0f}): fewer points, seeds or simulated seconds, or a lower rate")
        if sum(j.client == client for j in active) >= self.per_client:
            refuse("browser", f"a job of yours is still queued or running (allowed: {self.per_client} at a "
                              "time per browser); wait for it or cancel it")
        if addr is not None and sum(j.addr == addr for j in active) >= self.per_address:
            refuse("address", f"{self.per_address} jobs are already queued or running from your network "
                              "address (the most allowed); wait for one to end")
        if sum(j.state == "queued" for j in active) >= self.max_queued:
            refuse("queue", f"{self.max_queued} jobs are waiting (the most allowed); try again in a few minutes")
        if addr is not None:
            asked = self._asked.get(addr, deque())
            now = self._clock()
            while asked and now - asked[0][0] >= 3600:
                asked.popleft()
            used = sum(c for _, c in asked)
            if used + cost_s > self.address_cpu_per_hour:
                refuse("hourly", f"your network address asked for {used:,.0f} CPU-seconds of jobs this hour; "
                                 f"this one needs about {cost_s:,.0f} (allowed {self.address_cpu_per_hour:,.0f} "
                                 "an hour)")

    def _forget_done(self) -> None:
        done = [k for k, j in self._jobs.items() if not j.active]
        for k in done[:max(0, len(done) - KEEP_DONE)]:
            del self._jobs[k]
        for addr in [a for a, q in self._asked.items() if not q or self._clock() - q[-1][0] >= 3600]:
            del self._asked[addr]

    # ---- reading and cancelling ------------------------------------------------------------------

    def view(self, job_id, client: str) -> dict | None:
        """A job of this browser (another browser's id reads as absent): state, queue position (1 =
        next), progress, CPU used and its ceiling, result when done."""
        with self._lock:
            j = self._jobs.get(job_id) if isinstance(job_id, str) else None
            if j is None or j.client != client:
                return None
            queued = [q for q in self._jobs.values() if q.state == "queued"]
            pos = queued.index(j) + 1 if j.state == "queued" else 0
            ahead = sum(q.cost_s for q in queued[:max(pos - 1, 0)]) + sum(
                max(r.cost_s - r.cpu_s, 0.0) for r in self._jobs.values() if r.state == "running")
            return {"id": j.id, "kind": j.kind, "state": j.state, "position": pos, "done": j.done,
                    "total": j.total, "cost_s": round(j.cost_s, 1), "cpu_s": round(j.cpu_s, 1),
                    "ceiling_s": round(j.ceiling_s, 1), "wait_s": round(ahead / self.workers, 0) if pos else 0,
                    "message": j.message, "result": j.result if j.state == "done" else None,
                    "partial": list(j.partial) if j.state == "running" else []}

    def cancel(self, job_id, client: str) -> bool:
        """Cancel this browser's queued or running job (its process is killed); False if none."""
        with self._lock:
            j = self._jobs.get(job_id) if isinstance(job_id, str) else None
            if j is None or j.client != client or not j.active:
                return False
            self._end(j, "cancelled", "cancelled by its viewer")
        self._wake.set()
        return True

    def counts(self) -> dict:
        with self._lock:
            states = [j.state for j in self._jobs.values()]
        return {s: states.count(s) for s in ("queued", "running", "done", "error", "cancelled")}

    def shutdown(self) -> None:
        with self._lock:
            for j in self._jobs.values():
                if j.active:
                    self._end(j, "cancelled", "the server stopped")

    # ---- the supervisor ----------------------------------------------------------------------------

    def _start_supervisor(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._supervise, name="job-pool", daemon=True)
                self._thread.start()

    def _supervise(self) -> None:
        while True:
            self._wake.wait(POLL_S)
            self._wake.clear()
            try:
                with self._lock:
                    self._step()
                    if not any(j.active for j in self._jobs.values()):
                        self._thread = None
                        return
            except Exception:      # noqa: BLE001 - the supervisor must outlive any one job
                log.exception("job pool: supervisor step failed")

    def _step(self) -> None:
        for j in [j for j in self._jobs.values() if j.state == "running"]:
            self._read(j)
        running = sum(j.state == "running" for j in self._jobs.values())
        for j in [j for j in self._jobs.values() if j.state == "queued"][:max(self.workers - running, 0)]:
            self._launch(j)

    def _launch(self, j: Job) -> None:
        ctx = multiprocessing.get_context("forkserver")     # safe beside the web app's threads
        ctx.set_forkserver_preload(["twin.engine", "twin.live.jobs"])
        parent, child = ctx.Pipe(duplex=False)
        j.proc = ctx.Process(target=_child, args=(child, j.fn, j.args, j.env), daemon=True, name=f"job-{j.id}")
        j.proc.start()
        child.close()
        j.conn, j.state, j.fn, j.args, j.env = parent, "running", None, (), None
        log.info("job %s started (pid %s)", j.id, j.proc.pid)

    def _read(self, j: Job) -> None:
        try:
            while j.conn.poll():
                what, value, *partial = j.conn.recv()
                if what == "progress":
                    j.done = min(value, j.total)
                    if partial and partial[0] is not None and len(j.partial) < j.total:
                        j.partial.append(partial[0])
                elif what == "done":
                    j.result, j.done = value, j.total
                    self._end(j, "done", "")
                    return
                else:
                    self._end(j, "error", value)
                    return
        except (EOFError, OSError):
            self._end(j, "error", "the job's process ended without a result")
            return
        try:
            proc = psutil.Process(j.proc.pid)
            times, rss = proc.cpu_times(), proc.memory_info().rss / 2**20
            j.cpu_s = times.user + times.system
        except psutil.Error:
            return                                    # gone: the pipe says why on the next read
        if j.cpu_s > j.ceiling_s:
            self._end(j, "error", f"stopped after {j.cpu_s:,.0f} CPU-seconds, its ceiling (estimated "
                                  f"{j.cost_s:,.0f}); make it smaller")
        elif rss > self.max_rss_mb:
            self._end(j, "error", f"stopped at {rss:,.0f} MB of memory, more than the {self.max_rss_mb:,.0f} MB "
                                  "a job may hold; make it smaller")

    def _end(self, j: Job, state: str, message: str) -> None:
        j.state, j.message, j.fn, j.args, j.env = state, message, None, (), None
        if j.proc is not None:
            if j.proc.is_alive():
                j.proc.kill()
            j.proc.join(1.0)
            j.conn.close()
            j.proc = j.conn = None
        if state != "done":
            log.info("job %s %s: %s", j.id, state, message)


_pool: JobPool | None = None
_pool_lock = threading.Lock()


def pool() -> JobPool:
    """The process-wide job pool, created on first use (never at import: gunicorn forks safely)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = JobPool()
        return _pool
