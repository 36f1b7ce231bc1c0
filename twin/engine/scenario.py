"""Scenarios: which deployment serves which workload, as typed, validated configs.

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

from ..config import CATALOG_DIR, CatalogError, _validate, catalog
from ..workload import LengthDist
from .scheduling import DEFAULTS, REGISTRY


# Input bounds (assumptions): far above the largest catalog deployment (~3,000 req/s at 4K/256), and
# small enough that a 30 s synthetic chunk at the peak of a diurnal cycle (6M requests) stays under
# workload.MAX_SYNTHETIC_REQUESTS.
MAX_RATE = 100_000
LOAD_MAX = 5.0    # input bound (assumption): arrivals at most 5x what the deployment sustains
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


class Scheduling(BaseModel):
    """The scheduling policy of each decision, by registered name (twin.engine.scheduling)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    prefill_batching: str = DEFAULTS["prefill_batching"]
    placement: str = DEFAULTS["placement"]
    decode_admission: str = DEFAULTS["decode_admission"]
    kv_placement: str = DEFAULTS["kv_placement"]

    def model_post_init(self, _context) -> None:
        for kind, name in self:
            if name not in REGISTRY[kind]:
                raise ValueError(f"scheduling.{kind} = {name!r}: unknown (allowed: {', '.join(REGISTRY[kind])})")


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    name: str = "custom"
    description: str = ""
    deployment: str = "cloudmatrix-infer-paper"
    workload: Literal["trace", "synthetic"] = "synthetic"
    pipeline: Literal["full", "decode_only"] = "full"
    seed: int = Field(0, ge=0, le=2**63 - 1)
    # trace replay
    trace: str = ""
    trace_format: Literal["auto", "mooncake", "azure", "burstgpt"] = "auto"
    lenient: bool = False
    speedup: float = Field(1.0, ge=0.001, le=10_000)   # input bound: 1000x slow motion to 10,000x
    loop: bool = False
    # synthetic
    rate: float | None = Field(None, gt=0, le=MAX_RATE)
    load: float = Field(0.5, gt=0, le=LOAD_MAX)
    arrival: Literal["poisson", "gamma"] = "poisson"
    cv: float = Field(1.0, gt=0, le=20)
    diurnal_amplitude: float = Field(0.0, ge=0, le=1)
    diurnal_period_s: float = Field(86400, gt=0, le=365 * 86400)
    input: Length = Length(kind="fixed", value=4096)
    output: Length = Length(kind="fixed", value=256)
    reuse_rate: float = Field(0.0, ge=0, lt=1)
    prefix_pool: int = Field(100, ge=1, le=10_000_000)
    block_size: int = Field(512, ge=16, le=65536)
    # run
    duration_s: float = Field(600, gt=0, le=30 * 86400)
    interval_s: float = Field(1.0, ge=0.05, le=3600)
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
