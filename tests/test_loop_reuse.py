"""A looped trace is a new user population each lap: prefix reuse does not saturate."""
import numpy as np
import pytest

from twin.engine.source import TraceSource
from twin.workload import LapIds, Workload, ideal_hit_ratio


def small() -> Workload:
    """25 requests that all open with block 7 (a system prompt); the second continues the first
    (ids 100, 101), the others have their own block 200 + k: only id 7 is in >= 10% of requests."""
    ids = [[7, 100], [7, 100, 101]] + [[7, 200 + k] for k in range(23)]
    ptr = np.concatenate(([0], np.cumsum([len(x) for x in ids])))
    return Workload(np.arange(25.0), [512 * len(x) for x in ids], [10] * 25, ptr, np.concatenate(ids), 512, "test")


def test_later_laps_keep_only_the_shared_blocks():
    w = small()
    lap = LapIds(w)
    assert lap.span == 26 and lap.shared.tolist() == [x == 7 for x in w.block_ids]
    assert lap(0, 5, 0).tolist() == [7, 100, 7, 100, 101]
    # fresh ids: the dense rank of each id (7, 100, 101, 200.. -> 0, 1, 2, 3..) above the largest id 222, 26 per lap
    assert lap(0, 5, 1).tolist() == [7, 224, 7, 224, 225]
    assert lap(0, 7, 2).tolist() == [7, 250, 7, 250, 251, 7, 252]
    assert lap(5, 7, 2).tolist() == [7, 252]


def test_looped_mooncake_trace_keeps_its_hit_ratio_lap_after_lap():
    """Three laps of the Mooncake conversation trace: the ideal block hit ratio of each later lap
    is the first lap's plus only what the shared system prompt (id 0) adds; replaying the same ids
    would make every later lap hit 100%."""
    src = TraceSource("mooncake_conversation", speedup=1000.0, loop=True)
    n, span = len(src.workload), src.span
    batch = src.take(3 * span - 1e-9)
    assert len(batch) == 3 * n
    w = Workload(batch.arrival, batch.input, batch.output, batch.ptr, batch.ids, 512, "3 laps")
    first = ideal_hit_ratio(w.slice_time(0, span))
    assert first == pytest.approx(0.366, abs=5e-4)                        # traces/README.md
    whole = ideal_hit_ratio(w)
    lap_blocks = len(src.workload.block_ids)
    later = (whole * 3 * lap_blocks - first * lap_blocks) / (2 * lap_blocks)
    shared = float(np.mean(src.workload.block_ids == 0))
    assert shared == pytest.approx(0.0417, abs=1e-4)
    assert later == pytest.approx(first + 1 / n * shared, abs=1e-4)       # lap 0's first id 0 is the only miss


def test_ttft_with_and_without_a_hit_roll_over_a_full_window_with_a_minimum_count():
    """No point until HIT_WINDOW intervals have closed (the cold start); then a point needs HIT_MIN
    finishes of its kind in the window, so a rare miss per interval still gives a line."""
    from twin.engine.metrics import HIT_MIN, HIT_WINDOW, Metrics
    m = Metrics(2, 1, 1, 1.0)
    add = lambda ttft, hit: m._hit_medians(m.ttft.bins(ttft), np.array(hit))
    rows = [add([900.0] * 5 + [100.0] * HIT_MIN, [False] * 5 + [True] * HIT_MIN)]
    rows += [add([1000.0 + k, 200.0], [False, True]) for k in range(2 * HIT_WINDOW)]
    hits = [k for k, r in enumerate(rows) if not np.isnan(r["ttft_hit_p50_ms"])]
    misses = [k for k, r in enumerate(rows) if not np.isnan(r["ttft_miss_p50_ms"])]
    assert hits[0] == HIT_WINDOW - 1                     # the window is full at its HIT_WINDOW-th interval
    assert misses[0] == max(HIT_WINDOW - 1, HIT_MIN - 5)  # and holds >= HIT_MIN misses by then
    # medians of rank floor((n-1)/2) from log histograms, within their stated 0.5%
    lower = lambda v: sorted(v)[(len(v) - 1) // 2]
    assert rows[HIT_WINDOW - 1]["ttft_hit_p50_ms"] == pytest.approx(lower([100.0] * HIT_MIN + [200.0] * (HIT_WINDOW - 1)), rel=0.005)
    assert rows[HIT_WINDOW - 1]["ttft_miss_p50_ms"] == pytest.approx(lower([900.0] * 5 + list(1000.0 + np.arange(HIT_WINDOW - 1))), rel=0.005)
    # after 2 windows the first interval (5 x 900 ms, HIT_MIN x 100 ms) has left the window
    assert rows[-1]["ttft_miss_p50_ms"] == pytest.approx(lower(np.arange(1000.0 + HIT_WINDOW, 1000.0 + 2 * HIT_WINDOW)), rel=0.005)
    assert rows[-1]["ttft_hit_p50_ms"] == pytest.approx(200.0, rel=0.005)
    assert m.hit_ttft.n == HIT_WINDOW and m.miss_ttft.n == HIT_WINDOW      # what left the window left the sums
