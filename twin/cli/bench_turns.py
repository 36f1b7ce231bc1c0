"""Two checkouts of the twin timed in turns: the CPU each takes on the same machine at the same moments.

A shared machine's speed wanders (`bench` prints `machine_ref_ms`), so two benchmark runs minutes
apart cannot resolve a few percent, nor carry a target across machines. Here each checkout runs one
simulation in its own process, advanced a slice at a time, the two taking turns (which goes first
alternates), so both see the same machine. The worker uses only the Engine API every version of the
twin has had (`Engine(name, seed=, duration_s=)`, `advance`, `sim_time`), so an old checkout (a
`git worktree` of any commit) can be the other side; a deployment or load other than the
scenario's is passed as Engine keyword overrides, which the twin has taken since the first pass. The first simulated second of each run is a
warm-up, outside the timing (imports, compiled code loaded), and so is a first snapshot: an engine
whose `advance` returns one (6860226 and before) builds it, with its one-time indexes (the links'
kinds and nodes), inside the warm-up, so one that does not must build it there too.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WARMUP_S = 1.0
WORKER = r"""
import json, sys, time
from twin.engine import Engine
name, duration, step, seed, warmup = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
eng = Engine(name, seed=seed, duration_s=duration, **json.loads(sys.argv[6] if len(sys.argv) > 6 else "{}"))
eng.advance(warmup)
eng.snapshot()      # the first one builds one-time indexes: an older engine built it inside its warm-up advance
print("ready", flush=True)
for line in sys.stdin:
    if eng.sim_time >= duration - 1e-9:
        print("end", flush=True)
        continue
    t = time.process_time()
    snap = eng.advance(min(step, duration - eng.sim_time))
    snap is None and eng.snapshot()      # a live turn publishes one snapshot, in every version
    print(f"{time.process_time() - t:.6f}", flush=True)
"""
HERE = Path(__file__).resolve().parents[2]


def checkout(path: str) -> Path:
    """A folder holding the twin package (twin/engine), or a clear error."""
    p = Path(path).expanduser().resolve()
    if not (p / "twin" / "engine").is_dir():
        raise ValueError(f"--against {path!r}: not a checkout of the twin (no twin/engine in it); "
                         f"give the top folder of one, e.g. a `git worktree add DIR COMMIT`")
    return p


class _Worker:
    def __init__(self, root: Path, args: list[str]):
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, *args], cwd=root, text=True,
                                     env={**os.environ, "PYTHONPATH": str(root)}, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.err)
        self.root = root
        self._expect("ready")

    def _expect(self, want: str | None = None) -> str:
        line = self.proc.stdout.readline().strip()
        if not line or (want and line != want):
            self.proc.kill()
            self.err.seek(0)
            said = self.err.read().strip().splitlines()
            self.close()
            raise ValueError(f"the engine in {self.root} stopped: {said[-1] if said else line or 'no output'}")
        return line

    def slice(self) -> float | None:
        """One slice's CPU seconds (None: the run is over)."""
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        line = self._expect()
        return None if line == "end" else float(line)

    def close(self) -> None:
        if not self.proc.stdin.closed:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.err.close()


def in_turns(other: str, scenario: str, duration: float, slice_s: float = 10.0, seed: int = 0,
             runs: int = 1, **overrides) -> dict:
    """CPU seconds of this checkout and `other` on the same run, in turns; `ratio` < 1: this one
    takes less. `overrides` (deployment, load: those not None) go to both Engines."""
    root = checkout(other)
    if not (duration > WARMUP_S and slice_s > 0):
        raise ValueError(f"in turns: duration {duration} s and slice {slice_s} s: need duration > "
                         f"{WARMUP_S} s (the warm-up) and slice > 0")
    args = [scenario, str(float(duration)), str(float(slice_s)), str(int(seed)), str(WARMUP_S)]
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if overrides:
        args.append(json.dumps(overrides))
    totals, ratios = {"this": 0.0, "other": 0.0}, []
    for run in range(runs):
        workers = {}
        try:
            workers["this"] = _Worker(HERE, args)
            workers["other"] = _Worker(root, args)
            k = 0
            while True:
                order = ("this", "other") if (k + run) % 2 == 0 else ("other", "this")
                got = {name: workers[name].slice() for name in order}
                k += 1
                if got["this"] is None or got["other"] is None:
                    break
                totals["this"] += got["this"]
                totals["other"] += got["other"]
                if got["other"] > 0:
                    ratios.append(got["this"] / got["other"])
        finally:
            for w in workers.values():
                w.close()
    return {"scenario": scenario, **overrides, "sim_seconds": float(duration), "timed_from_s": WARMUP_S, "slice_s": slice_s,
            "runs": runs, "this": str(HERE), "other": str(root),
            "cpu_seconds_this": round(totals["this"], 3), "cpu_seconds_other": round(totals["other"], 3),
            "ratio": round(totals["this"] / totals["other"], 4) if totals["other"] > 0 else None,
            "median_slice_ratio": round(statistics.median(ratios), 4) if ratios else None,
            "slices": len(ratios)}
