"""Soak test of the live twin: memory growth, Failures-page update cost, and the lifecycle audit.

    python -m twin.cli.soak --minutes 30
    python -m twin.cli.soak --minutes 5 --fault-gap-s 8 --json

Runs the shared twin (twin.live.session) at full speed with random failures on, while `--pollers`
threads poll the Failures page's update callback once a second each, as open browser tabs do
(each with its own cursor, so an unchanged snapshot costs a `no_update`). After `--warmup-s` of
wall time it samples the process RSS every 5 s and prints the growth per minute (least-squares
slope), the p95 time and JSON size of the Failures updates, and those of a fresh viewer's full
update. At the end it stops random failures, pauses the twin, drains it (arrivals stopped, at most
the engine's drain cap) and prints the conservation audit. A benchmark, not a test: it prints figures.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import threading
import time

import numpy as np
import psutil
from plotly.utils import PlotlyJSONEncoder

from twin.live import session
from twin.engine.faults import RANDOM_MAX

from twin.ui import faulttable

SAMPLE_S = 5.0


def _rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def _size(obj) -> int:
    return len(json.dumps(obj, cls=PlotlyJSONEncoder))


class Poller(threading.Thread):
    """One viewer on the Failures page: its update callback once per `period` seconds."""

    def __init__(self, tick, period: float, stop: threading.Event, record: threading.Event):
        super().__init__(daemon=True)
        self.tick, self.period, self.stop_ev, self.record = tick, period, stop, record
        self.times: list[float] = []
        self.sizes: list[int] = []
        self.errors = 0

    def run(self) -> None:
        cursor, n = None, 0
        while not self.stop_ev.wait(self.period):
            n += 1
            t0 = time.perf_counter()
            try:
                out = self.tick(n, "shared", cursor, view_name="supernode")
            except Exception:       # counted and reported: a failing update is a finding
                self.errors += 1
                continue
            dt = time.perf_counter() - t0
            cursor = out["cursor"] if isinstance(out["cursor"], dict) else cursor
            if self.record.is_set():
                self.times.append(dt)
                self.sizes.append(_size(out))


def _slope_mb_per_min(samples: list[tuple[float, float]]) -> float | None:
    if len(samples) < 3:
        return None
    t, m = np.array(samples).T
    return float(np.polyfit(t / 60.0, m, 1)[0])


def soak(minutes: float, warmup_s: float, fault_gap_s: float, pollers: int, period: float,
         log=print) -> dict:
    import app  # noqa: F401  (the Dash app registers the pages; a CLI imports it only when it runs)
    fl = importlib.import_module("pages.failures")
    reg = session.configure(token=None)
    tw = reg.shared()
    system = tw.snapshot.system.topology
    hours = RANDOM_MAX if fault_gap_s is None else faulttable.mean_gap_s(system, 1.0) / fault_gap_s
    if hours > RANDOM_MAX:
        raise ValueError(f"--fault-gap-s = {fault_gap_s:g}: the twin allows at most {RANDOM_MAX:g} failure-clock "
                         f"hours per sim second, a mean gap of {faulttable.mean_gap_s(system, RANDOM_MAX):.2f} sim s or more")
    tw.control("speed", "max", who="soak")
    tw.control("random", {"hours_per_sim_s": hours}, who="soak")
    stop, record = threading.Event(), threading.Event()
    threads = [Poller(fl.tick, period, stop, record) for _ in range(pollers)]
    for th in threads:
        th.start()
    t0 = time.monotonic()
    end = t0 + warmup_s + minutes * 60
    samples: list[tuple[float, float]] = []
    last_print = 0.0
    while time.monotonic() < end:
        time.sleep(SAMPLE_S)
        el = time.monotonic() - t0
        if el >= warmup_s:
            record.set()
            samples.append((el - warmup_s, _rss_mb()))
        if el - last_print >= 60:
            last_print = el
            snap = tw.snapshot
            log(f"  {el / 60:5.1f} min wall  sim {snap.sim_time:8.0f} s  RSS {_rss_mb():7.1f} MB  "
                f"faults {tw._engine.faults.injected}  kept {len(snap.faults)}")
    stop.set()
    for th in threads:
        th.join(5)
    t_full0 = time.perf_counter()
    full = fl.tick(1, "shared", None, view_name="supernode")          # a fresh viewer's first update
    full_ms = (time.perf_counter() - t_full0) * 1e3
    tw.control("random", {"hours_per_sim_s": 0}, who="soak")
    time.sleep(1.0)                                         # the twin applies it at its next advance
    tw.control("pause", who="soak")
    time.sleep(1.0)
    eng = tw._engine
    snap = tw.snapshot
    before = eng.audit()
    drained = eng.drain()
    audit = eng.audit()
    reg.shutdown()
    times = np.array([x for th in threads for x in th.times]) * 1e3
    sizes = np.array([x for th in threads for x in th.sizes])
    slope = _slope_mb_per_min(samples)
    return {
        "minutes": minutes, "warmup_s": warmup_s, "pollers": pollers, "poll_period_s": period,
        "random_hours_per_sim_s": round(hours, 3),
        "mean_fault_gap_sim_s": round(faulttable.mean_gap_s(system, hours), 2),
        "sim_seconds": round(eng.sim_time, 1), "achieved_speed": round(snap.sim_time / (time.monotonic() - t0), 1),
        "faults_injected": eng.faults.injected, "fault_records_kept": len(eng.faults.faults),
        "fault_totals_kinds": len(eng.faults.totals),
        "rss_start_mb": round(samples[0][1], 1) if samples else None,
        "rss_end_mb": round(samples[-1][1], 1) if samples else None,
        "rss_growth_mb_per_min": None if slope is None else round(slope, 3),
        "rss_per_minute_mb": [round(m, 1) for t, m in samples if abs(t / 60 - round(t / 60)) < SAMPLE_S / 120],
        "failures_updates": int(len(times)), "failures_update_errors": sum(th.errors for th in threads),
        "failures_update_p95_ms": round(float(np.percentile(times, 95)), 2) if len(times) else None,
        "failures_update_p95_kb": round(float(np.percentile(sizes, 95)) / 1e3, 2) if len(sizes) else None,
        "failures_full_update_ms": round(full_ms, 2), "failures_full_update_kb": round(_size(full) / 1e3, 2),
        "request_rows_in_memory": len(eng.req.arrival),
        "audit_at_stop": before, "drain": drained, "audit": audit,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m twin.cli.soak", description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="measured wall minutes (default 30)")
    ap.add_argument("--warmup-s", type=float, default=120.0, help="wall seconds before measuring (default 120)")
    ap.add_argument("--fault-gap-s", type=float, default=None,
                    help="mean simulated seconds between random failures (default: the largest rate the "
                         "twin allows, RANDOM_MAX failure-clock hours per sim second)")
    ap.add_argument("--pollers", type=int, default=3, help="viewer threads on the Failures page (default 3)")
    ap.add_argument("--period", type=float, default=1.0, help="seconds between a viewer's polls (default 1)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    for name, v, lo, hi in (("--minutes", a.minutes, 0.1, 1440), ("--warmup-s", a.warmup_s, 0, 3600),
                            ("--fault-gap-s", 1.0 if a.fault_gap_s is None else a.fault_gap_s, 0.01, 3600),
                            ("--pollers", a.pollers, 1, 32),
                            ("--period", a.period, 0.05, 60)):
        if not lo <= v <= hi:
            ap.exit(2, f"error: {name} = {v}: allowed {lo:g} to {hi:g}\n")
    try:
        out = soak(a.minutes, a.warmup_s, a.fault_gap_s, a.pollers, a.period,
                   log=(lambda *_: None) if a.json else print)
    except ValueError as exc:
        ap.exit(2, f"error: {exc}\n")
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k:<28}{v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
