"""`make bench-serve`'s twin side: the twin's TTFT and per-token ITL means over a run from /metrics read
before and after, and its output throughput over the sim time its tokens were made."""
from __future__ import annotations

import math

import pytest

from twin.cli.bench_serve import SERIES, twin_side


def _state(ttft, tpot, tokens, sim_time):
    return {SERIES[0]: ttft, SERIES[1]: tpot, "tokens": tokens, "sim_time": sim_time}


def test_means_are_the_runs_own_and_throughput_spans_the_tokens_made():
    before = _state((10.0, 100), (2.0, 100), 5000, 100.0)
    after = _state((10.0 + 3 * 0.25, 103), (2.0 + 3 * 0.022, 103), 5600, 140.0)
    samples = [before, _state((10.0, 100), (2.0, 100), 5000, 110.0),      # idle: AIPerf starting
               _state((10.0, 100), (2.0, 100), 5000, 120.0),             # the last sample before a token
               _state((10.0, 100), (2.0, 100), 5100, 125.0),
               _state((10.0, 100), (2.0, 100), 5600, 130.0), after]      # idle again after the run
    side = twin_side(before, after, samples)
    assert side["ttft_ms"] == pytest.approx(250.0) and side["itl_ms"] == pytest.approx(22.0)
    assert side["tokens"] == 600 and side["tokens_per_s"] == pytest.approx(600 / 10.0)


def test_a_run_that_finished_nothing_has_no_means():
    s = _state((1.0, 4), (0.1, 4), 10, 5.0)
    side = twin_side(s, s, [s, s])
    assert math.isnan(side["ttft_ms"]) and math.isnan(side["itl_ms"]) and math.isnan(side["tokens_per_s"])
