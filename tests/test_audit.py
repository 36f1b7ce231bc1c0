"""Lifecycle audit: every request ends exactly once, the audit proves it, and it catches an engine
that drops or short-changes a request. Also the rolling window of request rows (bounded memory)."""
from __future__ import annotations

import numpy as np
import pytest

from twin.engine import Engine, command
from twin.engine.faults import Policy
from twin.engine.pools import DecodeInstance
from twin.engine.requests import DECODING, DONE, REJECTED, RequestTable
from twin.engine.metrics import LogHistogram

FAST = dict(detect_s=5.0, reroute_s=1.0, network_repair_s=10.0, hardware_repair_s=10.0,
            expert_reload_s=1.0)


def _table(k: int = 10) -> RequestTable:
    t = RequestTable(capacity=4)
    t.add(np.arange(k, dtype=float), np.full(k, 100), np.full(k, 10))
    return t


# ---- the table ------------------------------------------------------------------------------

def test_each_terminal_transition_happens_once_and_a_second_is_an_error():
    t = _table()
    t.generated[[0, 1, 2]] = 10
    assert list(t.complete([0, 1], 5.0)) == [0, 1]
    assert list(t.complete([1, 2], 6.0)) == [2]           # 1 again: refused, counted
    assert t.finish[1] == 5.0                             # the first finish stands
    assert list(t.reject([3, 2], "kv_too_long")) == [3]   # 2 is done: not rejected
    assert list(t.complete([3, 99, -1], 7.0)) == []       # rejected, unknown, unknown
    a = t.audit()
    assert (a["arrived"], a["completed"], a["rejected"], a["in_flight"]) == (10, 3, 1, 6)
    assert a["rejected_by_reason"] == {"kv_too_long": 1, "overloaded": 0}
    assert a["errors"] == {"finish_twice": 1, "finish_rejected": 1, "finish_timed_out": 0, "finish_unknown": 2,
                           "reject_terminal": 1}
    assert a["conserved"] is False and a["tokens_short"] == 0
    assert t.state[3] == REJECTED and t.reason[3] == 1


def test_a_finish_with_a_repeated_or_bad_id_finishes_the_others_once():
    """complete()'s compiled common case hands anything unusual to the checked path whole (spare
    rows past the last id: an unknown id must not pass for one of them)."""
    t = RequestTable(capacity=64)
    t.add(np.arange(10, dtype=float), np.full(10, 100), np.full(10, 10))
    assert list(t.complete([4, 2, 4], 1.0)) == [2, 4]     # repeated in one call: once, no error
    assert list(t.complete([5, 10], 2.0)) == [5]          # an unknown id: counted
    assert list(t.complete([6, 4], 3.0)) == [6]           # 4 again: counted
    assert (t.completed, t.errors["finish_twice"], t.errors["finish_unknown"]) == (4, 1, 1)
    assert t.finish[4] == 1.0 and t.finish[6] == 3.0 and np.isnan(t.finish[7])

def test_tokens_short_counts_completions_with_fewer_tokens_than_asked():
    t = _table()
    t.generated[[0, 1]] = [10, 9]
    t.complete([0, 1], 1.0)
    assert t.tokens_short == 1 and t.audit()["conserved"] is True


def test_orphans_and_held_terminal_requests_break_conservation():
    t = _table(5)
    t.complete([0], 1.0)
    a = t.audit(held=np.array([1, 2, 3]))                 # 4 is in flight but held by nothing
    assert (a["orphaned"], a["held_terminal"], a["conserved"]) == (1, 0, False)
    a = t.audit(held=np.array([0, 1, 2, 3, 4]))           # 0 is done but still held
    assert (a["orphaned"], a["held_terminal"], a["conserved"]) == (0, 1, False)
    assert t.audit(held=np.array([1, 2, 3, 4]))["conserved"] is True


