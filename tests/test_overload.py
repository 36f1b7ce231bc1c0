"""An overloaded twin sheds load, not memory: past the admission limit arrivals are refused as
overloaded (the newest first, each counted by the audit), and past the request window's ceiling
they are refused without a row, so memory stays bounded while an old request holds the window."""
from __future__ import annotations

import numpy as np
import pytest

from twin.engine import Engine, core
from twin.engine.requests import REJECT_REASONS, REJECTED, RequestTable

OVERLOADED = REJECT_REASONS.index("overloaded") + 1       # the `reason` column's code


def _lines(eng, start: str) -> list[dict]:
    return [e for e in eng.events if e["message"].startswith(start)]


def test_refuse_staged_counts_requests_without_rows_and_frees_their_blocks():
    t = RequestTable(capacity=4)
    ptr = np.arange(0, 11, 2)                              # five requests of two blocks each
    t.stage(np.arange(5.0), np.arange(100, 105), np.full(5, 7), ptr, np.arange(10) + 1000)
    assert list(t.admit(2)) == [0, 1]
    t.refuse_staged(2)                                     # the 3rd and 4th: no id, no row
    assert list(t.admit(1)) == [2]                         # the 5th takes the next id
    assert t.input[2] == 104 and t.arrival[2] == 4.0 and list(t.blocks(2)) == [1008, 1009]
    assert list(t.blocks(1)) == [1002, 1003]
    assert t.n_blocks == 6                                 # the refused blocks are freed
    a = t.audit()
    assert (a["arrived"], a["rejected"], a["in_flight"]) == (5, 2, 3)
    assert a["rejected_by_reason"]["overloaded"] == 2 and a["conserved"] is True
    with pytest.raises(ValueError, match="1 to the 0 staged"):
        t.refuse_staged(1)


def test_the_in_flight_count_follows_rejections_of_every_kind():
    """`in_flight` (asked at every arrival tick) keeps its rejected count as they happen: it equals
    the sum over reasons after rejections by id, a second rejection of the same id (an error, not
    counted) and refusals without a row."""
    t = RequestTable(capacity=4)
    t.stage(np.arange(6.0), np.full(6, 100), np.full(6, 7))
    t.admit(4)
    t.reject(np.array([1, 3]), "kv_too_long")
    t.reject(np.array([3]), "overloaded")                  # already terminal: an error, not counted again
    t.refuse_staged(1)
    a = t.audit()
    assert t.in_flight == 2 and (a["arrived"], a["rejected"], a["in_flight"]) == (5, 3, 2)
    assert sum(a["rejected_by_reason"].values()) == 3 and a["errors"]["reject_terminal"] == 1


def test_the_admission_limit_refuses_the_newest_arrivals_and_admitting_resumes():
    eng = Engine("paper-decode", seed=3, duration_s=60, load=3.0, max_in_flight=2_000)
    peak = 0
    while eng.sim_time < 20:
        eng.advance(0.25)
        peak = max(peak, eng.req.in_flight)
    a = eng.audit()
    assert peak == 2_000                                   # reached, never passed
    assert a["rejected_by_reason"]["overloaded"] > 1_000 and a["conserved"] is True
    rows = eng.req.reason.a[:eng.req.n - eng.req.base] == OVERLOADED
    assert (eng.req.state.a[:len(rows)][rows] == REJECTED).all()
    assert np.isnan(eng.req.first_token.a[:len(rows)][rows]).all()       # never served
    assert len(_lines(eng, "Overloaded")) == 1 and not _lines(eng, "Accepting")
    eng.set_rate(1.0)                                      # far under capacity: the backlog drains
    eng.advance(40)
    refused = eng.audit()["rejected_by_reason"]["overloaded"]
    assert refused - a["rejected_by_reason"]["overloaded"] < 5     # the backlog was full at first
    assert len(_lines(eng, "Accepting")) == 1
    assert _lines(eng, "Accepting")[0]["args"]["n"] == f"{refused:,}"
    newest = eng.req.n - 1 - eng.req.base
    assert eng.req.reason.a[newest] == 0 and eng.req.in_flight < 2_000


def test_past_the_window_ceiling_arrivals_get_no_row_and_memory_is_bounded(monkeypatch):
    monkeypatch.setattr(core, "MAX_WINDOW_ROWS", 600)
    eng = Engine("default", seed=0, duration_s=120)       # 2K-token replies hold the window open
    eng.keep_rows = 100
    most = 0
    while eng.sim_time < 60:
        eng.advance(0.5)
        most = max(most, eng.req.n - eng.req.base)
    a = eng.audit()
    assert most == 600 and eng.req.dropped > 500           # arrivals past the ceiling: no row
    assert a["rejected_by_reason"]["overloaded"] == eng.req.dropped
    assert a["arrived"] == eng.req.n + eng.req.dropped and a["conserved"] is True
    assert eng.req.n_blocks - eng.req.block_base < 600 * 64    # their blocks freed too
    assert len(_lines(eng, "Overloaded")) == 1


def test_a_sweep_row_counts_arrivals_refused_without_a_row_as_misses(monkeypatch):
    from twin.explore import points
    from twin.explore.evaluate import evaluate
    task = points.plan("cloudmatrix-infer-paper", "paper-decode", [("load", [0.9])], duration_s=20)[0]
    full = evaluate(task)
    monkeypatch.setattr(core, "MAX_WINDOW_ROWS", 2_000)      # the window fills: arrivals lose their rows
    capped = evaluate(task)
    assert capped["requests"] == full["requests"]            # every arrival of the cohort is counted
    assert capped["slo_attainment"] < full["slo_attainment"]


def test_columns_and_block_list_grow_by_a_quarter_not_double_and_keep_every_row():
    t = RequestTable()                                     # 16,384 rows to start, 8 blocks each
    for i in range(76):                                    # a live twin's window: 76,000 requests
        ptr = np.arange(0, 8001, 8)
        t.add(np.arange(1000.0) + 1000 * i, np.full(1000, 4096), np.full(1000, 2), ptr,
              np.arange(8000) + 8000 * i)
    assert len(t.arrival.a) == 78_125                      # 16,384 * 1.25^7 (doubling took 131,072)
    assert t.n_blocks == 608_000 and len(t.block_ids) <= 1.25 * t.n_blocks
    assert np.array_equal(t.arrival[0:76_000], np.arange(76_000.0))    # every row kept across grows
    assert np.array_equal(t.blocks(75_999), np.arange(607_992, 608_000))
