"""Background sweeps for the dashboard: bounded, one per viewer, never in the engine's thread.

A sweep runs on a worker thread that drives the local process pool (or Dask), so the live twin
keeps running. Limits: one running sweep per viewer, MAX_RUNNING in all, START_RATE starts per
minute per viewer, and the page's own size limits (LIMITS) checked by points.plan before a start.
Finished jobs are kept for the page to read (the newest KEEP_DONE).
"""
from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from ..budget import RateLimit
from .cache import Cache
from .points import Task
from .sweep import run_sweep, summarize

# Page limits (assumptions: a sweep a viewer waits for, ~1 min on two cores at ~0.25 s a run).
LIMITS = {"points": 60, "seeds": 4, "runs": 120, "sim_seconds": 120 * 60}
MAX_DURATION_S = 60.0
MAX_RUNNING = 2           # sweeps running at once, all viewers
KEEP_DONE = 64            # finished jobs kept for their pages
START_RATE = RateLimit(6, 60.0)   # sweep starts per viewer per minute
WORKERS = 2               # pool processes per sweep


@dataclass
class Job:
    id: str
    viewer: str
    varied: list
    total: int
    done: int = 0
    state: str = "running"            # running | done | error
    rows: list = field(default_factory=list)
    points: list = field(default_factory=list)
    message: str = ""

    def view(self) -> dict:
        return {"id": self.id, "state": self.state, "done": self.done, "total": self.total,
                "varied": self.varied, "points": self.points, "rows": self.rows, "message": self.message}


class Jobs:
    def __init__(self, run=run_sweep, cache: Cache | None = None, limiter: RateLimit = START_RATE):
        self._run, self._cache, self._limiter = run, cache, limiter
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def start(self, viewer: str, tasks: list[Task], varied: list[str]) -> str:
        """Start a sweep for `viewer`; ValueError (a message for the page) if a limit says no."""
        with self._lock:
            running = [j for j in self._jobs.values() if j.state == "running"]
            if any(j.viewer == viewer for j in running):
                raise ValueError("a sweep of yours is still running (allowed: one at a time per viewer)")
            if len(running) >= MAX_RUNNING:
                raise ValueError(f"{len(running)} sweeps are running (allowed: {MAX_RUNNING} at once); "
                                 f"try again when one ends")
            wait = self._limiter.wait_s(viewer)
            if wait:
                raise ValueError(f"sweeps: at most {self._limiter.n} starts per minute; try again in "
                                 f"{int(wait) + 1} s")
            job = Job(f"j{next(self._ids)}", viewer, varied, len(tasks))
            self._jobs[job.id] = job
            done = [k for k, j in self._jobs.items() if j.state != "running"]
            for k in done[:max(0, len(done) - KEEP_DONE)]:
                del self._jobs[k]
        threading.Thread(target=self._work, args=(job, tasks), daemon=True, name=f"sweep-{job.id}").start()
        return job.id

    def _work(self, job: Job, tasks: list[Task]) -> None:
        def progress(n: int, _total: int) -> None:
            job.done = n
        try:
            rows, _ = self._run(tasks, self._cache or Cache(), WORKERS, None, progress)
            job.rows, job.points = rows, summarize(rows, job.varied)
            job.done, job.state = job.total, "done"
        except Exception as exc:     # noqa: BLE001 - the page shows one line; the web process lives on
            job.state, job.message = "error", " ".join(str(exc).split())[:200] or type(exc).__name__

    def get(self, job_id, viewer: str) -> dict | None:
        """A job of this viewer (another viewer's id reads as absent)."""
        j = self._jobs.get(job_id) if isinstance(job_id, str) else None
        return j.view() if j is not None and j.viewer == viewer else None


JOBS = Jobs()
