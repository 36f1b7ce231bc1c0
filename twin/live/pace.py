"""The pace a lecturer's warm-ups really ran at on this server, so the timeline shows measured times.

A hold (twin.live.actions) notes the wall clock when it is armed (the timeline's Go); when it pauses
the shared twin, the runner records here the simulated seconds it waited for and the wall seconds
that took, per scenario and deployment: the engine build, the swap and the advance at whatever pace
the machine managed (issue 36: "about 12 s" at 20x took 32-43 s because the twin reached 2-17x).
Sandboxes are not recorded (their CPU share is capped, so their pace says nothing about the shared
twin's). In memory, per process, bounded by the catalog's scenarios and deployments (and MAX_KEPT).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

MAX_KEPT = 256                # (scenario, deployment) pairs kept; the catalog has far fewer


@dataclass(frozen=True)
class Pace:
    sim_s: float              # simulated seconds the hold waited for
    wall_s: float             # wall seconds from Go to the pause
    speed: float | str        # the speed asked for (times real time, or "max")

    @property
    def reached(self) -> float:
        """Simulated seconds per wall second, over the whole warm-up."""
        return self.sim_s / max(self.wall_s, 1e-6)

    def wall_for(self, sim_s: float, speed: float) -> float:
        """Wall seconds `sim_s` simulated seconds asked at `speed` take at this pace (no faster than
        `speed`; a pace measured at a lower speed than asked is a lower bound of the machine's)."""
        return sim_s / max(min(self.reached, speed), 1e-6)


_lock = threading.Lock()
_paces: dict[tuple[str, str], Pace] = {}


def record(scenario: str, deployment: str | None, pace: Pace) -> None:
    with _lock:
        _paces.pop((scenario, deployment or ""), None)
        _paces[(scenario, deployment or "")] = pace
        while len(_paces) > MAX_KEPT:
            _paces.pop(next(iter(_paces)))


def measured(scenario: str, deployment: str | None) -> Pace | None:
    """The last warm-up measured on a run of this scenario and deployment ("" or None: its own)."""
    with _lock:
        return _paces.get((scenario, deployment or ""))
