"""`make bench-serve`: the twin's TTFT and per-token ITL means over a run from /metrics read before and
after, its output throughput over the sim time its tokens were made; AIPerf's and GuideLLM's reports
read; their token counts held to the twin's."""
from __future__ import annotations

import io
import json
import math

import pytest

from twin.cli.bench_serve import SERIES, aiperf_side, guidellm_side, show, tokens_agree, twin_side


def _state(ttft, tpot, tokens, sim_time, prompt_tokens=0):
    return {SERIES[0]: ttft, SERIES[1]: tpot, "tokens": tokens, "sim_time": sim_time, "prompt_tokens": prompt_tokens}


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


def test_the_twins_prompt_tokens_are_the_runs_own():
    before, after = _state((0.0, 0), (0.0, 0), 100, 0.0, 1000), _state((0.5, 2), (0.04, 2), 500, 9.0, 2024)
    side = twin_side(before, after, [before, after])
    assert side["prompt_tokens"] == 1024 and side["tokens"] == 400


def _stat(mean, total, count=1):
    return {k: {"mean": mean, "total_sum": total, "count": count, "median": mean} for k in ("successful", "total")}


def test_guidellm_report_gives_means_over_its_successes_and_tokens_over_every_request(tmp_path):
    """The shape of GuideLLM 0.8.1's `--output kind=json` report (one benchmark)."""
    metrics = {"request_totals": {"successful": 29, "errored": 1, "incomplete": 2, "total": 32},
               "time_to_first_token_ms": _stat(131.7, 3819.3, 29), "inter_token_latency_ms": _stat(12.8, 7424.0),
               "output_tokens_per_second": _stat(632.5, 1.0), "prompt_token_count": _stat(512.0, 16384.0),
               "output_token_count": _stat(190.0, 6080.0)}
    metrics["prompt_token_count"]["successful"]["total_sum"] = 14848.0     # the 29 that finished
    (tmp_path / "benchmarks.json").write_text(json.dumps({"benchmarks": [{"metrics": metrics}]}))
    side = guidellm_side(str(tmp_path))
    assert side["ttft_ms"] == 131.7 and side["itl_ms"] == 12.8 and side["tokens_per_s"] == 632.5
    assert side["prompt_tokens"] == 16384 and side["tokens"] == 6080
    assert side["requests"] == 29 and side["errors"] == 3 and math.isnan(side["ttft_sent_ms"])


def test_aiperf_export_gives_ttft_after_send_and_its_token_sums(tmp_path):
    """The shape of AIPerf 0.13's profile_export_aiperf.json; a run without errors has no error count."""
    doc = {"time_to_first_token": {"avg": 585.5}, "http_req_waiting": {"avg": 313.3},
           "inter_token_latency": {"avg": 14.2}, "output_token_throughput": {"avg": 2900.0},
           "input_sequence_length": {"avg": 512.0, "sum": 76800.0}, "output_token_count": {"avg": 200.0, "sum": 30000.0},
           "request_count": {"avg": 150.0}}
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "profile_export_aiperf.json").write_text(json.dumps(doc))
    side = aiperf_side(str(tmp_path))
    assert side["ttft_sent_ms"] == 313.3 and side["prompt_tokens"] == 76800 and side["tokens"] == 30000
    assert side["requests"] == 150 and side["errors"] == 0


def test_token_counts_must_be_the_twins_and_the_output_says_which():
    client = {"ttft_ms": 200.0, "ttft_sent_ms": 150.0, "itl_ms": 15.0, "tokens_per_s": 900.0,
              "prompt_tokens": 5120, "tokens": 2000, "requests": 10, "errors": 0}
    twin = {"ttft_ms": 100.0, "itl_ms": 14.0, "tokens_per_s": 1000.0, "prompt_tokens": 5120, "tokens": 2000}
    assert tokens_agree(client, twin)
    assert not tokens_agree(client, {**twin, "prompt_tokens": 7600})
    assert not tokens_agree(client, {**twin, "tokens": 1999})
    out = io.StringIO()
    show("aiperf", 10, {"client": client, "twin": {**twin, "prompt_tokens": 7600}, "load": (3.0, 4.0), "conns": 6}, out)
    lines = out.getvalue().splitlines()
    assert "TTFT ms 200.0 / 100.0 (2.000)" in lines[0] and "TTFT after send 150.0 (1.500)" in lines[0]
    assert lines[1].endswith("tokens client / twin: prompt 5120 / 7600, output 2000 / 2000: DIFFER")


def test_the_tools_run_with_default_validation_offline_and_aiperf_without_a_pool():
    """GuideLLM keeps its backend validation (GET /health); AIPerf opens a connection per request;
    both count with the tokenizer given and have the Hub at a closed port."""
    from twin.cli.bench_serve import NO_HUB, TOOLS, aiperf_cmd, guidellm_cmd
    g = guidellm_cmd("guidellm", "http://h:1", "m", "/tok", 10, "/out")
    assert g[g.index("--backend") + 1] == "kind=openai_http,target=http://h:1,model=m,request_format=/v1/completions"
    assert "kind=max_requests,count=30" in g and "kind=hf_auto,model=/tok" in g
    a = aiperf_cmd("aiperf", "http://h:1", "m", "/tok", 10, "/out")
    assert a[a.index("--connection-reuse-strategy") + 1] == "never" and a[a.index("--tokenizer") + 1] == "/tok"
    assert all(env["HF_ENDPOINT"] == NO_HUB for *_, env in TOOLS.values())
    assert TOOLS["guidellm"][3]["HF_HUB_OFFLINE"] == "1"