def test_compaction_keeps_in_flight_ids_valid_and_streams_dropped_rows():
    t = RequestTable(capacity=4)
    got = []
    t.sink = got.append
    ptr = np.arange(0, 21, 2)                            # two blocks per request
    t.add(np.arange(10.0), np.arange(100, 110), np.full(10, 5), ptr, np.arange(20) + 1000)
    t.generated[np.arange(8)] = 5
    t.first_token[np.arange(8)] = 1.0
    t.complete(np.arange(8), 9.0)
    t.state[8] = DECODING
    assert t.compact(keep=2) == 8                         # 0..7 terminal and old: dropped
    assert t.base == 8 and len(t.input) == 2
    assert list(got[0]["id"]) == list(range(8)) and (got[0]["state"] == "done").all()
    assert t.input[8] == 108 and t.state[8] == DECODING and list(t.blocks(9)) == [1018, 1019]
    with pytest.raises(IndexError, match="compacted"):
        t.input[np.array([3])]
    ids = t.add(np.array([20.0]), np.array([7]), np.array([3]), np.array([0, 1]), np.array([5]))
    assert list(ids) == [10]
    assert t.generated[10] == 0 and np.isnan(t.first_token[10]) and list(t.blocks(10)) == [5]
    assert t.compact(keep=2) == 0                         # 8 is in flight: nothing older may go
    assert t.audit()["conserved"] is True and t.counts()["completed"] == 8


def test_log_histogram_quantiles_are_within_the_stated_relative_accuracy():
    rng = np.random.default_rng(0)
    x = rng.lognormal(3, 1.5, 20_000)
    h = LogHistogram(rel=0.005)
    h.add(x[:7000])
    h = h.merged(x[7000:])
    s = np.sort(x)
    for q in (0.0, 0.5, 0.9, 0.99, 1.0):
        exact = s[int(np.floor(q * (len(s) - 1)))]
        assert abs(h.quantile(q) / exact - 1) <= 0.005 + 1e-12
    assert h.n == len(x) and LogHistogram().quantile(0.5) is None


# ---- the engine -----------------------------------------------------------------------------

def _die_fault_then_drain(redundant: bool) -> Engine:
    eng = Engine("paper-decode", seed=1)
    eng.advance(20)
    eng.faults.policy = Policy.load(**FAST, redundant_experts=redundant)
    eng.submit(command("fault", {"kind": "npu_die", "target": "n20/npu3/d1"}))
    eng.advance(10)
    eng.drain(cap_s=120)
    return eng


@pytest.mark.parametrize("redundant", [False, True])
def test_a_die_fault_drains_with_nothing_lost_and_no_tokens_short(redundant):
    eng = _die_fault_then_drain(redundant)
    a = eng.audit()
    assert eng.drained["complete"] and a["in_flight"] == 0
    assert (a["lost"], a["tokens_short"], a["conserved"]) == (0, 0, True)
    assert a["completed"] == a["arrived"] > 1000
    assert eng.faults.faults[0].requeued > 0 and eng.fault_report()[0]["lost"] == 0
    s = eng.summary()
    assert s["requests"]["lost"] == 0 and s["drain"]["complete"]


@pytest.mark.parametrize("redundant", [False, True])
def test_an_engine_that_forgets_a_sequence_on_a_dead_die_is_caught(monkeypatch, redundant):
    real = DecodeInstance.evict

    def forgetful(self, mask=None, queue=True):
        return real(self, mask, queue)[1:]               # drops one evicted id on the floor
    monkeypatch.setattr(DecodeInstance, "evict", forgetful)
    eng = _die_fault_then_drain(redundant)
    a = eng.audit()
    assert a["lost"] == 1 and a["in_flight"] == 1 and not a["conserved"]
    assert eng.fault_report()[0]["lost"] == 1 and eng.summary()["requests"]["lost"] == 1


def test_lost_is_measured_during_the_run_too(monkeypatch):
    real = DecodeInstance.evict
    monkeypatch.setattr(DecodeInstance, "evict", lambda self, mask=None, queue=True:
                        real(self, mask, queue)[1:])
    eng = Engine("paper-decode", seed=1)
    eng.advance(20)
    eng.faults.policy = Policy.load(**FAST, redundant_experts=False)
    eng.submit(command("fault", {"kind": "npu_die", "target": "n20/npu3/d1"}))
    eng.advance(6)                                       # detected at 25: evicted, one forgotten
    assert eng.audit()["orphaned"] == 1 and eng.fault_report()[0]["lost"] == 1


