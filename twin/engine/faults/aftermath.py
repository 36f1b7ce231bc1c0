"""What a fault leaves behind once its part serves again: when users got their service back, and the
incident's KPI series kept past the rolling history.

"Part serving again" (a report's `served_s` / `recover_s`) is not "service back": a decode instance
restarted after a node loss serves again within a minute, while its backlog keeps every request
late for many more (paper-decode, node loss on n21: about 1,100 simulated seconds at SLO attainment
near 0). Service is back when SLO attainment is within MARGIN of its minute before the fault and
stays there for HOLD_S. The "after" phase runs from the part serving again to service back (at least
as long as "before"), its means summed here as the intervals close, so they stay exact when the
rolling history (900 intervals) has dropped its start. The series (SERIES, what the Failures page
charts) from a minute before the fault to TAIL_S after service back are kept, so the incident's
charts can be drawn pinned to its window after the live charts scrolled past it.
"""
from __future__ import annotations

import math

import numpy as np

MARGIN = 0.05     # service back: SLO attainment within 5 points of the minute before (assumption: the
#                   paper-decode run's healthy minutes stay within 1 point of 100 %, so 5 is no noise)
HOLD_S = 30.0     # ... and staying there this long (assumption: half a minute, so one lucky interval in
#                   a draining backlog is not "back")
TAIL_S = 60.0     # the kept series run this long past service back (as long as "before")
MAX_POINTS = 2400  # points kept per series; past this every other one is dropped (memory: 7 x 2,400 float32
#                    = 67 kB a fault; at 1 s intervals 40 minutes before halving)
SERIES = ("t", "tpot_p50_ms", "tpot_p99_ms", "ttft_p50_ms", "goodput_tps", "finished_output_tps",
          "slo_attainment")


def _finite(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


class Aftermath:
    """One fault's watch, fed each closed interval's history row (`add`) from the strike on."""

    def __init__(self, at_s: float, before_s: float, history: dict):
        self.at_s, self.t0 = at_s, at_s - before_s
        self.series = {k: [] for k in SERIES}
        self.stride, self._skip = 1, 0          # keep every `stride`-th row (halved past MAX_POINTS)
        cols = {k: list(history.get(k) or ()) for k in SERIES}
        first = next((i for i, x in enumerate(cols["t"]) if x > self.t0 + 1e-9), len(cols["t"]))
        for i in range(first, len(cols["t"])):      # the minute before, still in the rolling history
            self._keep({k: cols[k][i] for k in SERIES})
        slo = [v for v in map(_finite, cols["slo_attainment"][first:]) if v is not None]
        self.reference = round(sum(slo) / len(slo), 4) if slo else None   # SLO attainment the minute before
        self.served_at: float | None = None     # sim time the part served again
        self.after_from: float | None = None    # sim time "during" ended (the part repaired): "after" starts
        self.back_at: float | None = None       # sim time service came back (None: not yet, or not measurable)
        self.streak: float | None = None        # first interval end of the current run within MARGIN
        self._sums = np.zeros(4)                # goodput sum, intervals, SLO sum, intervals with an SLO value
        self._at_streak = np.zeros(4)           # ... as they were at the streak's start
        self.done = False                       # the series are complete (TAIL_S past service back)

    def _keep(self, row: dict) -> None:
        self._skip += 1
        if self._skip < self.stride:
            return
        self._skip = 0
        for k in SERIES:
            self.series[k].append(row[k])
        if len(self.series["t"]) >= MAX_POINTS:
            self.series = {k: v[::2] for k, v in self.series.items()}
            self.stride *= 2

    def add(self, row: dict, served_s: float | None, recover_s: float | None) -> None:
        """One closed interval (the fault's `served_s` and `recover_s` as they are now): keep its
        series, sum the "after" phase and, once the part serves again, look for service back."""
        if self.done:
            return
        t = float(row["t"])
        self._keep(row)
        served = served_s if served_s is not None else recover_s
        self.served_at = None if served is None else self.at_s + served
        self.after_from = None if recover_s is None else self.at_s + recover_s
        if self.served_at is None or t <= self.served_at + 1e-9:
            return
        slo = _finite(row["slo_attainment"])
        if self.back_at is None:
            if self.after_from is not None and t > self.after_from + 1e-9:
                self._sums += (float(row["goodput_tps"]), 1.0, slo or 0.0, 0.0 if slo is None else 1.0)
            if self.reference is not None and slo is not None:
                if slo >= self.reference - MARGIN - 1e-9:
                    if self.streak is None:
                        self.streak, self._at_streak = t, self._sums.copy()
                else:
                    self.streak = None
            if self.streak is not None and t - self.streak >= HOLD_S - 1e-9:
                self.back_at = self.streak
        if self.back_at is not None and t >= self.back_at + TAIL_S - 1e-9 or \
                self.reference is None and t >= self.served_at + 2 * TAIL_S - 1e-9:
            self.done = True
            self.series = {k: np.array(v, dtype=np.float32 if k != "t" else float) for k, v in self.series.items()}

    def waiting(self) -> bool:
        """Service is not back yet (and can be measured): the "after" phase is still open."""
        return self.back_at is None and self.reference is not None and not self.done

    def after(self) -> dict:
        """Goodput and SLO attainment over the intervals from the part's repair (the end of "during")
        to service back (its interval included), or to now while service is not back."""
        s = self._at_streak if self.back_at is not None else self._sums
        return {"goodput_after": round(float(s[0] / s[1]), 2) if s[1] else None,
                "slo_after": round(float(s[2] / s[3]), 4) if s[3] else None}

    def window(self) -> list[float]:
        """The incident's window: a minute before the fault to TAIL_S past service back (or the last
        kept interval while it is not back)."""
        ts = self.series["t"]
        end = self.back_at + TAIL_S if self.back_at is not None else (float(ts[-1]) if ts else self.at_s)
        return [round(self.t0, 3), round(end, 3)]

    def arrays(self) -> dict:
        """The kept series as float arrays (NaN for a gap), and the window they belong to."""
        return {"window": self.window(), "stride": self.stride,
                **{k: np.asarray(v, dtype=float) for k, v in self.series.items()}}
