"""The worker side of a region: a group of supernodes, each a full twin engine, fed by the router.

A `Group` holds some of the region's engines (all of them in a single-process run; one or a few
per Dask worker otherwise). At each window edge the driver hands it the requests routed to each of
its supernodes for the next window and the prefix blocks fetched into their EMS; the group
advances every engine to the window's end and answers each one's load. Engines never talk to each
other: everything between supernodes passes through the driver at window edges.
"""
from __future__ import annotations

import math
import time

import numpy as np

from twin.engine import Engine, report
from twin.engine.scenario import load_scenario
from twin.engine.source import Batch, concat


class RoutedSource:
    """The arrivals the router sent one supernode, pushed window by window (the source interface
    `twin.engine.source.Staged` reads). Nothing beyond the last pushed window is known, so the
    engine stages no further (`horizon`)."""

    def __init__(self, block_size: int):
        self.block_size = block_size
        self._pending: Batch | None = None
        self._pos = 0
        self._until = 0.0
        self.pushed = 0

    @property
    def exhausted(self) -> bool:
        return self._pending is None or self._pos >= len(self._pending)

    def horizon(self) -> float:
        return self._until

    def mean_rate(self) -> float:
        return self.pushed / self._until if self._until > 0 else 0.0

    def next_arrival(self) -> float:
        return math.inf if self.exhausted else float(self._pending.arrival[self._pos])

    def take(self, t_end: float) -> Batch | None:
        if self.exhausted:
            return None
        j = int(self._pending.arrival.searchsorted(t_end, "left"))
        if j <= self._pos:
            return None
        out, self._pos = self._pending.slice(self._pos, j), j
        return out

    def push(self, batch: Batch | None, until: float) -> bool:
        """Add the next window's arrivals (all at or after the previous window's end)."""
        self._until = until
        if batch is None or not len(batch):
            return False
        rest = self._pending.slice(self._pos, len(self._pending)) if not self.exhausted else None
        self._pending, self._pos = concat([rest, batch]), 0
        self.pushed += len(batch)
        return True

    def set_rate(self, now: float, rate: float) -> None:
        raise ValueError("rate: a region's supernode takes the arrivals its router sends (set the region's load)")


def member_engine(scenario: str, deployment: str, seed: int, duration_s: float) -> Engine:
    """A supernode's engine, built as `python -m twin run --scenario S --deployment D` builds one,
    with the router's arrivals in place of its own source."""
    eng = Engine(load_scenario(scenario, seed=seed, deployment=deployment, duration_s=duration_s))
    eng.source = eng.incoming.source = RoutedSource(eng.source.block_size)
    return eng


class Group:
    """Some of a region's supernodes, advanced together window by window."""

    def __init__(self, members: dict[int, tuple[str, str, int, float]]):
        """`members`: supernode index -> (scenario, deployment, seed, duration_s)."""
        self.engines = {i: member_engine(*m) for i, m in sorted(members.items())}
        self.failed: dict[int, float] = {}
        self.cpu_s = 0.0
        self.busy_s = 0.0

    def info(self) -> dict[int, dict]:
        out = {}
        for i, e in self.engines.items():
            out[i] = {"capacity_rps": e.capacity_rps(), "block_bytes": e.scenario.block_size * e.kv_bytes,
                      "npus": sum(x.npus for x in e.instances), "system": e.dep.system,
                      "deployment": e.scenario.deployment}
        return out

    def _load(self, i: int) -> float:
        e = self.engines[i]
        return float(e.req.in_flight + e.source.pushed - e.req.arrived)   # in flight, and on their way

    def window(self, until: float, pushes: dict, stores: dict) -> tuple[dict[int, float], float]:
        """Give each supernode its arrivals (index -> Batch fields) and fetched blocks (index ->
        block ids), advance all to `until`; returns each live supernode's load at `until` and the
        wall seconds this took (the driver's exchange cost is its own wait less this)."""
        c0, w0 = time.process_time(), time.perf_counter()
        for i, e in self.engines.items():
            if i in self.failed:
                continue
            if i in stores and e.ems is not None:
                e.ems.store(stores[i])
            if e.source.push(Batch(*pushes[i]) if i in pushes else None, until):
                e.restart_arrivals()
            e.advance(max(0.0, until - e.sim_time))
        self.cpu_s += time.process_time() - c0
        busy = time.perf_counter() - w0
        self.busy_s += busy
        return {i: self._load(i) for i in self.engines if i not in self.failed}, busy

    def ping(self) -> None:
        """Nothing: the driver times calls to it (the exchange's fixed cost)."""

    def fail(self, i: int) -> dict:
        """Supernode `i` is lost at its current time: it never advances again, and the requests it
        held (admitted and in flight, or on their way) go back to the router to serve elsewhere,
        from scratch (their KV is lost with the supernode)."""
        e = self.engines[i]
        e.take_ticks(e.sim_time)                  # admit what arrived in the last tick before the edge
        self.failed[i] = e.sim_time
        ids = e.req.in_flight_ids()
        blocks = [e.req.blocks(int(r)) for r in ids]
        ptr = np.concatenate([[0], np.cumsum([len(b) for b in blocks])]).astype(np.int64)
        return {"arrival": e.req.arrival[ids], "input": e.req.input[ids], "output": e.req.output[ids],
                "ptr": ptr, "ids": np.concatenate(blocks).astype(np.int64) if blocks else np.zeros(0, np.int64)}

    def finish(self, drain_cap: float | None) -> dict[int, dict]:
        """Drain the live supernodes (if asked) and report each: its summary, its latency sketches
        (merged by the driver into regional percentiles), its status. Arrivals of the tick at the
        end, which the engine would take next, are admitted first: the router counted them."""
        c0 = time.process_time()
        out = {}
        for i, e in self.engines.items():
            if i not in self.failed:
                e.take_ticks(e.sim_time)     # the last tick before the end: its arrivals were routed here
                if drain_cap is not None:
                    e.drain(drain_cap)
            lat = e.metrics.run_latency(e.req, report.interval_context(e))
            out[i] = {"summary": e.summary(), "ttft": lat["ttft"], "tpot": lat["tpot"],
                      "failed_at": self.failed.get(i), "output_tokens": e.metrics.running_totals()["output_tokens"]}
        self.cpu_s += time.process_time() - c0
        for v in out.values():
            v["group_cpu_s"] = round(self.cpu_s, 3)
        return out
