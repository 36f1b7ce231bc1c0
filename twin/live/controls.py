"""What viewers may ask of a twin, checked once, at the edge: speed, load, rate, seed and
random-failure settings (the engine's own command rules), faults (the faults component's
`check_shape` on a fresh topology of the twin's system, in `fault_command`), and who is asking
(`client_id`). Every refusal is a
ControlError whose message names the field and what is allowed. The module never imports dash.
"""
from __future__ import annotations

import hashlib
import math
import re
from functools import lru_cache

from twin.live.budget import RateLimit
from twin.model.config import CATALOG_DIR, catalog
from twin.engine import commands
from twin.model.settings import get as setting
from twin.topology import topology

_SECRET = re.compile(r"^[A-Za-z0-9_-]{22,64}$")


class ControlError(ValueError):
    """A rejected control: bad value, locked twin, no free sandbox. The message says what is allowed."""


def client_id(secret, addr) -> str:
    """Who is acting: a hash of the browser's secret if it sent a well-formed one, else its address."""
    if isinstance(secret, str) and _SECRET.match(secret):
        return "s-" + hashlib.sha256(secret.encode()).hexdigest()[:24]
    return "a-" + str(addr or "unknown")[:64]


def _throttled(limit: RateLimit, what: str, *keys: str) -> None:
    wait = limit.wait_s(*keys)
    if wait:
        raise ControlError(f"{what}: at most {limit.n} per minute; try again in {math.ceil(wait)} s")


def _checked(build, *args):
    """A typed engine command, or a ControlError with its validation message."""
    try:
        return build(*args)
    except ValueError as exc:
        raise ControlError(str(exc.args[0] if exc.args else exc)) from None


def parse_speed(value) -> float | str:
    """The speed setting's range (times real time) or "max"; raises ControlError naming it."""
    if isinstance(value, str) and value.strip().lower() in ("max", "fastest", "as fast as possible"):
        return "max"
    s = setting("speed")
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    if not s.contains(v):
        raise ControlError(f"speed = {value!r}: allowed {s.lo:g} to {s.hi:g} (times real time) or 'max'")
    return v


HOLD_MAX_S = 3600.0               # the longest hold: a lesson step's warm-up is at most this (twin.lessons.WARMUP_MAX_S)


def parse_hold(value) -> float:
    """Simulated seconds a hold waits before it pauses: 0 < s <= HOLD_MAX_S; ControlError naming it."""
    try:
        s = float(value)
    except (TypeError, ValueError):
        s = math.nan
    if not 0 < s <= HOLD_MAX_S:
        raise ControlError(f"hold = {str(value)[:16]!r}: allowed 0 < seconds <= {HOLD_MAX_S:g} (simulated)")
    return s


def parse_load(value) -> float:
    """The load setting's range (fraction of capacity): the engine's SetLoad rule."""
    return _checked(commands.SetLoad, value).fraction


def parse_rate(value) -> float:
    """The rate setting's range (req/s): the engine's SetRate rule."""
    return _checked(commands.SetRate, value).rate


def parse_seed(value) -> int:
    """A whole number in the dashboard's seed range (settings `live_seed`)."""
    s = setting("live_seed")
    try:
        f = float(value)
        ok = s.contains(f) and f == int(f)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ControlError(f"seed = {value!r}: allowed a whole number {s.lo:.0f} to {s.hi:.0f}")
    return int(f)


def random_command(value) -> commands.SetRandom:
    """{"hours_per_sim_s": h} (or a bare number h), 0 <= h <= RANDOM_MAX: how fast the failure clock
    runs (twin.engine.faults), as the engine's command."""
    h = value.get("hours_per_sim_s") if isinstance(value, dict) else value
    if isinstance(value, dict) and set(value) - {"hours_per_sim_s"}:
        h = value          # refused below, naming the allowed table
    if isinstance(h, str):
        try:
            h = float(h)
        except ValueError:
            pass
    return _checked(commands.SetRandom, h)


def parse_random(value) -> float:
    """The random-failure rate h of `random_command`."""
    return random_command(value).hours_per_sim_s


@lru_cache(maxsize=8)
def _fresh_topology(system: str):
    return topology(system)          # healthy; only read here (validation never fails parts)


def fault_command(spec, deployment: str | None) -> commands.InjectFault:
    """A fault as the engine's command, its shape checked once with the faults component's own rule
    (`check_shape`) against a fresh topology of the deployment's system, without touching any running
    engine (the engine decides, when it lands, what depends on the moment); ControlError naming what
    is wrong. Empty fields of a form are left out."""
    if not isinstance(spec, dict):
        raise ControlError(f"fault = {str(spec)[:60]!r}: allowed a table {{kind, target, at_s?, duration_s?, "
                           "factor?, period_s?}")
    spec = {k: v for k, v in spec.items() if v is not None and v != ""}
    try:
        system = catalog().deployment(deployment or "cloudmatrix-infer-paper").system
        return commands.InjectFault.checked_on(spec, _fresh_topology(system))
    except (ValueError, KeyError, TypeError) as exc:
        raise ControlError(str(exc.args[0] if exc.args else exc)) from None


def demo_names() -> list[str]:
    """The fault demos a viewer may load (catalog files, by name: never a path from a browser)."""
    return sorted(p.stem for p in (CATALOG_DIR / "faults").glob("*.toml"))