def test_an_engine_that_finishes_requests_early_is_caught(monkeypatch):
    real = Engine.finish

    def hasty(self, ids):
        self.req.generated[ids] -= 1                      # one token short of what was asked
        real(self, ids)
    monkeypatch.setattr(Engine, "finish", hasty)
    eng = Engine("paper-decode", seed=1)
    eng.advance(10)
    eng.drain(cap_s=60)
    a = eng.audit()
    assert a["tokens_short"] > 0 and a["lost"] == 0


def test_finishing_a_request_twice_is_counted_not_accepted():
    eng = Engine("paper-decode", seed=1)
    eng.advance(10)
    done = eng.req.base + np.flatnonzero(eng.req.state[:eng.req.n] == DONE)[:3]
    before = eng.req.counts()["completed"]
    eng.finish(done)
    a = eng.audit()
    assert a["completed"] == before and a["errors"]["finish_twice"] == 3 and not a["conserved"]


def test_a_small_row_window_changes_no_result():
    """Compaction only drops rows already counted: a run keeping 500 rows reports what a run
    keeping every row reports."""
    full, small = Engine("paper-decode", seed=2), Engine("paper-decode", seed=2)
    full.keep_rows, small.keep_rows = 10**9, 500
    for eng in (full, small):
        eng.advance(40)
    assert small.req.base > 0 and full.req.base == 0
    assert len(small.req.arrival) < full.req.n       # the window starts at the oldest in flight
    assert small.summary() == full.summary()
    assert small.snapshot().kpis == pytest.approx(full.snapshot().kpis, nan_ok=True)


# ---- the command line -----------------------------------------------------------------------

def _cli(*args: str) -> tuple[int, str, str]:
    import contextlib
    import io

    from twin.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def test_run_drain_reports_the_audit_in_json():
    import json
    code, out, err = _cli("run", "--scenario", "paper-decode", "--duration", "20", "--seed", "1",
                          "--drain", "--json")
    assert code == 0, err
    d = json.loads(out)
    r = d["requests"]
    assert d["drain"]["complete"] and d["drain"]["cap_s"] == 600.0
    assert (r["lost"], r["tokens_short"], r["in_flight"], r["conserved"]) == (0, 0, 0, True)
    assert r["completed"] == r["arrived"] > 1000 and d["sim_seconds"] > 20


@pytest.mark.parametrize("cap", ["0", "-1", "nan", "inf", "1e9", "soon"])
def test_run_drain_refuses_a_bad_cap_in_one_line(cap):
    code, out, err = _cli("run", "--scenario", "paper-decode", "--duration", "5", f"--drain={cap}")
    assert code == 2 and "--drain" in err and "0 < cap <= 86400" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("ext", [".csv", ".parquet"])
def test_run_out_streams_request_rows_in_chunks(tmp_path, monkeypatch, ext):
    import json

    import pandas as pd

    from twin.cli import run as cli_run
    monkeypatch.setattr("twin.engine.core.KEEP_ROWS", 300)
    writes = []
    real = cli_run._RowWriter.write
    monkeypatch.setattr(cli_run._RowWriter, "write", lambda self, df: (writes.append(len(df)), real(self, df)))
    path = tmp_path / f"run{ext}"
    code, out, err = _cli("run", "--scenario", "paper-decode", "--duration", "20", "--seed", "1",
                          "--out", str(path), "--json")
    assert code == 0, err
    r = json.loads(out)["requests"]
    df = pd.read_csv(path) if ext == ".csv" else pd.read_parquet(path)
    assert len(writes) > 3 and sum(writes) == len(df) == r["arrived"]
    assert list(df["id"]) == list(range(r["arrived"]))
    assert (df["state"] == "done").sum() == r["completed"]
    assert (tmp_path / f"run.intervals{ext}").exists()
