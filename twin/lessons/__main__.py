"""`python -m twin.lessons check [--quick] [--lesson ID]` | `measure [--quick]` | `probe NAME` (JSON) |
`plan-check PLAN... | --all [--json] [--short S]`: see twin/cli/lesson_check.py, lesson_measure.py,
plan_check.py and probes.py. A command, on the command line's floor (twin/floors.py) like every `__main__`."""
from __future__ import annotations

import argparse
import json
import sys

from twin.lessons import LessonError
from twin.cli.lesson_check import main as check
from twin.cli.lesson_measure import main as measure
from twin.cli.plan_check import main as plan_check
from twin.lessons.probes import PROBES


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m twin.lessons", description="lesson measurements")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="drive every step on a live twin and compare its page with the answer")
    c.add_argument("--quick", action="store_true", help="skip the steps marked slow")
    c.add_argument("--lesson", help="only this lesson (an id)")
    m = sub.add_parser("measure", help="re-run every lesson's commands and compare the figures")
    m.add_argument("--quick", action="store_true", help="skip full engine runs")
    p = sub.add_parser("probe", help="print one probe's measurement as JSON")
    p.add_argument("name", choices=sorted(PROBES))
    pc = sub.add_parser("plan-check", help="run class plans headless as a lecturer would (Go, hold, questions, reveal)")
    pc.add_argument("plan", nargs="*", help="plan ids (default: every plan)")
    pc.add_argument("--all", action="store_true", help="every plan (the default when none is named)")
    pc.add_argument("--json", action="store_true", help="print the report as JSON")
    pc.add_argument("--short", type=float, metavar="S", help="cap each hold at S simulated seconds: the command "
                    "path only, figures not judged")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "probe":
            print(json.dumps(PROBES[a.name](), indent=2))
            return 0
        if a.cmd == "plan-check":
            if a.short is not None and not 0 < a.short <= 3600:
                raise LessonError(f"--short = {a.short:g}: allowed 0 < S <= 3600 simulated seconds")
            return plan_check([] if a.all else a.plan, a.json, a.short)
        if a.cmd == "check":
            return check(a.quick, a.lesson)
        return measure(a.quick)
    except LessonError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
