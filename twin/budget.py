"""Per-client rate limits for the live dashboard (unlock attempts, uploads, faults).

A sliding window per key: at most `n` events in any `per_s` seconds. Memory is bounded: at most
`max_keys` keys are tracked (the least recently used is forgotten first), and each key holds at
most `n` timestamps. Refusals cost the refused client a message, nobody else any time.
"""
from __future__ import annotations

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
