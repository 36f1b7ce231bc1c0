"""Budgets of the live dashboard: per-client rate limits (unlock attempts, uploads, faults), a
shared CPU share (the sandboxes' engines), a log-line budget, and giving freed memory back.

A sliding window per key: at most `n` events in any `per_s` seconds. Memory is bounded: at most
`max_keys` keys are tracked (the least recently used is forgotten first), and each key holds at
most `n` timestamps. Refusals cost the refused client a message, nobody else any time.
"""
from __future__ import annotations

import ctypes
import gc
import threading
import time
from collections import OrderedDict, deque
from typing import Callable


class RateLimit:
    def __init__(self, n: int, per_s: float = 60.0, *, max_keys: int = 10_000,
                 clock: Callable[[], float] = time.monotonic):
        self.n, self.per_s, self.max_keys, self._clock = int(n), float(per_s), int(max_keys), clock
        self._hits: OrderedDict[str, deque] = OrderedDict()
        self._lock = threading.Lock()

    def wait_s(self, *keys: str) -> float:
        """0 if every key may act now (the event is then counted for each key), else the seconds
        until the busiest key may act again (nothing is counted)."""
        now = self._clock()
        with self._lock:
            waits = []
            for k in keys:
                q = self._hits.get(k)
                while q and now - q[0] >= self.per_s:
                    q.popleft()
                if q is not None and len(q) >= self.n:
                    waits.append(self.per_s - (now - q[0]))
            if waits:
                return max(max(waits), 1e-3)
            for k in keys:
                q = self._hits.setdefault(k, deque(maxlen=self.n))
                q.append(now)
                self._hits.move_to_end(k)
            while len(self._hits) > self.max_keys:
                self._hits.popitem(last=False)
        return 0.0


class CpuShare:
    """A share of one core's time, spent by several threads together (the sandboxes' engines): at
    most `share` CPU seconds per wall second, with bursts up to `burst_s` of that. A thread asks
    `wait_s()` before it works and reports what it used with `spend()`; what the share leaves is
    the web process's own (the shared twin and every viewer's polls), whatever the sandboxes do."""

    def __init__(self, share: float, burst_s: float = 1.0, clock: Callable[[], float] = time.monotonic):
        self.share, self._cap = float(share), float(share) * float(burst_s)
        self._clock = clock
        self._level, self._t = self._cap, clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._level = min(self._cap, self._level + (now - self._t) * self.share)
        self._t = now

    def wait_s(self) -> float:
        """0 if the share has CPU time left now, else the wall seconds until it has."""
        with self._lock:
            self._refill()
            return 0.0 if self._level > 0 else -self._level / self.share + 1e-3

    def spend(self, cpu_s: float) -> None:
        with self._lock:
            self._refill()
            self._level -= max(float(cpu_s), 0.0)


class LogBudget:
    """At most `n` lines a minute to `logger`: a flood of refusals or broken requests costs the log a
    few lines, not one per request. The last line allowed in a minute says that more are held back;
    the first line of the next minute says how many were."""

    def __init__(self, logger, n: int, per_s: float = 60.0, *, clock: Callable[[], float] = time.monotonic):
        self.log, self._limit, self._suppressed = logger, RateLimit(n, per_s, clock=clock), 0
        self._lock = threading.Lock()

    def __call__(self, level: int, msg: str, *args) -> None:
        with self._lock:
            if self._limit.wait_s("log"):
                self._suppressed += 1
                return
            held, self._suppressed = self._suppressed, 0
            last = len(self._limit._hits["log"]) == self._limit.n
        if held:
            msg += f" ({held} similar lines suppressed before this one)"
        if last:
            msg += f" (at most {self._limit.n} such lines a minute: the next are suppressed and counted)"
        self.log.log(level, msg, *args)


def give_back_memory() -> None:
    """Collect, then hand the heap's free pages back to the OS, so the web process's RSS falls back
    after a sandbox's engine is dropped."""
    gc.collect()
    trim_heap()


def trim_heap() -> None:
    """Hand the heap's free pages back to the OS (glibc keeps them otherwise: a live engine's tables
    that grew leave their old copies' pages behind, 9-14 MB an engine by 2,000-3,000 simulated s)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):      # not glibc: nothing to trim
        pass


class InFlight:
    """How many web requests are being served now. Sandboxes' engines wait (briefly) while any are,
    so viewers' polls do not queue for the interpreter lock behind a private twin at max speed."""

    def __init__(self):
        self._n = 0
        self._lock = threading.Lock()

    def enter(self) -> None:
        with self._lock:
            self._n += 1

    def leave(self) -> None:
        with self._lock:
            self._n = max(self._n - 1, 0)

    def wait_idle(self, max_s: float, step_s: float = 0.002) -> None:
        """Sleep until no request is in flight, at most `max_s` (so a sandbox still moves in a busy room)."""
        end = time.monotonic() + max_s
        while self._n and time.monotonic() < end:
            time.sleep(step_s)


REQUESTS = InFlight()
