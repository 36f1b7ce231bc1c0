"""The run settings a user can change, each declared once: name, CLI flag, bounds, unit, help and
presets. Everything that takes one of them is generated from these declarations: the `Scenario`
model's field constraints (`Setting.field`), the flags of `python -m twin run` and `bench`
(`twin.cli.args.add_setting`), the live session's checks (`Setting.check`, used by the typed engine
commands and `twin.live.controls`) and the dashboard's control bar (`twin.ui.components.controls_bar`:
placeholders, titles, preset buttons). Consumers look a setting up in `SETTINGS` when they use it,
so one change here (or a test's monkeypatch) moves every place at once.

Every bound is an input limit (an assumption, far beyond any catalog deployment), not a model
constant; the generated CLI reference (docs/hooks/cli_reference.py, `make docs`) lists them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pydantic import Field


def fmt_number(v: float, integer: bool = False) -> str:
    """A bound as people write it: 100,000 / 5 / 0.001."""
    return f"{int(v):,}" if integer or (float(v).is_integer() and abs(v) < 1e16) else f"{v:g}"


@dataclass(frozen=True)
class Setting:
    """A number a user can set: `lo` (<, or <= unless `lo_open`) value (<, or <= unless `hi_open`) `hi`."""
    name: str                        # the Scenario field / session parameter, named in every message
    help: str
    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False
    unit: str = ""                   # shown after the bound: "s", "req/s"
    note: str = ""                   # said after the range in the live session's messages
    flag: str | None = None          # the CLI flag of `run` / `bench`; None: dashboard only
    presets: tuple = ()              # the control bar's buttons

    def contains(self, x: float) -> bool:
        return (math.isfinite(x) and (x > self.lo if self.lo_open else x >= self.lo)
                and (x < self.hi if self.hi_open else x <= self.hi))

    def between(self, word: str) -> str:
        """`0 < word <= 5`."""
        lo, hi = fmt_number(self.lo, self.integer), fmt_number(self.hi, self.integer)
        return f"{lo} {'<' if self.lo_open else '<='} {word} {'<' if self.hi_open else '<='} {hi}"

    def range_text(self) -> str:
        """`0 < load <= 5 (fraction of capacity; 1 = 100 %)`, the form the live session's messages use."""
        return (self.between(self.name) + (f" {self.unit}" if self.unit else "")
                + (f" {self.note}" if self.note else ""))

    def field(self, default: Any = None) -> Any:
        """A pydantic Field with these bounds (the Scenario model's declaration)."""
        return Field(default, **{("gt" if self.lo_open else "ge"): self.lo,
                                 ("lt" if self.hi_open else "le"): self.hi})

    def check(self, value) -> float:
        """`value` as a float in range, else ValueError "name = value: allowed <range>"."""
        if isinstance(value, bool):
            raise ValueError(f"{self.name} = {value!r}: allowed {self.range_text()}")
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{self.name} = {str(value)[:40]!r}: allowed {self.range_text()}") from None
        if not self.contains(x):
            raise ValueError(f"{self.name} = {value!r}: allowed {self.range_text()}")
        return x


# Input bounds (assumptions). Rate: far above the largest catalog deployment (~3,000 req/s at
# 4K/256), and small enough that a 30 s synthetic chunk at the peak of a diurnal cycle (6M requests)
# stays under workload.MAX_SYNTHETIC_REQUESTS. Load: arrivals at most 5x what the deployment sustains.
MAX_RATE = 100_000
LOAD_MAX = 5.0
SEED_MAX = 2**63 - 1
LIVE_SEED_MAX = 2**31 - 1    # the dashboard's seeds: a browser number holds integers exactly only to 2^53


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("duration_s", "simulated seconds", 0, 30 * 86400, lo_open=True, unit="s", flag="--duration"),
    Setting("rate", "arrival rate in req/s, synthetic scenarios", 0, MAX_RATE, lo_open=True, unit="req/s",
            flag="--rate"),
    Setting("load", "arrival rate as a fraction of capacity, synthetic scenarios", 0, LOAD_MAX, lo_open=True,
            note="(fraction of capacity; 1 = 100 %)", flag="--load",
            presets=(25, 50, 75, 90, 100, 120, 150)),     # presets in % of capacity
    Setting("speedup", "trace replay speed-up, 1000x slow motion to 10,000x", 0.001, 10_000,
            flag="--speedup"),
    Setting("deadline_s", "client deadline: a request still waiting for prefill this long after it arrived "
            "times out", 1, 86_400, unit="s", flag="--deadline"),
    Setting("seed", "random seed: every random draw of a run follows from it", 0, SEED_MAX, integer=True,
            flag="--seed"),
    Setting("live_seed", "random seed of a reset from the dashboard", 0, LIVE_SEED_MAX, integer=True),
    Setting("speed", "simulated seconds per wall second (times real time), or 'max'", 1.0, 1000.0,
            presets=(1, 5, 20, 100, 1000, "max")),
)}


def get(name: str) -> Setting:
    """The setting as declared now (looked up at use, so one change moves every consumer)."""
    return SETTINGS[name]
