"""/metrics of `twin serve` against vLLM's published Grafana dashboard (docs/grafana/vllm-grafana.json):
every metric an expression queries is exposed, with vLLM's type."""
from __future__ import annotations

import asyncio
import functools
import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import run_coro
from twin.serve import prompt
from twin.serve.relay import LiveTwin, Stream

DASHBOARD = Path(__file__).resolve().parents[1] / "docs" / "grafana" / "vllm-grafana.json"


def _exprs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "expr":
                yield v
            else:
                yield from _exprs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _exprs(v)


@functools.cache
def _scrape() -> dict:
    """One request through a live twin, then /metrics as the engine process renders it."""
    async def go():
        lt = LiveTwin("default", seed=1)
        lt.start(asyncio.get_running_loop())
        await lt.wait_ready()            # the engine process says which model it serves
        s = Stream(600, 4, prompt.block_ids(prompt.ids("z" * 2400), lt.block_size))
        lt.submit(s)
        await s.decision()
        async for _ in s.chunks():
            pass
        await asyncio.sleep(0.05)        # the engine's "times" event (its prefill) follows the last token
        text = await lt.metrics()
        lt.stop()
        return text
    return {f.name: f for f in text_string_to_metric_families(run_coro(go()).decode())}


def test_every_dashboard_metric_is_on_metrics():
    exprs = list(_exprs(json.loads(DASHBOARD.read_text())))
    assert len(exprs) == 29
    fams = _scrape()
    samples = {s.name for f in fams.values() for s in f.samples}
    queried = {n for e in exprs for n in re.findall(r"vllm:[a-zA-Z0-9_:]+", e)}
    assert len(queried) == 23
    missing = sorted(n for n in queried if n not in samples)
    assert not missing, missing
    # each sample carries the model_name label the dashboard filters on
    for f in fams.values():
        if f.name.startswith("vllm:"):
            assert all(s.labels.get("model_name") == "cloudmatrix-infer-paper" for s in f.samples), f.name


def test_types_and_values():
    fams = _scrape()
    kinds = {n: f.type for n, f in fams.items()}
    for n in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
              "vllm:time_per_output_token_seconds", "vllm:request_prompt_tokens"):
        assert kinds[n] == "histogram", n
    for n in ("vllm:prompt_tokens", "vllm:generation_tokens", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
              "vllm:request_success"):
        assert kinds[n] == "counter", n
    for n in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "twin:faults",
              "twin:plane_gbps", "twin:ems_bytes", "twin:link_utilization_max"):
        assert kinds.get(n) == "gauge" or n == "twin:faults", n
    value = lambda n, s: next(x.value for x in fams[n].samples if x.name == s)   # noqa: E731
    assert value("vllm:prompt_tokens", "vllm:prompt_tokens_total") == 600
    assert value("vllm:generation_tokens", "vllm:generation_tokens_total") == 4
    assert value("vllm:time_to_first_token_seconds", "vllm:time_to_first_token_seconds_count") == 1
    assert value("vllm:request_success", "vllm:request_success_total") == 1


def test_histograms_observed_per_advance_render_as_the_client_library_would():
    """The engine observes each advance's values at once (numpy); the exposition must be what the
    official client's Histogram gives for the same values one by one (bounds included: le is <=)."""
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from twin.serve.metrics import ITL_BUCKETS, _Hist
    values = [0.01, 0.0100001, 0.022, 0.025, 0.3, 99.0, 0.0, 0.075]
    ours = _Hist("vllm:inter_token_latency_seconds", "doc", ITL_BUCKETS)
    ours.observe(values[:3])
    ours.observe([])
    ours.observe(values[3:])
    reg = CollectorRegistry()
    ref = Histogram("vllm:inter_token_latency_seconds", "doc", ["model_name"], buckets=ITL_BUCKETS, registry=reg)
    for v in values:
        ref.labels("m").observe(v)
    theirs = {(s.name, s.labels.get("le")): s.value for f in text_string_to_metric_families(generate_latest(reg).decode())
              for s in f.samples if not s.name.endswith("_created")}
    mine = {(s.name, s.labels.get("le")): s.value for s in ours.family("m").samples}
    assert mine == pytest.approx(theirs) and len(mine) == len(ITL_BUCKETS) + 3
