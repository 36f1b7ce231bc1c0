"""Flow-level bandwidth sharing: transfers are fluid flows over links, sharing by max-min fairness.

Rates are recomputed only when a flow starts or ends or a capacity changes (a fault); between
those moments every flow drains at a constant rate, so one wake-up per change is enough.
"""
from __future__ import annotations

import simpy


class FlowNet:
    def __init__(self, env: simpy.Environment):
        self.env = env
        self.capacity: dict[str, float] = {}      # link -> bytes/s
        self.flows: dict[int, list] = {}          # id -> [remaining bytes, links, rate, event, latency]
        self._next = 0
        self._last = 0.0
        self._gen = 0
        self.bytes_done: dict[str, float] = {}    # link -> bytes carried (for traffic metrics)

    def set_capacity(self, link: str, bytes_per_s: float) -> None:
        self._drain()
        self.capacity[link] = max(0.0, bytes_per_s)
        self._solve()

    def start(self, nbytes: float, links: tuple, latency_s: float = 0.0) -> simpy.Event:
        """A transfer of `nbytes` over `links`; the event fires when the last byte lands."""
        for link in links:
            if link not in self.capacity:
                raise KeyError(f"flow link {link!r}: unknown (known: {', '.join(sorted(self.capacity))})")
        done = self.env.event()
        self._drain()
        self.flows[self._next] = [float(nbytes), tuple(links), 0.0, done, latency_s]
        self._next += 1
        self._solve()
        return done

    def rate_of(self, link: str) -> float:
        return sum(f[2] for f in self.flows.values() if link in f[1])

    def _drain(self) -> None:
        dt = self.env.now - self._last
        self._last = self.env.now
        if dt <= 0:
            return
        for f in self.flows.values():
            moved = min(f[0], f[2] * dt)
            f[0] -= moved
            for link in f[1]:
                self.bytes_done[link] = self.bytes_done.get(link, 0.0) + moved

    def _solve(self) -> None:
        """Progressive filling: raise all unfrozen flows equally until a link saturates.

        A flow crossing a dead link (capacity 0) waits at rate 0 and is left out of the filling,
        so flows elsewhere keep their fair share; it resumes when the capacity returns."""
        for f in self.flows.values():
            f[2] = 0.0
        cap = dict(self.capacity)
        active = {i: f for i, f in self.flows.items() if all(cap[l] > 0 for l in f[1])}
        while active:
            users: dict[str, int] = {}
            for f in active.values():
                for link in f[1]:
                    users[link] = users.get(link, 0) + 1
            share, tight = min((max(cap[l], 0.0) / n, l) for l, n in users.items())
            frozen = [i for i, f in active.items() if tight in f[1]]
            for f in active.values():
                f[2] += share
                for link in f[1]:
                    cap[link] -= share
            for i in frozen:
                del active[i]
        self._arm()

    def _arm(self) -> None:
        self._gen += 1
        finish = [(f[0] / f[2]) for f in self.flows.values() if f[2] > 0]
        if finish:
            self.env.process(self._wake(self._gen, max(0.0, min(finish))))

    def _wake(self, gen: int, delay: float):
        yield self.env.timeout(delay)
        if gen != self._gen:
            return       # a newer change re-armed the wake-up
        self._drain()
        done = [i for i, f in self.flows.items() if f[0] <= 1e-6 * max(1.0, f[2])]
        for i in done:
            f = self.flows.pop(i)
            if f[4] > 0:
                self.env.process(self._deliver(f[3], f[4]))
            else:
                f[3].succeed()
        self._solve()

    def _deliver(self, ev: simpy.Event, latency: float):
        yield self.env.timeout(latency)
        ev.succeed()
