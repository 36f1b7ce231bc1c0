"""The engine's clock: SimPy's Environment, and the one place that touches SimPy's private API.

The engine schedules most of its events itself, without building a Timeout per event, which is
where its speed comes from; that needs SimPy's queue (`_queue`), event ids (`_eid`) and the
processed-event protocol (`callbacks`, `_ok`, `_value`). Those are not public, so they live here,
behind a few names (`Clock.call_later`, `Clock.push`, `Clock.processed`, and `Clock.step`, SimPy's
own step setting a plain `now`), and a test pins the SimPy versions this adapter was checked against (`SIMPY_VERSIONS`).
"""
from __future__ import annotations

from heapq import heappop, heappush

import simpy
from simpy.core import EmptySchedule, StopSimulation
from simpy.events import NORMAL, EventPriority

SIMPY_VERSIONS = ("4.1.1", "4.1.2")     # the releases whose private API this module was read against


class _Call:
    """A scheduled callback as SimPy's step() processes it (its `callbacks`, then `_ok`): what
    an Event holds for that, without the rest of an Event; `_value` is the callback's payload."""
    __slots__ = ("callbacks", "_ok", "_value")

    def __init__(self, callback, value):
        self.callbacks, self._ok, self._value = [callback], True, value


class Clock(simpy.Environment):
    """A SimPy environment with the engine's cheap scheduling and an event count (for `bench`).

    `now` is a plain attribute that `step` sets with `_now`: SimPy's `now` is a property, a Python
    call on each of the several reads an event makes (about four per event in the diurnal run)."""

    now = 0.0           # shadows SimPy's property; the instance's own value is set by __init__ and step

    def __init__(self) -> None:
        super().__init__()
        self.now = self._now
        # SimPy binds timeout/event/process... to the instance once (bind_early), but only those
        # in the instance's own class: a subclass would build a bound method on every access
        for name, obj in vars(simpy.Environment).items():
            if type(obj) is simpy.core.BoundClass:
                setattr(self, name, getattr(self, name))

    def step(self) -> None:
        """SimPy's Environment.step (4.1.x), with `now` set alongside `_now`."""
        try:
            at, _, _, event = heappop(self._queue)
        except IndexError:
            raise EmptySchedule from None
        self._now = self.now = at
        callbacks, event.callbacks = event.callbacks, None
        try:
            for callback in callbacks:
                callback(event)
        except StopSimulation:
            event.callbacks = callbacks[callbacks.index(callback) + 1:]
            self.schedule(event, EventPriority(-1))
            raise
        if not event._ok and not hasattr(event, "_defused"):
            exc = type(event._value)(*event._value.args)
            exc.__cause__ = event._value
            raise exc

    def call_later(self, delay: float, callback, value=None) -> None:
        """`callback(event)` `delay` seconds from now, `event._value` being `value`: what
        `env.timeout(delay, value).callbacks.append` schedules (the same time, priority and order),
        without building a Timeout (nor a closure per call: the payload rides in the event)."""
        heappush(self._queue, (self._now + delay, NORMAL, next(self._eid), _Call(callback, value)))

    def push(self, at: float, callback) -> None:
        """`callback(event)` at exactly `at` (>= now), pushed as simpy.Timeout pushes itself."""
        heappush(self._queue, (at, NORMAL, next(self._eid), _Call(callback, None)))

    def succeed_after(self, ev: simpy.Event, delay: float) -> None:
        """ev.succeed() `delay` seconds from now as one scheduled event (what simpy.Timeout does)."""
        ev._ok, ev._value = True, None
        self.schedule(ev, delay=delay)

    @property
    def processed(self) -> int:
        """Every scheduled event takes the next id from `_eid` (SimPy's and the engine's own
        pushes alike); those not yet processed are still queued. (Counting in an overridden
        step() cost a Python call per event.)"""
        return int(repr(self._eid)[6:-1]) - len(self._queue)
