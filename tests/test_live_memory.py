"""A live twin gives memory back while it runs: the shared twin's thread hands the process's free
heap pages to the OS every HEAP_TRIM_S (grown tables leave their old copies' pages behind)."""
from __future__ import annotations

import threading

from twin.live import runner

from test_callbacks import wait_until


def test_the_shared_twin_trims_the_heap_every_interval_and_a_sandbox_does_not(monkeypatch):
    calls: list[str] = []        # the threads that trimmed (a twin another test left running may trim too)
    monkeypatch.setattr(runner, "HEAP_TRIM_S", 0.0)
    monkeypatch.setattr(runner, "trim_heap", lambda: calls.append(threading.current_thread().name))
    sandbox = runner.Twin("sb-trim", params={"scenario": "paper-decode"}).start()
    try:
        assert wait_until(lambda: sandbox.snapshot.sim_time > 0.5, timeout=90)     # a loaded machine
        assert "twin-sb-trim" not in calls                   # a sandbox's thread never trims while it runs
    finally:
        sandbox.stop()
    shared = runner.Twin("t-trim", shared=True, params={"scenario": "paper-decode"}).start()
    try:
        assert wait_until(lambda: calls.count("twin-t-trim") >= 3, timeout=90)     # each loop past the interval: one trim
    finally:
        shared.stop()
