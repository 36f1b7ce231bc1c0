"""Prometheus metrics of `twin serve` under vLLM's names and types (official prometheus_client).

Per-request series (histograms, token counters, finish reasons, prefix cache) count the served
requests, observed at the twin's times (sim seconds = wall seconds at 1x): what vLLM's exporter
counts for the requests it serves. Gauges read the whole twin (background traffic included) from
what the engine process publishes every engine_proc.SNAPSHOT_S. The twin's own series
(`twin:`) add what vLLM has no name for: fabric planes and links, faults, EMS tiers, the pace.
The vLLM names follow vllm/v1/metrics/loggers.py (V1) plus the V0 names its published Grafana
dashboard (docs/grafana/vllm-grafana.json) still queries: gpu/cpu_cache_usage_perc, num_requests_swapped,
time_per_output_token_seconds.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from twin.engine.traffic import link_utilisation

# bucket bounds as vLLM's loggers.py sets them (seconds, tokens)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
               120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TOKEN_BUCKETS = tuple(float(m * 10 ** e) for e in range(6) for m in (1, 2, 5))   # 1 .. 500,000
TOP_LINKS = 10          # busiest links exported one by one (all of them would be ~10^4 series)


class ServeMetrics:
    """The registry `/metrics` renders; `observe()` is called on the event loop per stream event."""

    def __init__(self, live):
        self.live = live
        self.registry = r = CollectorRegistry()
        m, lab = live.model, ["model_name"]

        def hist(name, doc, buckets):
            return Histogram(name, doc, lab, buckets=buckets, registry=r).labels(m)

        def count(name, doc):
            return Counter(name, doc, lab, registry=r).labels(m)
        self.ttft = hist("vllm:time_to_first_token_seconds", "Time to first token (s).", TTFT_BUCKETS)
        self.itl = hist("vllm:inter_token_latency_seconds", "Time between streamed chunks (s; one per "
                        "decode step, MTP tokens included).", ITL_BUCKETS)
        self.tpot = hist("vllm:time_per_output_token_seconds", "Same as inter_token_latency (vLLM V0 name).",
                         ITL_BUCKETS)
        self.e2e = hist("vllm:e2e_request_latency_seconds", "Arrival to last token (s).", E2E_BUCKETS)
        self.queue = hist("vllm:request_queue_time_seconds", "Arrival to prefill start (s).", E2E_BUCKETS)
        self.prefill = hist("vllm:request_prefill_time_seconds", "Prefill start to first token (s).", E2E_BUCKETS)
        self.decode = hist("vllm:request_decode_time_seconds", "First token to last (s).", E2E_BUCKETS)
        self.inference = hist("vllm:request_inference_time_seconds", "Prefill start to last token (s).",
                              E2E_BUCKETS)
        self.prompt_len = hist("vllm:request_prompt_tokens", "Prompt tokens per request.", TOKEN_BUCKETS)
        self.gen_len = hist("vllm:request_generation_tokens", "Output tokens per request.", TOKEN_BUCKETS)
        self.max_gen = hist("vllm:request_max_num_generation_tokens", "Output tokens per request (one "
                            "sequence per request).", TOKEN_BUCKETS)
        self.max_tokens = hist("vllm:request_params_max_tokens", "max_tokens asked (or drawn).", TOKEN_BUCKETS)
        self.prompt_tokens = count("vllm:prompt_tokens", "Prompt tokens of finished requests.")
        self.gen_tokens = count("vllm:generation_tokens", "Output tokens streamed.")
        self.cache_queries = count("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix (EMS) cache.")
        self.cache_hits = count("vllm:prefix_cache_hits", "Prompt tokens the prefix (EMS) cache served.")
        self.success = Counter("vllm:request_success", "Finished requests by finish reason.",
                               ["model_name", "finished_reason"], registry=r)
        self.rejected = Counter("twin:requests_rejected", "Requests the twin refused, by reason.",
                                ["model_name", "reason"], registry=r)
        r.register(_Gauges(live))

    def observe(self, stream, t: float, delta: int, end: str) -> None:
        """One event of a stream as it is sent (live.LiveTwin._emit): `delta` tokens at sim time t."""
        if end not in ("", "stop", "admitted"):
            self.rejected.labels(self.live.model, end).inc()
            return
        if delta:
            self.gen_tokens.inc(delta)
            times = stream.times
            if len(times) == 1:
                self.ttft.observe(times[0] - stream.arrival)
            else:
                self.itl.observe(times[-1] - times[-2])
                self.tpot.observe(times[-1] - times[-2])
        if end == "stop":
            self.finished(stream, t)

    def finished(self, s, t: float) -> None:
        first = s.times[0] if s.times else t
        start, end_prefill, cached = s.prefill or (first, first, 0)
        self.e2e.observe(t - s.arrival)
        self.queue.observe(max(start - s.arrival, 0.0))
        self.prefill.observe(max(first - start, 0.0))
        self.decode.observe(max(t - first, 0.0))
        self.inference.observe(max(t - start, 0.0))
        for h, v in ((self.prompt_len, s.input_tokens), (self.gen_len, s.output_tokens),
                     (self.max_gen, s.output_tokens), (self.max_tokens, s.output_tokens)):
            h.observe(v)
        self.prompt_tokens.inc(s.input_tokens)
        self.cache_queries.inc(s.input_tokens)
        self.cache_hits.inc(cached)
        self.success.labels(self.live.model, s.finish_reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _Gauges:
    """Gauges from the engine process's latest `engine_gauges()` (read whole at scrape time)."""

    def __init__(self, live):
        self.live = live

    def collect(self):
        g, m = self.live.gauges, self.live.model
        for name, doc, value in (
                ("vllm:num_requests_running", "Requests in prefill or decode.", g["running"]),
                ("vllm:num_requests_waiting", "Requests queued for prefill or decode.", g["waiting"]),
                ("vllm:num_requests_swapped", "Always 0: the twin never swaps KV to host memory.", 0),
                ("vllm:kv_cache_usage_perc", "KV cache reserved on the decode dies (0-1).", g["kv"]),
                ("vllm:gpu_cache_usage_perc", "Same as kv_cache_usage_perc (vLLM V0 name).", g["kv"]),
                ("vllm:cpu_cache_usage_perc", "EMS DRAM in use (0-1), the twin's host-memory KV tier.",
                 g["ems_dram_frac"])):
            f = GaugeMetricFamily(name, doc, labels=["model_name"])
            f.add_metric([m], float(value))
            yield f
        yield _family("twin:sim_pace", "Sim seconds per wall second (1: real time).", [], [((), self.live.achieved())])
        yield _family("twin:sim_time_seconds", "Sim time of the served twin.", [], [((), g["sim_time"])])
        yield _family("twin:events_late", "Token events known only after their send time (engine behind).",
                      [], [((), self.live.late)])
        yield _family("twin:plane_gbps", "Traffic per network plane over the last interval (GB/s).",
                      ["plane"], [((k,), v) for k, v in g["planes"].items()])
        yield _family("twin:link_utilization_max", "Busiest link's utilisation by plane and link kind (0-1).",
                      ["plane", "kind"], [(k, v[1]) for k, v in g["links"].items()])
        yield _family("twin:link_utilization_mean", "Mean link utilisation by plane and link kind (0-1).",
                      ["plane", "kind"], [(k, v[0]) for k, v in g["links"].items()])
        yield _family("twin:link_utilization", f"The {TOP_LINKS} busiest links' utilisation (0-1).",
                      ["link"], [((k,), v) for k, v in g["top_links"]])
        yield _family("twin:faults", "Faults by kind and state (scheduled, active, recovered).",
                      ["kind", "state"], [(k, v) for k, v in g["faults"].items()])
        yield _family("twin:ems_bytes", "EMS cache bytes by tier.", ["tier"],
                      [(("dram",), g["ems"].get("dram_bytes", 0.0)), (("ssd",), g["ems"].get("ssd_bytes", 0.0))])
        yield _family("twin:ems_hit_blocks", "EMS blocks served, by tier, since the start.", ["tier"],
                      [(("dram",), g["ems"].get("dram_hit_blocks", 0)), (("ssd",), g["ems"].get("ssd_hit_blocks", 0))])
        yield _family("twin:ems_resident_blocks", "Blocks held in EMS.", [], [((), g["ems"].get("resident_blocks", 0))])


