"""Real time for an engine, in one place for both real-time runners: the live twin's thread
(twin.live.runner) and the served twin's engine process (twin.serve.engine_proc).

`Clock` holds the pace: how many simulated seconds are due at a wake (the real-time factor, the lead,
the catch-up after a stall, the chunk at speed "max"), how long to rest after a wake, and the pace
really achieved. `run` is the loop both run: wake, work, rest, until told to stop; a failing wake is
reported and never ends the loop. `Dispatch` is a table from a message's type to its handler.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

log = logging.getLogger("twin.live.realtime")

MAX_CHUNK_S = 3600.0     # sim s one advance at speed "max" may ask for (assumption: a bound, never reached in practice)
MIN_CHUNK_S = 0.05       # and at least this much (assumption: keeps an idle engine's chunks from shrinking to nothing)


@dataclass
class Clock:
    """Where the engine's sim time should be at a wall time (time.monotonic).

    The wall clock's sim time runs at `speed` from an anchor (a wall time and the sim time it stood
    for); the engine is due `lead_s` ahead of it. With `catch_up_s` set, a wake makes up at most that
    many wall seconds after a stall and lets the rest go (the live twin: no burst after a slow step);
    without it every due second is made up (the served twin: each chunk has a fixed wall time,
    `wall0 + s`). An unanchored clock (at start, after a pause) anchors one step back, so the first
    wake advances one step. At speed "max" a wake advances a chunk sized to take one step of compute.
    """
    step_s: float                      # wall s between wakes
    speed: float | str = 1.0           # sim s per wall s, or "max"
    lead_s: float = 0.0                # sim s the engine runs ahead of the wall clock
    catch_up_s: float | None = None    # most wall s one wake makes up (None: all)
    idle_step_s: float | None = None   # wall s between wakes with nothing to do (None: step_s)
    min_rest_s: float = 0.0            # the loop always rests at least this long
    max_duty: float = 1.0              # and works at most this share of wall time
    window: int = 25                   # wakes the achieved pace is measured over
    chunk_s: float = 1.0               # sim s per wake at speed "max" (adapted by `ran`)
    anchor: tuple[float, float] | None = None              # (wall time, sim time of the wall clock then)
    samples: deque = field(default=None, repr=False)       # (wall time, sim time) at recent wakes

    def __post_init__(self):
        if self.samples is None:
            self.samples = deque(maxlen=self.window)

    def start(self, now: float, sim_time: float) -> None:
        """Anchor here: the engine at `sim_time` is `lead_s` ahead of the wall clock at `now`."""
        self.anchor = (now, sim_time - self.lead_s)

    def hold(self) -> None:
        """Not advancing at this wake (paused, or out of its CPU share): the next wake starts afresh."""
        self.anchor = None

    def reset(self) -> None:
        """Start afresh and forget the measured pace (a pause, a new speed, a new engine)."""
        self.anchor = None
        self.samples.clear()

    @property
    def wall0(self) -> float:
        """The wall time of sim time 0 (at speed 1: sim time s is due at wall0 + s)."""
        wall, sim = self.anchor
        return wall - sim

    def behind(self, now: float, sim_time: float) -> float:
        """Sim s the engine at `sim_time` is behind the wall clock at `now` (negative: ahead)."""
        return self._lag(now, sim_time, self.speed)

    def _lag(self, now: float, sim_time: float, speed: float) -> float:
        wall, sim = self.anchor
        return sim + (now - wall) * speed - sim_time

    def per_step(self) -> float:
        """Sim seconds one step advances at this speed (the chunk at "max")."""
        speed = self.speed
        return self.chunk_s if speed == "max" else speed * self.step_s

    def due(self, now: float, sim_time: float) -> float:
        """Sim seconds to advance at this wake."""
        speed = self.speed                # once: another thread may set it meanwhile
        if speed == "max":
            return self.chunk_s
        if self.anchor is None:
            self.start(now - self.step_s, sim_time)
        lag = self._lag(now, sim_time, speed)
        if self.catch_up_s is not None and lag > self.catch_up_s * speed:
            self.start(now - self.catch_up_s, sim_time)       # the rest of the stall is let go
            lag = self._lag(now, sim_time, speed)
        return max(lag + self.lead_s, 0.0)

    def ran(self, sim_s: float, compute_s: float) -> None:
        """An advance of `sim_s` took `compute_s` of compute: at speed "max" the next chunk is sized
        to take about one step."""
        if self.speed == "max":
            rate = sim_s / max(compute_s, 1e-4)
            self.chunk_s = min(max(0.2 * self.chunk_s + 0.8 * rate * self.step_s, MIN_CHUNK_S), MAX_CHUNK_S)

    def rest(self, busy_s: float, idle: bool = False) -> float:
        """Wall seconds to rest after a wake that worked `busy_s`: the rest of the step (of the idle
        step with nothing to do), never under the floor (min_rest_s, and the share max_duty leaves)."""
        floor = max(self.min_rest_s, busy_s * (1 - self.max_duty) / self.max_duty)
        if self.speed == "max":
            return floor
        step = self.idle_step_s if idle and self.idle_step_s is not None else self.step_s
        return max(floor, step - busy_s)

    def note(self, now: float, sim_time: float) -> None:
        """The engine stood at `sim_time` at this wake (for `achieved`)."""
        self.samples.append((now, sim_time))

    def achieved(self, default: float = 0.0) -> float:
        """Sim seconds per wall second over the recent wakes (`default` before two)."""
        if len(self.samples) < 2:
            return default
        (w0, s0), (w1, s1) = self.samples[0], self.samples[-1]
        return (s1 - s0) / (w1 - w0) if w1 > w0 else default


def run(wake: Callable[[float], bool], rest: Callable[[float], bool], failed: Callable[[Exception], None]) -> None:
    """The real-time loop: `wake(t0)` does a wake's work (False: stop), `rest(t0)` rests until the
    next wake (False: stop). An exception from a wake goes to `failed` and the loop carries on: the
    engine's runner never dies from a bad message or a failing step."""
    while True:
        t0 = time.monotonic()
        try:
            if not wake(t0):
                return
        except Exception as exc:
            failed(exc)
        if not rest(t0):
            return


class Dispatch:
    """A table from a message's type to its handler: `dispatch(owner, msg, *context)` calls
    `handler(owner, msg, *context)` (handlers are the owner's methods). A message of no listed type
    is logged, naming it and the types allowed, and dropped: it never stops the messages after it."""

    def __init__(self, handlers: dict[type, Callable]):
        self.handlers = handlers

    def __call__(self, owner, msg, *context):
        handler = self.handlers.get(type(msg))
        if handler is None:
            log.error("message %s: unknown (allowed: %s)", type(msg).__name__,
                      ", ".join(t.__name__ for t in self.handlers))
            return None
        return handler(owner, msg, *context)
