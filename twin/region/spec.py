"""The `regions` table (twin/catalog/regions.toml): which supernodes a region joins, and its links.

A region is a list of members (one deployment each, so one supernode system each), the scenario
whose workload the region serves, and the inter-supernode link every ordered pair of members
shares for prefix fetches (bandwidth, latency).
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache

from twin.model.config import CATALOG_DIR, CatalogError, catalog

MAX_MEMBERS = 64      # the Atlas 950 SuperCluster's 64 SuperPoDs (next SuperClusters: Huawei Connect 2025 keynote)


@dataclass(frozen=True)
class RegionSpec:
    name: str
    description: str
    scenario: str
    deployments: tuple[str, ...]      # one per supernode, in member order
    link_gbps: float
    link_latency_us: float

    @property
    def size(self) -> int:
        return len(self.deployments)

    def systems(self) -> tuple[str, ...]:
        cat = catalog()
        return tuple(cat.deployment(d).system for d in self.deployments)

    def resized(self, count: int) -> "RegionSpec":
        """The same region with `count` supernodes of its first member's deployment (weak scaling)."""
        _check_count(f"regions [{self.name}]", count)
        return RegionSpec(f"{self.name}x{count}", self.description, self.scenario,
                          (self.deployments[0],) * count, self.link_gbps, self.link_latency_us)


def _check_count(where: str, count) -> int:
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_MEMBERS:
        raise CatalogError(f"{where}: count = {count!r}: allowed an integer 1..{MAX_MEMBERS}")
    return count


def _number(where: str, key: str, value, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo < value <= hi:
        raise CatalogError(f"{where}.{key} = {value!r}: allowed a number in ({lo:g}, {hi:g}]")
    return float(value)


def _parse(name: str, raw: dict) -> RegionSpec:
    where = f"regions.toml [{name}]"
    known = {"description", "scenario", "members", "link_gbps", "link_latency_us"}
    extra = sorted(set(raw) - known)
    if extra:
        raise CatalogError(f"{where}: unknown key {extra[0]!r} (allowed: {', '.join(sorted(known))})")
    members = raw.get("members")
    if not isinstance(members, list) or not members:
        raise CatalogError(f"{where}.members: required, a list of {{deployment, count}} tables")
    cat, deps = catalog(), []
    for k, m in enumerate(members, 1):
        if not isinstance(m, dict) or set(m) - {"deployment", "count"} or "deployment" not in m:
            raise CatalogError(f"{where}.members[{k}] = {m!r}: allowed {{deployment = NAME, count = N}}")
        cat.deployment(m["deployment"])          # unknown deployment -> its own clear error
        deps += [m["deployment"]] * _check_count(f"{where}.members[{k}]", m.get("count", 1))
    if len(deps) > MAX_MEMBERS:
        raise CatalogError(f"{where}: {len(deps)} supernodes; allowed at most {MAX_MEMBERS}")
    from twin.engine.scenario import load_scenario
    scenario = str(raw.get("scenario", "default"))
    if load_scenario(scenario).workload != "synthetic":     # unknown -> the list of allowed ones
        raise CatalogError(f"{where}.scenario = {scenario!r}: replays a trace; allowed a synthetic scenario "
                           f"(the router draws the region's arrivals at its load)")
    return RegionSpec(name, str(raw.get("description", "")), scenario, tuple(deps),
                      _number(where, "link_gbps", raw.get("link_gbps"), 0, 1e6),
                      _number(where, "link_latency_us", raw.get("link_latency_us"), 0, 1e7))


@lru_cache(maxsize=1)
def _raw() -> dict:
    return tomllib.loads((CATALOG_DIR / "regions.toml").read_text())


def names() -> list[str]:
    return list(_raw())


def region(name: str) -> RegionSpec:
    """The named region, checked; an unknown name lists the allowed ones."""
    raw = _raw()
    if name not in raw:
        raise CatalogError(f"region {name!r}: unknown (allowed: {', '.join(raw)})")
    return _parse(name, raw[name])
