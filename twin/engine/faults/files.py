"""Fault scenario files (TOML): a scenario, a seed, a duration, a [policy], [[fault]] tables and a
random-failure setting, read bounded and checked as far as possible without a topology."""
from __future__ import annotations

import itertools
import math
import tomllib
from pathlib import Path

from twin.model.config import CATALOG_DIR, CatalogError
from twin.workload import brief, read_regular_file
from twin.engine.faults.kinds import COMMON, KINDS, fault_keys
from twin.engine.faults.spec import Policy, check_random

MAX_FAULT_FILE_BYTES = 1 << 20   # input bounds (assumptions): a hand-written scenario is a few KB
MAX_FILE_FAULTS = 1000           # scheduled faults one file may hold
_FILE_KEYS = {"scenario", "seed", "duration_s", "policy", "fault", "random", "description"}


def load_fault_file(path: str | Path) -> dict:
    """A fault scenario file: scenario, seed, duration_s, [policy], [[fault]] (clear errors).

    Read bounded (a regular file of at most MAX_FAULT_FILE_BYTES); the file must schedule at least
    one fault or a random-failure process, and a fault must land before the file's duration_s.
    Whether a target exists is checked when the engine injects it (it needs the topology)."""
    p = Path(path)
    if not p.exists():
        named = CATALOG_DIR / "faults" / f"{path}.toml"
        if "/" not in str(path) and named.is_file():
            p = named
        else:
            demos = ", ".join(sorted(x.stem for x in (CATALOG_DIR / "faults").glob("*.toml")))
            raise CatalogError(f"faults = {str(path)!r}: no such file (demos: {demos})")
    raw = read_regular_file(p, MAX_FAULT_FILE_BYTES, "fault file", CatalogError)
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{p.name}: not UTF-8 text (byte {exc.start}); a fault file is TOML") from None
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{p.name}: not valid TOML ({exc})") from None
    except RecursionError:
        raise CatalogError(f"{p.name}: TOML nested too deeply") from None
    extra = set(data) - _FILE_KEYS
    if extra:
        raise CatalogError(f"{p.name}: unknown key(s) {', '.join(sorted(extra))} "
                           f"(allowed: {', '.join(sorted(_FILE_KEYS))})")
    _check_file_header(p.name, data)
    faults = data.get("fault", [])
    if not isinstance(faults, list) or not all(isinstance(x, dict) for x in faults):
        raise CatalogError(f"{p.name}: [[fault]] must be a list of tables")
    if len(faults) > MAX_FILE_FAULTS:
        raise CatalogError(f"{p.name}: {len(faults)} faults: allowed at most {MAX_FILE_FAULTS:,} per file")
    for i, x in enumerate(faults, 1):
        _check_file_fault(f"{p.name}: fault {i}", x, data.get("duration_s"))
    policy = data.get("policy", {})
    if not isinstance(policy, dict):
        raise CatalogError(f"{p.name}: policy = {policy!r}: must be a table of policy fields")
    try:
        Policy.load(**policy)
        if "random" in data:
            data["random"] = check_random(data["random"])
    except CatalogError as exc:
        raise CatalogError(f"{p.name}: {exc}") from None
    if not faults and not data.get("random", {}).get("hours_per_sim_s"):
        raise CatalogError(f"{p.name}: no faults (add a [[fault]] table with kind, target and at_s, "
                           f"or random = {{hours_per_sim_s = <number>}})")
    return {"path": str(p), **data}


def _check_file_header(name: str, data: dict) -> None:
    """Types of the top-level keys (their ranges are the scenario's, checked when it loads)."""
    for key, ok, allowed in (("scenario", lambda v: isinstance(v, str) and v.strip(), "a scenario name"),
                             ("description", lambda v: isinstance(v, str), "a string"),
                             ("seed", lambda v: type(v) is int and v >= 0, "an integer >= 0"),
                             ("duration_s", lambda v: type(v) in (int, float) and 0 < v <= 30 * 86400,
                              "a number of seconds > 0 and <= 2,592,000")):
        if key in data and not ok(data[key]):
            raise CatalogError(f"{name}: {key} = {brief(data[key])}: allowed {allowed}")


def _check_file_fault(where: str, x: dict, duration_s) -> None:
    """What a fault table can be checked for without a topology: fields, kind, target, numbers."""
    keys = fault_keys()
    unknown = set(x) - set(keys)
    if unknown:
        raise CatalogError(f"{where}: unknown field(s) {', '.join(sorted(unknown))} "
                           f"(allowed: {', '.join(keys)})")
    if "at_s" not in x:
        raise CatalogError(f"{where}: at_s missing (seconds from the start)")
    at = x["at_s"]
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not 0 <= at < math.inf:
        raise CatalogError(f"{where}: at_s = {brief(at)}: allowed a number >= 0 (finite)")
    if type(duration_s) in (int, float) and at >= duration_s:
        raise CatalogError(f"{where}: at_s = {at:g} is not before the end of the run (duration_s = "
                           f"{duration_s:g}); allowed 0 <= at_s < duration_s")
    if not isinstance(x.get("kind"), str) or x["kind"] not in KINDS:
        raise CatalogError(f"{where}: kind = {brief(x.get('kind'))}: allowed {', '.join(KINDS)}")
    if not isinstance(x.get("target"), str) or not x["target"].strip():
        raise CatalogError(f"{where}: target = {brief(x.get('target'))}: required, a part name "
                           f"such as {KINDS[x['kind']].example!r}")
    for key in ("duration_s", *keys[len(COMMON):]):     # every kind's own numbers too
        v = x.get(key, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise CatalogError(f"{where}: {key} = {brief(v)}: allowed a finite number")
    own = KINDS[x["kind"]].keys()
    if set(x) - set(own):
        raise CatalogError(f"{where}: kind {x['kind']} has no field(s) {', '.join(sorted(set(x) - set(own)))} "
                           f"(allowed: {', '.join(own)})")


def describe(path: Path, spec: dict) -> str:
    """What a fault file is about: its `description`, else the comment lines it opens with."""
    head = itertools.takewhile(lambda ln: ln.startswith("#"), path.read_text().splitlines())
    return spec.get("description") or " ".join(ln.lstrip("# ").strip() for ln in head)
