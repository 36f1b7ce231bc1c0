"""Engine speed benchmarks: how fast one scenario runs, and how the cost grows with load and size.

Figures are printed, never asserted (the machine may be shared): speed-up over real time (wall
clock, and CPU time of this process, which other load on the machine disturbs less), events per
wall second and per request (the engine's work per request, independent of machine load), the
process's peak resident memory, and `machine_ref_ms` (how fast this machine ran interpreted Python
around the run) to compare figures across machines.
"""
from __future__ import annotations

import resource
import statistics
import time

from twin.engine import Engine

SCALING_LOADS = (0.3, 0.6, 0.9)
# the 48-NPU slice, the paper's deployment, and all 384 NPUs (twin/catalog/deployments.toml)
SCALING_DEPLOYMENTS = ("cloudmatrix-infer-48", "cloudmatrix-infer-paper", "cloudmatrix-infer-384")
SCALING_SCENARIO = "peak-384"      # full pipeline: prefill, EMS, KV transfer, decode; 4K/256


def peak_rss_mb() -> float:
    """Peak resident set of this process so far (Linux reports ru_maxrss in KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


class _Probe:
    __slots__ = ("x", "q")


def _reference() -> float:
    """A fixed piece of interpreted work of the engine's kind: attribute reads, float arithmetic,
    small lists and calls."""
    p = _Probe()
    p.x, p.q = 0.0, []
    for i in range(100_000):
        p.x += i * 0.5
        p.q.append(i)
        if len(p.q) > 8:
            p.q.pop(0)
    return p.x


def machine_ref_ms(repeat: int = 9) -> float:
    """CPU ms of `_reference()`, the median of `repeat`. The engine is single-threaded Python, so
    its speed-up scales with the machine's single-core speed: figures from machines (or moments:
    a shared virtual machine's speed varies) whose reference differs compare by the ratio of
    their references. `bench` measures it before and after the run and reports the mean."""
    times = []
    for _ in range(repeat):
        c0 = time.process_time()
        _reference()
        times.append(time.process_time() - c0)
    return round(statistics.median(times) * 1e3, 2)


def bench(scenario: str, duration: float | None = None, seed: int = 0, **overrides) -> dict:
    """Run a scenario for `duration` simulated seconds (default: the scenario's) and time it."""
    eng = Engine(scenario, seed=seed, duration_s=duration, **overrides)
    sim = eng.scenario.duration_s
    ref = machine_ref_ms()
    t0, c0 = time.perf_counter(), time.process_time()
    eng.run(sim)
    wall = max(time.perf_counter() - t0, 1e-9)
    cpu = max(time.process_time() - c0, 1e-9)
    counts = eng.req.counts()
    s = eng.summary()
    return {"scenario": scenario, "deployment": eng.scenario.deployment,
            "npus": int(sum(i.npus for i in eng.prefill + eng.decode)),
            "load": eng.scenario.load if eng.scenario.workload == "synthetic" and not eng.scenario.rate else None,
            "sim_seconds": sim, "wall_seconds": round(wall, 3), "speedup": round(sim / wall, 1),
            "cpu_seconds": round(cpu, 3), "speedup_cpu": round(sim / cpu, 1),
            "events": eng.env.processed, "events_per_s": round(eng.env.processed / wall, 1),
            "events_per_request": round(eng.env.processed / max(counts["arrived"], 1), 3),
            "requests_arrived": counts["arrived"], "requests_completed": counts["completed"],
            "peak_rss_mb": peak_rss_mb(), "machine_ref_ms": round((ref + machine_ref_ms()) / 2, 2),
            "decode_tokens_per_s_per_npu": s["decode"]["tokens_per_s_per_npu"],
            "tpot_ms_p50": s["tpot_ms"]["p50"]}


def scaling(duration: float = 60.0, seed: int = 0, scenario: str = SCALING_SCENARIO) -> list[dict]:
    """Wall time against load on the paper's deployment, then against deployment size at 0.9."""
    rows = [bench(scenario, duration, seed, deployment="cloudmatrix-infer-paper", load=load)
            for load in SCALING_LOADS]
    rows += [bench(scenario, duration, seed, deployment=dep, load=SCALING_LOADS[-1])
             for dep in SCALING_DEPLOYMENTS if dep != "cloudmatrix-infer-paper"]
    return rows


TABLE = ("deployment", "npus", "load", "sim_seconds", "wall_seconds", "speedup", "speedup_cpu",
         "events_per_request", "requests_completed")


def table(rows: list[dict]) -> str:
    """The scaling rows as a fixed-width text table."""
    width = [max(len(c), 8) + 2 for c in TABLE]
    width[0] = 26
    lines = ["".join(f"{c:>{w}}" for c, w in zip(TABLE, width))]
    for r in rows:
        lines.append("".join(f"{str(r[c]):>{w}}" for c, w in zip(TABLE, width)))
    return "\n".join(lines)
