"""A live twin for served requests: one thread advances the engine at real time in small steps,
and each request's token events reach its stream on the asyncio loop at the twin's times.

Time: sim time s is wall time `wall0 + s` (1x real time). The thread advances the engine to the
wall clock every STEP_S, so a request arriving at wall w is injected at sim time w - wall0, which
is never behind the engine (it lags the wall clock), and a token the twin makes at sim time s is
known at most one step (plus that step's compute) after wall0 + s. Each event is therefore sent at
wall0 + s + DELAY_S, a fixed delay that covers that lag: gaps between tokens are the twin's
exactly, and a first token is DELAY_S late (docs/serve.md). The engine thread never waits for the
HTTP side; the loop side never touches the engine (only the inbox queue and published snapshots).
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from ..engine import Engine
from ..engine.commands import Command, Ticket
from ..engine.external import External
from .metrics import engine_gauges

log = logging.getLogger("twin.serve")

STEP_S = 0.002       # wall seconds between advances (assumption: well under a decode step of ~20-90 ms)
DELAY_S = 0.010      # events are sent this long after their sim time (covers one step + its compute)
SNAPSHOT_S = 0.5     # the engine's snapshot is published this often (for /metrics)


@dataclass(eq=False)
class Stream:
    """One served request: what the twin was asked, and its events as they are sent."""
    input_tokens: int
    output_tokens: int
    blocks: object
    arrival: float = 0.0                 # sim time of arrival
    admitted: float | None = None
    times: list = field(default_factory=list)    # sim time of each chunk
    counts: list = field(default_factory=list)   # tokens made by then (cumulative)
    end: str = ""                        # "stop" or a rejection reason once over
    prefill: tuple = ()                  # (prefill start, prefill end, cached prompt tokens) once done
    finish_reason: str = "length"        # "length" when max_tokens set the output, else "stop"
    _ready: asyncio.Event = field(default_factory=asyncio.Event)
    _sent: int = 0                       # chunks handed to the reader

    def push(self, t: float, made: int, end: str, extra=None) -> int:
        """An event of the twin's; returns the tokens it adds."""
        delta = 0
        if end == "times":
            self.prefill = extra
            return 0
        if end == "admitted":
            self.admitted = t
        else:
            delta = made - (self.counts[-1] if self.counts else 0)
            if delta > 0:
                self.times.append(t)
                self.counts.append(made)
            if end:
                self.end = end
        self._ready.set()
        return max(delta, 0)

    async def decision(self) -> str:
        """"admitted", or the rejection reason."""
        while self.admitted is None and not self.end:
            self._ready.clear()
            await self._ready.wait()
        return "admitted" if self.admitted is not None else self.end

    async def chunks(self):
        """(tokens in this chunk, first token index) per chunk as the twin makes them, until done."""
        while True:
            while self._sent < len(self.counts):
                i = self._sent
                self._sent += 1
                prev = self.counts[i - 1] if i else 0
                yield self.counts[i] - prev, prev
            if self.end:
                return
            self._ready.clear()
            await self._ready.wait()

    @property
    def ttft(self) -> float | None:
        return self.times[0] - self.arrival if self.times else None

    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.times, self.times[1:])]


class LiveTwin:
    """An engine of `scenario` (outside requests only, unless `background`) driven at real time."""

    def __init__(self, scenario: str = "default", seed: int | None = None, background: bool = False,
                 step_s: float = STEP_S, delay_s: float = DELAY_S, **overrides):
        self.engine = Engine(scenario, seed=seed, **overrides)
        self.ext = External.attach(self.engine, background)
        self.step_s, self.delay_s = step_s, delay_s
        self.snapshot = self.engine.snapshot()
        self.gauges = engine_gauges(self.engine, self.snapshot)   # read by /metrics (published whole)
        self.model = self.engine.scenario.deployment
        self.on_event = None          # callable(stream, t, tokens added, end) on the loop (metrics)
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.wall0 = 0.0
        self.pace = deque(maxlen=250)   # (wall, sim) samples: the achieved pace over the last ~0.5-5 s
        self.late = 0                   # events known only after their send time (the engine fell behind)

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> "LiveTwin":
        self.loop = loop
        self.wall0 = loop.time() - self.engine.sim_time
        self._thread = threading.Thread(target=self._run, name="twin-serve", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)

    # ---- from the loop -----------------------------------------------------------------------
    def submit(self, stream: Stream) -> None:
        """The request arrives now (its sim time is the wall clock's)."""
        stream.arrival = self.loop.time() - self.wall0
        self._inbox.put(stream)

    def command(self, cmd: Command) -> Ticket:
        """A typed engine command (a fault, a policy), on the engine's one queue for its next advance."""
        return self.engine.submit(cmd)

    def achieved(self) -> float:
        """Sim seconds per wall second over the recent samples (1.0: real time)."""
        if len(self.pace) < 2:
            return 1.0
        (w0, s0), (w1, s1) = self.pace[0], self.pace[-1]
        return (s1 - s0) / (w1 - w0) if w1 > w0 else 1.0

    def _deliver(self, events: list) -> None:
        at, now = self.loop.call_at, self.loop.time()
        for stream, t, made, end, *extra in events:
            when = self.wall0 + t + self.delay_s
            if when < now:
                self.late += 1
            at(when, self._emit, stream, t, made, end, *extra)

    def _emit(self, stream, t, made, end, extra=None) -> None:
        delta = stream.push(t, made, end, extra)
        if self.on_event is not None and end != "times":
            self.on_event(stream, t, delta, end)

    # ---- the engine thread -------------------------------------------------------------------
    def _run(self) -> None:
        eng, ext, clock = self.engine, self.ext, self.loop.time
        last_snap = 0.0
        while not self._stop.is_set():
            t0 = clock()
            target = t0 - self.wall0
            try:
                while True:
                    try:
                        msg = self._inbox.get_nowait()
                    except queue.Empty:
                        break
                    ext.inject(msg.arrival, msg.input_tokens, msg.output_tokens, msg.blocks, msg)
                if target > eng.sim_time:
                    eng.advance(target - eng.sim_time)
                if ext.events:
                    events, ext.events = ext.events, []
                    self.loop.call_soon_threadsafe(self._deliver, events)
                if t0 - last_snap >= SNAPSHOT_S:
                    self.snapshot, last_snap = eng.snapshot(), t0
                    self.gauges = engine_gauges(eng, self.snapshot)
            except Exception:            # the thread never dies: say so and carry on
                log.exception("twin serve: engine step failed")
            self.pace.append((t0, eng.sim_time))
            rest = self.step_s - (clock() - t0)
            if rest > 0:
                self._stop.wait(rest)