def _family(name, doc, labels, rows):
    f = GaugeMetricFamily(name, doc, labels=labels)
    for key, value in rows:
        f.add_metric(list(key), float(value))
    return f


def engine_gauges(eng) -> dict:
    """What the gauges show, computed in the engine process from the few parts of the engine they
    read (not a whole snapshot: that takes ~0.2 s, and the engine must keep real time)."""
    waiting = sum(len(p.queue) for p in eng.prefill) + sum(len(d.queue) for d in eng.decode)
    cap = eng.kv_capacity_tokens * sum(len(d.dies) for d in eng.decode)
    kv = sum(d.reserved for d in eng.decode) / cap if cap else 0.0
    cache = {key: v for key, v in eng.ems.stats().items() if key != "per_server"} if eng.ems else {}
    dram_cap = _dram_capacity(eng)
    util = np.asarray(link_utilisation(eng), dtype=float)
    links = {key: (float(util[ids].mean()), float(util[ids].max())) for key, ids in _link_groups(eng, len(util)).items()}
    top = np.argpartition(util, -TOP_LINKS)[-TOP_LINKS:] if len(util) > TOP_LINKS else np.arange(len(util))
    top = top[np.argsort(util[top])[::-1]]
    faults = defaultdict(int)
    now = eng.env.now
    for f in eng.faults.faults:
        faults[(f.kind, "active" if f.active else "scheduled" if f.at_s > now else "recovered")] += 1
    return {"running": max(eng.req.in_flight - waiting, 0), "waiting": waiting, "kv": kv,
            "ems_dram_frac": (cache.get("dram_bytes", 0.0) / dram_cap) if dram_cap else 0.0,
            "sim_time": float(now), "planes": dict(eng.metrics.last_plane_gbps), "links": links,
            "top_links": [(eng.topo.link_id(int(e)), float(util[e])) for e in top if util[e] > 0],
            "faults": dict(faults), "ems": cache}


def _link_groups(eng, n: int) -> dict:
    """Link ids by (plane, kind), computed once per engine (the topology's links do not change)."""
    groups = getattr(eng, "_serve_link_groups", None)
    if groups is None or sum(len(g) for g in groups.values()) != n:
        acc = defaultdict(list)
        for eid, (_u, _v, plane, kind) in enumerate(eng.topo.link_arrays().ends[:n]):
            acc[(plane, kind)].append(eid)
        groups = eng._serve_link_groups = {k: np.array(v) for k, v in acc.items()}
    return groups


def _dram_capacity(eng) -> float:
    """EMS DRAM bytes in all (twin.engine.ems.prefix.build_ems's rule); 0 when unlimited or absent."""
    sc = eng.scenario
    if eng.ems is None or sc.cache_capacity == "unlimited":
        return 0.0
    if sc.cache_capacity == "default":
        return eng.cat.chip(eng.system.cpu).dram_gb * 1e9 * eng.dep.ems_dram_fraction * len(eng.ems.servers)
    return float(sc.cache_capacity)
