"""/metrics of `twin serve` against vLLM's Grafana dashboards (docs/grafana/: the current overview,
performance and query dashboards and the older published one): every metric an expression queries
is exposed, with vLLM's type and buckets, and the values follow from the engine's own events."""
from __future__ import annotations

import functools
import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from twin.cli.prom_check import DASHBOARDS, NOT_APPLICABLE, expressions, metric_names
from twin.serve.metrics import ServeMetrics, token_buckets

from test_serve import serving

GRAFANA = Path(__file__).resolve().parents[1] / "docs" / "grafana"
MODEL = "cloudmatrix-infer-paper"


def _get(url: str, body: dict | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body else None,
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@functools.cache
def _scrape() -> tuple[dict, dict]:
    """A live server: one streamed completion (1,200 prompt tokens: one prefill chunk; 4 out), GET
    /v1/models, a path no route has;
    then /metrics (the engine process's text, every worker's HTTP requests in it)."""
    with serving() as (base, _):
        code, body = _get(base + "/v1/completions", {"model": MODEL, "prompt": "z" * 1200, "max_tokens": 4,
                                                      "stream": True, "stream_options": {"include_usage": True}})
        assert code == 200, body
        usage = [json.loads(x[6:]) for x in body.decode().split("\n\n") if x.startswith("data: {")][-1]["usage"]
        assert _get(base + "/v1/models")[0] == 200 and _get(base + "/no/such/route")[0] == 404
        time.sleep(0.1)                  # the engine's "times" event (its prefill) follows the last token
        text = _get(base + "/metrics")[1].decode()
    return {f.name: f for f in text_string_to_metric_families(text)}, usage


@pytest.mark.parametrize("dashboard, n_exprs, n_metrics", [
    ("vllm-overview-targets.json", 84, 46), ("vllm-performance-statistics.json", 21, 12),
    ("vllm-query-statistics.json", 14, 5), ("vllm-grafana.json", 29, 23)])
def test_every_dashboard_metric_is_on_metrics(dashboard, n_exprs, n_metrics):
    exprs = list(expressions(json.loads((GRAFANA / dashboard).read_text())))
    assert len(exprs) == n_exprs and dashboard in DASHBOARDS
    queried = {n for e in exprs for n in metric_names(e)}
    assert len(queried) == n_metrics
    fams = _scrape()[0]
    samples = {s.name for f in fams.values() for s in f.samples}
    missing = sorted(n for n in queried if n not in samples and n not in NOT_APPLICABLE)
    assert not missing, missing
    # each vLLM sample carries the model_name label the dashboards filter on
    for f in fams.values():
        if f.name.startswith("vllm:"):
            assert all(s.labels.get("model_name") == MODEL for s in f.samples), f.name


def test_types_and_values():
    fams, usage = _scrape()
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
    value = lambda n, s, **lab: next(x.value for x in fams[n].samples   # noqa: E731
                                     if x.name == s and all(x.labels.get(k) == v for k, v in lab.items()))
    prompt = usage["prompt_tokens"]
    assert value("vllm:prompt_tokens", "vllm:prompt_tokens_total") == prompt
    assert value("vllm:generation_tokens", "vllm:generation_tokens_total") == 4 == usage["completion_tokens"]
    assert value("vllm:time_to_first_token_seconds", "vllm:time_to_first_token_seconds_count") == 1
    assert value("vllm:request_success", "vllm:request_success_total", finished_reason="length") == 1
    assert {s.labels["finished_reason"]: s.value for s in fams["vllm:request_success"].samples
            if s.name.endswith("_total")} == {"stop": 0, "length": 1, "abort": 0, "error": 0, "repetition": 0}
    # prompt tokens by source: computed + prefix-cache hits = the prompt
    by_source = {s.labels["source"]: s.value for s in fams["vllm:prompt_tokens_by_source"].samples
                 if s.name.endswith("_total")}
    hits = value("vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total")
    assert by_source == {"local_compute": prompt - hits, "local_cache_hit": hits, "external_kv_transfer": 0}
    # engine steps: one prefill batch (the prompt, less what the cache served), then decode steps that
    # make the 3 tokens after the first; each decode step is one MTP draft of one token per sequence
    steps = value("vllm:iteration_tokens_total", "vllm:iteration_tokens_total_count")
    assert value("vllm:iteration_tokens_total", "vllm:iteration_tokens_total_sum") == prompt - hits + 3
    assert 2 <= steps <= 4
    drafts = value("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_drafts_total")
    assert drafts == steps - 1 == value("vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_draft_tokens_total")
    accepted = value("vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_accepted_tokens_total")
    assert accepted == value("vllm:spec_decode_num_accepted_tokens_per_pos",
                             "vllm:spec_decode_num_accepted_tokens_per_pos_total", position="0")
    assert drafts + accepted >= 3 and accepted <= drafts
    # a request's time per output token: its decode time over the tokens after the first
    tpot = value("vllm:request_time_per_output_token_seconds", "vllm:request_time_per_output_token_seconds_sum")
    decode = value("vllm:request_decode_time_seconds", "vllm:request_decode_time_seconds_sum")
    assert tpot == pytest.approx(decode / 3, rel=1e-9) and tpot > 0
    # HTTP: the completion, the model list and the unknown path, by template; /metrics not counted
    http = {(s.labels["handler"], s.labels["method"], s.labels["status"]): s.value
            for s in fams["http_requests"].samples if s.name == "http_requests_total"}
    assert http == {("/v1/completions", "POST", "2xx"): 1, ("/v1/models", "GET", "2xx"): 1, ("none", "GET", "4xx"): 1}
    assert value("http_request_duration_seconds", "http_request_duration_seconds_count",
                 handler="/v1/completions") == 1
    assert value("vllm:num_preemptions", "vllm:num_preemptions_total") == 0
    assert {s.labels["reason"] for s in fams["vllm:num_requests_waiting_by_reason"].samples} == {"capacity", "deferred"}


def test_histogram_buckets_are_vllms():
    """vLLM's bounds (vllm/v1/metrics/buckets.py): request tokens 1-2-5 up to the context limit,
    iteration tokens in powers of two, TPOT per request on the inter-token bounds."""
    fams = _scrape()[0]
    bounds = lambda n: [s.labels["le"] for s in fams[n].samples   # noqa: E731
                        if s.name == n + "_bucket" and s.labels.get("handler", "/v1/models") == "/v1/models"]
    assert bounds("vllm:iteration_tokens_total") == ["1.0", "8.0", "16.0", "32.0", "64.0", "128.0", "256.0", "512.0",
                                                      "1024.0", "2048.0", "4096.0", "8192.0", "16384.0", "+Inf"]
    assert bounds("vllm:request_time_per_output_token_seconds") == bounds("vllm:inter_token_latency_seconds")
    assert bounds("vllm:request_prompt_tokens")[-3:] == ["50000.0", "100000.0", "+Inf"]
    assert bounds("http_request_duration_seconds") == ["0.1", "0.5", "1.0", "+Inf"]
    assert token_buckets(100) == (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)


def test_error_and_abort_are_counted_when_they_happen():
    """An engine refusal answered 5xx ("overloaded") is finished_reason "error"; a request too long
    for KV (400 before any work) is not a finished request; a client gone is "abort"."""
    m = ServeMetrics(MODEL, 1000)
    for key in (1, 2, 3):
        m.arrived(key, 0.0, 10, 5)
    m.events([(1, 0.1, 0, "overloaded"), (2, 0.1, 0, "kv_too_long")])
    m.aborted(3)
    m.aborted(3)                     # (once only)
    assert m.success == {"stop": 0, "length": 0, "abort": 1, "error": 1, "repetition": 0}
    assert dict(m.rejected) == {"overloaded": 1, "kv_too_long": 1} and not m.open


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


def test_http_series_are_bounded_by_route_template_and_method():
    """The handler is a route's template (or "none"), the method a known one (or "other"): what a
    client sends never makes a series of its own; /metrics and the probes are not counted."""
    from starlette.routing import Route

    from conftest import run_coro
    from twin.serve.http_metrics import HttpMetrics
    rows = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 404 if scope["path"] == "/x/y" else 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def noop(*_):
        return None
    routes = [Route(p, noop) for p in ("/v1/models/{model}", "/metrics", "/health")]
    mw = HttpMetrics(app, routes, ["/v1/completions"], lambda *r: rows.append(r[:3]))

    async def go():
        for method, path in (("GET", "/v1/models/abc"), ("BREW", "/v1/completions"), ("GET", "/x/y"),
                             ("GET", "/metrics"), ("GET", "/health")):
            await mw({"type": "http", "method": method, "path": path, "headers": [], "query_string": b"",
                      "root_path": ""}, None, noop)
    run_coro(go())
    assert rows == [("/v1/models/{model}", "GET", "2xx"), ("/v1/completions", "other", "2xx"), ("none", "GET", "4xx")]
