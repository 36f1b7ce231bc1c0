"""`python -m twin.lessons measure [--quick]` | `probe NAME` (JSON): see measure.py and probes.py."""
from __future__ import annotations

import argparse
import json
import sys

from . import LessonError
from .measure import main as measure
from .probes import PROBES


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m twin.lessons", description="lesson measurements")
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="re-run every lesson's commands and compare the figures")
    m.add_argument("--quick", action="store_true", help="skip full engine runs")
    p = sub.add_parser("probe", help="print one probe's measurement as JSON")
    p.add_argument("name", choices=sorted(PROBES))
    a = ap.parse_args(argv)
    try:
        if a.cmd == "probe":
            print(json.dumps(PROBES[a.name](), indent=2))
            return 0
        return measure(a.quick)
    except LessonError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
