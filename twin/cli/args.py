"""Checked command-line values and strict JSON output.

Every flag refuses a bad value at parse time with one line naming the flag and the allowed range
(argparse turns ArgumentTypeError into "argument --flag: ..." and exit status 2), so no NaN, inf,
negative or absurd size ever reaches a model, and every JSON document printed is strict JSON.
"""
from __future__ import annotations

import argparse
import json
import math
import os

from twin.model.settings import Setting, fmt_number, get
from twin.workload import brief


def number(lo: float, hi: float, lo_open: bool = False, hi_open: bool = False,
           integer: bool = False, unit: str = ""):
    """An argparse `type` accepting a finite number (or integer) in the range, else saying which."""
    return setting_type(Setting("value", "", lo, hi, lo_open, hi_open, integer, unit))


def setting_type(s: Setting):
    """An argparse `type` for a declared setting (twin.model.settings): its bounds, its unit."""
    kind = "an integer" if s.integer else "a number"
    allowed = (f"{kind} {'>' if s.lo_open else '>='} {fmt_number(s.lo, s.integer)} and "
               f"{'<' if s.hi_open else '<='} {fmt_number(s.hi, s.integer)}"
               f"{' ' + s.unit if s.unit else ''}")

    def parse(text: str):
        try:
            value = int(text) if s.integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{brief(text, 200)}: not {kind} (allowed: {allowed})") from None
        if not s.contains(value):
            raise argparse.ArgumentTypeError(f"{brief(text, 200)}: allowed {allowed}")
        return value
    parse.__name__ = kind     # argparse names the type in some messages
    parse.setting = s         # the bounds, for the generated CLI reference (docs/hooks/cli_reference.py)
    return parse


def add_setting(parser, name: str, also: str = "", **kw):
    """The flag of a declared setting (twin.model.settings.SETTINGS[name]): its name, type and help (plus
    `also`, what this command does with it)."""
    s = get(name)
    return parser.add_argument(s.flag, type=setting_type(s), **kw,
                               help=f"{s.help} ({s.between('value')}{'; ' + also if also else ''})")


def name(what: str):
    """An argparse `type` for a non-empty name or path (an empty string would silently mean "none")."""
    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"empty: allowed {what}")
        return text
    return parse


OUT_EXTENSIONS = (".parquet", ".csv")


def out_path(text: str) -> str:
    """--out: a .parquet or .csv file in an existing, writable folder (checked before the run, so a
    typo does not cost a whole simulation; the folder is not created, so a typo cannot scatter files)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty: allowed a file path ending in .parquet or .csv")
    if os.path.splitext(text)[1] not in OUT_EXTENSIONS:
        raise argparse.ArgumentTypeError(f"{brief(text, 200)}: allowed a file path ending in .parquet or .csv")
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"{brief(text, 200)}: folder {brief(folder, 200)} does not exist "
                                         f"(create it first)")
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"{brief(text, 200)}: folder {brief(folder, 200)} is not writable")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{brief(text, 200)}: is a folder; allowed a file path")
    return text


def dumps(obj) -> str:
    """Strict JSON (RFC 8259): a NaN or infinity anywhere is a bug to report, never `NaN` in the output."""
    try:
        return json.dumps(obj, indent=2, allow_nan=False, default=_plain)
    except ValueError:
        raise ValueError(f"output: a value is not finite at {_non_finite(obj) or '?'} "
                         f"(the result has no finite answer for these inputs)") from None


def _plain(x):
    """numpy scalars and the like as plain numbers."""
    return x.item() if hasattr(x, "item") else float(x)


def _non_finite(obj, path: str = "") -> str | None:
    if isinstance(obj, float) and not math.isfinite(obj):
        return path or "top level"
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for k, v in items:
        found = _non_finite(_plain(v) if hasattr(v, "item") else v, f"{path}.{k}" if path else str(k))
        if found:
            return found
    return None


def drain_cap(text: str | None) -> float | str | None:
    """--drain's cap in simulated seconds (None: no drain; "default": the engine's DRAIN_CAP_S)."""
    if text in (None, "default"):
        return text
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 86400:
        raise ValueError(f"--drain = {text!r}: allowed a number of simulated seconds, 0 < cap <= 86400")
    return value



def table(cols: tuple[tuple[str, int], ...], rows) -> None:
    """Print a table two spaces in, its header the columns' titles: a column of width w > 0 is
    right-aligned, of width -w left-aligned (cells are printed as given: format them first)."""
    def line(cells):
        return "  " + "".join(f"{c!s:<{-w}}" if w < 0 else f"{c!s:>{w}}" for c, (_, w) in zip(cells, cols))
    print(line([t for t, _ in cols]))
    for r in rows:
        print(line(r))
