"""Re-run the commands behind every lesson answer and compare with the figures written in the lessons.

`python -m twin.lessons measure [--quick]` runs each step's commands in this process (the same
argument parsing as the shell command), reads each figure's path in the printed JSON and prints one
line per figure: written value, measured value, relative difference. Exit status 1 if any differs
by more than the tolerance. `--quick` skips the full engine runs (`slow = true`).
"""
from __future__ import annotations

import contextlib
import io
import json
import shlex

from twin.cli.main import main as twin_main

from twin.lessons import Figure, LessonError, lessons
from twin.lessons.probes import PROBES

TOLERANCE = 0.03              # relative; perf figures are exact, engine runs are seeded


def run_command(command: str) -> dict:
    """The JSON a lesson command prints (run in-process; the command's text is the interface)."""
    argv = shlex.split(command)
    buf = io.StringIO()
    if argv[:3] == ["python", "-m", "twin"]:
        with contextlib.redirect_stdout(buf):
            status = twin_main(argv[3:])
        if status:
            raise LessonError(f"{command}: exit status {status}")
        return json.loads(buf.getvalue())
    if argv[:4] == ["python", "-m", "twin.lessons", "probe"] and len(argv) == 5 and argv[4] in PROBES:
        return PROBES[argv[4]]()
    raise LessonError(f"{command}: not a command the lessons can run")


def read_path(doc, path: str):
    """`a.b.0.c` or a list filter `predictions[deployment=x,phase=decode].field` into a JSON doc."""
    cur = doc
    for part in path.split("."):
        key, _, filt = part.partition("[")
        if key:
            cur = cur[int(key)] if isinstance(cur, list) else cur[key]
        if filt:
            conds = dict(c.split("=", 1) for c in filt.rstrip("]").split(","))
            hits = [x for x in cur if all(str(x.get(k)) == v for k, v in conds.items())]
            if len(hits) != 1:
                raise LessonError(f"{path}: {len(hits)} rows match [{filt}")
            cur = hits[0]
    return cur


def check(quick: bool = False) -> list[tuple[str, Figure, float]]:
    """(where, figure, measured value) for every figure of every lesson (slow runs skipped if quick)."""
    out, cache = [], {}
    for les in lessons():
        for i, step in enumerate(les.steps, 1):
            for m in step.measures:
                if quick and m.slow:
                    continue
                if m.command not in cache:
                    cache[m.command] = run_command(m.command)
                for f in m.figures:
                    out.append((f"{les.id} step {i}", f, float(read_path(cache[m.command], f.path))))
    return out


def off(f: Figure, measured: float) -> float:
    return abs(measured - f.value) / max(abs(f.value), 1e-9)


def main(quick: bool = False) -> int:
    bad = 0
    for where, f, v in check(quick):
        d = off(f, v)
        bad += d > TOLERANCE
        print(f"{where:<24}{f.name:<14}{f.value:>14g}{v:>14g}{d * 100:>8.2f}%{'  DIFFERS' if d > TOLERANCE else ''}")
    return 1 if bad else 0
