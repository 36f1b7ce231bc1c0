"""Cost of ownership per chip-hour on one basis for every system (twin/catalog/tco.toml): capex
amortised over the service life, plus power at one boundary (accelerator, host share, network share)
times PUE times the electricity price, plus operations and maintenance (a share of capex a year).
Rental prices are a second, labelled basis. Sensitivities say which inputs decide a comparison:
life 3 and 5 years, capex -25% / +25%, electricity x0.5 / x2, operations 2% / 10% of capex a year.
"""
from __future__ import annotations

import re
import tomllib
from functools import lru_cache
from pathlib import Path

PATH = Path(__file__).parent.parent / "catalog" / "tco.toml"
HOURS_PER_YEAR = 8760
FIELDS = ("capex_usd_per_chip", "it_kw_per_chip", "network_kw_per_chip", "rental_usd_per_chip_hour")


@lru_cache(maxsize=1)
def _raw() -> tuple[dict, dict]:
    text = PATH.read_text()
    data, sources, section = tomllib.loads(text), {}, None
    for line in text.splitlines():
        m = re.match(r"^\[([^\]]+)\]", line)
        section = m.group(1) if m else section
        m = re.match(r"^(\w+)\s*=[^#]*#\s*(.+)$", line)
        if m and section:
            sources[(section, m.group(1))] = m.group(2).strip()
    return data, sources


def per_chip_hour(system: str, life_years: float | None = None, capex_scale: float = 1.0,
                  usd_per_kwh: float | None = None, ops_fraction: float | None = None) -> dict:
    """TCO per chip-hour with its parts (each input with its source) for `system`."""
    data, src = _raw()
    if system not in data or system == "common":
        allowed = ", ".join(k for k in data if k != "common")
        raise ValueError(f"system = {system!r}: no TCO inputs in tco.toml (allowed: {allowed})")
    c, s = data["common"], data[system]
    missing = [f for f in FIELDS if f not in s]
    if missing:
        raise ValueError(f"tco.toml [{system}]: missing {', '.join(missing)}")
    life = life_years or c["life_years"]
    price = usd_per_kwh if usd_per_kwh is not None else c["usd_per_kwh"]
    kw = (s["it_kw_per_chip"] + s["network_kw_per_chip"]) * c["pue"]
    ops_share = c["ops_fraction_per_year"] if ops_fraction is None else ops_fraction
    capex = s["capex_usd_per_chip"] * capex_scale / (life * HOURS_PER_YEAR)
    energy = kw * price
    ops = s["capex_usd_per_chip"] * capex_scale * ops_share / HOURS_PER_YEAR
    return {"tco_usd_per_chip_hour": round(capex + energy + ops, 4),
            "parts": {"capex_usd_per_chip_hour": round(capex, 4), "energy_usd_per_chip_hour": round(energy, 4),
                      "operations_usd_per_chip_hour": round(ops, 4), "ops_fraction_per_year": ops_share,
                      "capex_usd_per_chip": s["capex_usd_per_chip"], "life_years": life,
                      "it_kw_per_chip": s["it_kw_per_chip"], "network_kw_per_chip": s["network_kw_per_chip"],
                      "pue": c["pue"], "boundary_kw_per_chip": round(kw, 4), "usd_per_kwh": price},
            "sources": {f: src.get((system, f), "") for f in FIELDS}
            | {f: src.get(("common", f), "") for f in ("life_years", "usd_per_kwh", "pue", "ops_fraction_per_year")},
            "rental_usd_per_chip_hour": s["rental_usd_per_chip_hour"]}


def sensitivities(system: str) -> dict[str, float]:
    """TCO per chip-hour when one input moves (the others at their catalog values)."""
    f = lambda **kw: per_chip_hour(system, **kw)["tco_usd_per_chip_hour"]
    return {"life_3y": f(life_years=3), "life_5y": f(life_years=5),
            "capex_minus_25pct": f(capex_scale=0.75), "capex_plus_25pct": f(capex_scale=1.25),
            "electricity_half": f(usd_per_kwh=_raw()[0]["common"]["usd_per_kwh"] / 2),
            "electricity_double": f(usd_per_kwh=_raw()[0]["common"]["usd_per_kwh"] * 2),
            "operations_2pct": f(ops_fraction=0.02), "operations_10pct": f(ops_fraction=0.10)}
