"""Scenarios: which deployment serves which workload, as typed, validated configs. The fields a
user sets per run (duration, rate, load, speed-up, seed) take their bounds from twin.model.settings.

Named scenarios live in twin/catalog/scenarios.toml; any field can be overridden from the CLI or
the dashboard, and every override is validated with a message naming the field and its range.
"""
from __future__ import annotations

import math
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from twin.model.config import CATALOG_DIR, CatalogError, _validate, catalog
from twin.model.settings import SETTINGS
from twin.workload import FORMATS, LengthDist
from twin.engine.deadlines import DEFAULT_DEADLINE_S
from twin.engine.requests import MAX_WINDOW_ROWS
from twin.engine.scheduling import DEFAULTS, make


MAX_CACHE_BYTES = 1e18    # 1 EB; 'unlimited' is the way to ask for no limit


class Length(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    kind: Literal["fixed", "uniform", "lognormal"] = "fixed"
    value: int = Field(4096, ge=1, le=1_000_000)
    lo: int = Field(1, ge=1, le=1_000_000)
    hi: int = Field(8192, ge=1, le=1_000_000)
    mean: float = Field(4096, gt=0, le=1_000_000)
    sigma: float = Field(0.5, gt=0, le=5)
    max: int | None = Field(None, ge=1, le=1_000_000)

    def dist(self) -> LengthDist:
        if self.kind == "fixed":
            return LengthDist.fixed(self.value)
        if self.kind == "uniform":
            return LengthDist.uniform(self.lo, self.hi)
        return LengthDist.lognormal(self.mean, self.sigma, self.max)

    def mean_value(self) -> float:
        return {"fixed": self.value, "uniform": (self.lo + self.hi) / 2}.get(self.kind, self.mean)


PolicySpec = str | dict      # a registered name, or a table of its name and parameters


class Scheduling(BaseModel):
    """The scheduling policy of each decision, by registered name, or by a table of its name and
    parameters ({name = "chunked-fifo", chunk_tokens = 4096}; twin.engine.scheduling)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    prefill_batching: PolicySpec = DEFAULTS["prefill_batching"]
    placement: PolicySpec = DEFAULTS["placement"]
    decode_admission: PolicySpec = DEFAULTS["decode_admission"]
    kv_placement: PolicySpec = DEFAULTS["kv_placement"]

    def model_post_init(self, _context) -> None:
        for kind, spec in self:
            make(kind, spec)          # raises ValueError naming an unknown name, parameter or a value's range


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    name: str = "custom"
    description: str = ""
    deployment: str = "cloudmatrix-infer-paper"
    workload: Literal["trace", "synthetic"] = "synthetic"
    pipeline: Literal["full", "decode_only"] = "full"
    seed: int = SETTINGS["seed"].field(0)
    # trace replay
    trace: str = ""
    trace_format: Literal[("auto",) + FORMATS] = "auto"
    lenient: bool = False
    speedup: float = SETTINGS["speedup"].field(1.0)
    loop: bool = False
    # synthetic
    rate: float | None = SETTINGS["rate"].field(None)
    load: float = SETTINGS["load"].field(0.5)
    arrival: Literal["poisson", "gamma"] = "poisson"
    cv: float = Field(1.0, gt=0, le=20)
    diurnal_amplitude: float = Field(0.0, ge=0, le=1)
    diurnal_period_s: float = Field(86400, gt=0, le=365 * 86400)
    # where in its period the diurnal day starts (s): models sharing a supernode peak at different hours
    diurnal_offset_s: float = Field(0.0, ge=0, le=365 * 86400)
    input: Length = Length(kind="fixed", value=4096)
    output: Length = Length(kind="fixed", value=256)
    reuse_rate: float = Field(0.0, ge=0, lt=1)
    prefix_pool: int = Field(100, ge=1, le=10_000_000)
    block_size: int = Field(512, ge=16, le=65536)
    # run
    duration_s: float = SETTINGS["duration_s"].field(600)
    interval_s: float = Field(1.0, ge=0.05, le=3600)
    # admission limit: arrivals while this many requests are in flight are refused as overloaded
    # (a serving frontend's queue limit; assumption), so an overloaded twin sheds load, not memory
    max_in_flight: int = Field(100_000, ge=1, le=MAX_WINDOW_ROWS)
    # client deadline (twin.engine.deadlines): a request still waiting for prefill this long after
    # it arrived times out; the default is the OpenAI Python client's default timeout (cited there)
    deadline_s: float = SETTINGS["deadline_s"].field(DEFAULT_DEADLINE_S)
    cache_capacity: Annotated[float, Field(ge=1, le=MAX_CACHE_BYTES)] | Literal["default", "unlimited"] = "default"
    faults: str = ""     # path of a fault scenario file (TOML), replayed with the seed
    scheduling: Scheduling = Scheduling()


def _cache_capacity(value):
    """'default', 'unlimited' or a finite number of bytes 1..MAX_CACHE_BYTES (a numeric string too)."""
    if value in ("default", "unlimited"):
        return value
    try:
        x = float(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None
    except ValueError:
        x = None
    if x is None or not (math.isfinite(x) and 1 <= x <= MAX_CACHE_BYTES):
        raise CatalogError(f"cache_capacity = {value!r}: allowed a number of bytes 1 to {MAX_CACHE_BYTES:g}, "
                           f"'default' (the deployment's EMS DRAM) or 'unlimited' (no capacity limit)")
    return x


@lru_cache(maxsize=1)
def _named() -> dict[str, dict]:
    return tomllib.loads((CATALOG_DIR / "scenarios.toml").read_text())


def list_scenarios() -> list[dict]:
    return [{"name": k, "description": v.get("description", "")} for k, v in _named().items()]


def synthetic_scenarios() -> list[str]:
    """Scenarios whose workload is generated (a sweep can vary its rate and lengths)."""
    return [k for k, v in _named().items() if v.get("workload") == "synthetic"]


def load_scenario(scenario: str | None = "default", **overrides) -> Scenario:
    """A named scenario (or a blank one) with overrides; None values mean "keep"."""
    base: dict = {}
    if scenario is not None and not isinstance(scenario, str):
        raise CatalogError(f"scenario = {scenario!r}: allowed a scenario name ({', '.join(_named())})")
    if scenario:
        if scenario not in _named():
            raise CatalogError(f"scenario = {scenario!r}: unknown (allowed: {', '.join(_named())})")
        base = dict(_named()[scenario], name=scenario)
    base.update({k: v for k, v in overrides.items() if v is not None})
    if "cache_capacity" in base:
        base["cache_capacity"] = _cache_capacity(base["cache_capacity"])
    sc = _validate(Scenario, base, f"scenario [{base.get('name', 'custom')}]")
    catalog().deployment(sc.deployment)   # unknown deployment -> clear error
    if sc.workload == "trace" and not sc.trace:
        raise CatalogError(f"scenario [{sc.name}].trace: required for workload = 'trace' "
                           f"(a trace name or a file path)")
    if sc.faults and not Path(sc.faults).is_file():
        raise CatalogError(f"scenario [{sc.name}].faults = {sc.faults!r}: no such file")
    return sc
