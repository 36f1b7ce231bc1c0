"""Prometheus metrics of `twin serve` under vLLM's names and types (official prometheus_client).

Everything is kept in the engine process (the one source of truth however many HTTP workers relay):
per-request series (histograms, token counters, finish reasons, prefix cache) count the served
requests from the engine's own events, at the twin's times (sim seconds = wall seconds at 1x),
aggregated per engine advance (numpy), never per chunk on an HTTP worker's hot path; a worker's
GET /metrics asks the engine for the text. Gauges read the whole twin (background traffic
included) at scrape time. The twin's own series
(`twin:`) add what vLLM has no name for: fabric planes and links, faults, EMS tiers, the pace.
The vLLM names follow vllm/v1/metrics/loggers.py (V1) plus the V0 names its published Grafana
dashboard (docs/grafana/vllm-grafana.json) still queries: gpu/cpu_cache_usage_perc, num_requests_swapped,
time_per_output_token_seconds. Engine-step series (iteration tokens, MTP's speculative decoding, preemptions)
count every step of the twin, background traffic included, as the gauges do: `StepStats` is the
engine's step recorder (twin.engine.timing.StepTimes.record). The HTTP series are
prometheus-fastapi-instrumentator's (vLLM's API server uses it), measured on each HTTP worker
(twin.serve.http_metrics) and summed here. Buckets are vLLM's (vllm/v1/metrics/buckets.py, v0.34.0).
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.utils import floatToGoString
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from twin.engine.traffic import link_utilisation

# bucket bounds as vLLM's loggers.py sets them (seconds, tokens)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
               120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_BUCKETS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0)
HTTP_BUCKETS = (0.1, 0.5, 1.0)   # prometheus-fastapi-instrumentator's latency_lowr_buckets (8.1.0)
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")   # vllm.v1.engine.FinishReason
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")   # vllm PromptTokenStats
ERROR_ENDS = ("overloaded",)     # engine refusals answered as a server error (5xx): finished_reason "error"
TOP_LINKS = 10          # busiest links exported one by one (all of them would be ~10^4 series)
STEP_FLUSH = 4096       # engine steps recorded before they are folded into the histogram (assumption: ~1 s of steps)


def token_buckets(max_model_len: int) -> tuple:
    """vLLM's request-token buckets: 1, 2, 5, 10, 20, 50, ... up to the context limit (build_1_2_5_buckets)."""
    out, e = [], 0
    while True:
        for m in (1, 2, 5):
            if m * 10 ** e > max_model_len:
                return tuple(out)
            out.append(float(m * 10 ** e))
        e += 1


class _Hist:
    """A histogram observed many values at a time (numpy), rendered with the official client's
    HistogramMetricFamily: per engine advance, not per chunk."""

    def __init__(self, name: str, doc: str, buckets: tuple):
        self.name, self.doc, self.bounds = name, doc, np.asarray(buckets, dtype=float)
        self.counts = np.zeros(len(buckets) + 1, dtype=np.int64)
        self.sum = 0.0

    def observe(self, values) -> None:
        v = np.asarray(values, dtype=float)
        if v.size:
            self.counts += np.bincount(np.searchsorted(self.bounds, v, side="left"), minlength=len(self.counts))
            self.sum += float(v.sum())

    def family(self, model: str, f: HistogramMetricFamily | None = None, labels=None) -> HistogramMetricFamily:
        """The family (labelled model_name, or `labels` added to a given family `f`)."""
        if f is None:
            f, labels = HistogramMetricFamily(self.name, self.doc, labels=["model_name"]), [model]
        cum = np.cumsum(self.counts).tolist()
        f.add_metric(labels, [(floatToGoString(b), c) for b, c in zip(self.bounds.tolist(), cum)]
                     + [("+Inf", cum[-1])], self.sum)
        return f


class StepStats:
    """The engine's steps, recorded as it takes them (twin.engine.timing.StepTimes.record): tokens per
    step (prefill batches: the tokens computed; decode steps: the tokens made, MTP's included) and
    MTP's drafts as vLLM's spec-decode counters count them (a draft per sequence per step, `drafts`
    tokens each; accepted per position from the engine's own acceptance draws)."""

    def __init__(self, drafts: int):
        self.drafts = drafts
        self.iteration = _Hist("vllm:iteration_tokens_total", "Tokens per engine step (a prefill batch's computed "
                               "tokens; a decode step's tokens made).", ITERATION_BUCKETS)
        self.steps: list[int] = []
        self.num_drafts = self.draft_tokens = 0
        self.per_pos = np.zeros(drafts, dtype=np.int64)

    def prefill(self, tokens: int) -> None:
        if tokens > 0:
            self._step(tokens)

    def decode(self, n: int, made: int, accepted_per_pos) -> None:
        self._step(made)
        if self.drafts:
            self.num_drafts += n
            self.draft_tokens += n * self.drafts
            self.per_pos += np.asarray(accepted_per_pos, dtype=np.int64)

    def _step(self, tokens: int) -> None:
        self.steps.append(tokens)
        if len(self.steps) >= STEP_FLUSH:
            self.flush()

    def flush(self) -> None:
        self.iteration.observe(self.steps)
        self.steps = []

    def families(self, m: str):
        self.flush()
        yield self.iteration.family(m)
        if not self.drafts:              # (vLLM has these only with a speculative config)
            return
        for name, doc, v in (("vllm:spec_decode_num_drafts", "MTP drafts (one per sequence per decode step).",
                              self.num_drafts),
                             ("vllm:spec_decode_num_draft_tokens", "MTP draft tokens.", self.draft_tokens),
                             ("vllm:spec_decode_num_accepted_tokens", "MTP draft tokens accepted.",
                              int(self.per_pos.sum()))):
            f = CounterMetricFamily(name, doc, labels=["model_name"])
            f.add_metric([m], v)
            yield f
        f = CounterMetricFamily("vllm:spec_decode_num_accepted_tokens_per_pos", "MTP draft tokens accepted, by "
                                "draft position.", labels=["model_name", "position"])
        for pos, v in enumerate(self.per_pos.tolist()):
            f.add_metric([m, str(pos)], v)
        yield f


class _Request:
    __slots__ = ("arrival", "input", "output", "reason", "made", "first", "last")

    def __init__(self, arrival, inp, out):
        self.arrival, self.input, self.output = arrival, inp, out
        self.reason = "length" if out is not None else "stop"
        self.made, self.first, self.last = 0, None, None


class ServeMetrics:
    """The served requests' series, kept in the engine process from its own events (the single source
    of truth for every HTTP worker), plus the gauges read from the engine at scrape time."""

    def __init__(self, model: str, max_model_len: int, drafts: int = 0):
        self.model = model
        self.open: dict[int, _Request] = {}
        self.steps = StepStats(drafts)
        tokens = token_buckets(max_model_len)
        self.hist = {k: _Hist(*v) for k, v in {
            "ttft": ("vllm:time_to_first_token_seconds", "Time to first token (s).", TTFT_BUCKETS),
            "itl": ("vllm:inter_token_latency_seconds", "Time between streamed chunks (s; one per decode step, MTP "
                    "tokens included).", ITL_BUCKETS),
            "tpot": ("vllm:time_per_output_token_seconds", "Same as inter_token_latency (vLLM V0 name).", ITL_BUCKETS),
            "tpot_req": ("vllm:request_time_per_output_token_seconds", "A finished request's decode time over its "
                         "output tokens after the first (0 for one token).", ITL_BUCKETS),
            "e2e": ("vllm:e2e_request_latency_seconds", "Arrival to last token (s).", E2E_BUCKETS),
            "queue": ("vllm:request_queue_time_seconds", "Arrival to prefill start (s).", E2E_BUCKETS),
            "prefill": ("vllm:request_prefill_time_seconds", "Prefill start to first token (s).", E2E_BUCKETS),
            "decode": ("vllm:request_decode_time_seconds", "First token to last (s).", E2E_BUCKETS),
            "inference": ("vllm:request_inference_time_seconds", "Prefill start to last token (s).", E2E_BUCKETS),
            "prompt_len": ("vllm:request_prompt_tokens", "Prompt tokens per request.", tokens),
            "gen_len": ("vllm:request_generation_tokens", "Output tokens per request.", tokens),
            "max_gen": ("vllm:request_max_num_generation_tokens", "Output tokens per request (one sequence per "
                        "request).", tokens),
            "max_tokens": ("vllm:request_params_max_tokens", "max_tokens asked (or drawn).", tokens)}.items()}
        self.count = dict.fromkeys(("prompt", "gen", "queries", "hits"), 0)
        self.success: dict[str, int] = dict.fromkeys(FINISH_REASONS, 0)
        self.rejected: dict[str, int] = defaultdict(int)
        self.http_count: dict[tuple, int] = defaultdict(int)      # (handler, method, status class) -> requests
        self.http_time: dict[tuple, _Hist] = {}                    # (handler, method) -> durations

    def arrived(self, key: int, arrival: float, input_tokens: int, output_tokens: int | None) -> None:
        self.open[key] = _Request(arrival, input_tokens, output_tokens)

    def aborted(self, key: int) -> None:
        """Its client went away (vLLM counts such a request under finished_reason "abort")."""
        if self.open.pop(key, None) is not None:
            self.success["abort"] += 1

    def events(self, events: list) -> None:
        """One advance's events (engine_proc: (key, t, tokens so far, end[, extra])): a few dict
        look-ups per event, the histograms observed once for the whole advance."""
        ttft, gaps, done = [], [], []
        for key, t, made, end, *extra in events:
            r = self.open.get(key)
            if r is None:
                continue
            if end == "admitted":
                if extra:
                    r.output = extra[0]
            elif end == "times":
                done.append((r, extra[0]))
                del self.open[key]
            elif end and end != "stop":
                self.rejected[end] += 1
                if end in ERROR_ENDS:
                    self.success["error"] += 1
                del self.open[key]
            elif made > r.made:
                self.count["gen"] += made - r.made
                r.made = made
                if r.first is None:
                    r.first = t
                    ttft.append(t - r.arrival)
                else:
                    gaps.append(t - r.last)
                r.last = t
        self.hist["ttft"].observe(ttft)
        self.hist["itl"].observe(gaps)
        self.hist["tpot"].observe(gaps)
        if done:
            self._finished(done)

    def _finished(self, done: list) -> None:
        rows = []
        for r, (start, _end_prefill, cached) in done:
            first = r.first if r.first is not None else r.last
            rows.append((r.last - r.arrival, max(start - r.arrival, 0.0), max(first - start, 0.0),
                         max(r.last - first, 0.0), max(r.last - start, 0.0), r.input, r.output,
                         max(r.last - first, 0.0) / (r.made - 1) if r.made > 1 else 0.0))
            self.count["prompt"] += r.input
            self.count["queries"] += r.input
            self.count["hits"] += cached
            self.success[r.reason] += 1
        cols = np.array(rows, dtype=float).T
        for name, col in zip(("e2e", "queue", "prefill", "decode", "inference", "prompt_len"), cols):
            self.hist[name].observe(col)
        for name in ("gen_len", "max_gen", "max_tokens"):
            self.hist[name].observe(cols[6])
        self.hist["tpot_req"].observe(cols[7])

    def http(self, rows: list) -> None:
        """HTTP requests a worker served since it last said: (handler, method, status class, seconds)."""
        for handler, method, status, seconds in rows:
            self.http_count[(handler, method, status)] += 1
            h = self.http_time.get((handler, method))
            if h is None:
                h = self.http_time[(handler, method)] = _Hist("http_request_duration_seconds", "", HTTP_BUCKETS)
            h.observe((seconds,))

    def collect(self, eng, pace: float, late: int):
        m = self.model
        yield from (h.family(m) for h in self.hist.values())
        for key, name, doc in (("prompt", "vllm:prompt_tokens", "Prompt tokens of finished requests."),
                               ("gen", "vllm:generation_tokens", "Output tokens streamed."),
                               ("queries", "vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix (EMS) cache."),
                               ("hits", "vllm:prefix_cache_hits", "Prompt tokens the prefix (EMS) cache served.")):
            f = CounterMetricFamily(name, doc, labels=["model_name"])
            f.add_metric([m], self.count[key])
            yield f
        for name, doc, label, d in (("vllm:request_success", "Finished requests by finish reason.", "finished_reason",
                                     self.success),
                                    ("twin:requests_rejected", "Requests the twin refused, by reason.", "reason",
                                     self.rejected)):
            f = CounterMetricFamily(name, doc, labels=["model_name", label])
            for k, v in d.items():
                f.add_metric([m, k], v)
            yield f
        f = CounterMetricFamily("vllm:prompt_tokens_by_source", "Prompt tokens of finished requests by source "
                                "(the prefix cache is EMS; the twin has no KV connector).",
                                labels=["model_name", "source"])
        for source, v in zip(PROMPT_SOURCES, (self.count["prompt"] - self.count["hits"], self.count["hits"], 0)):
            f.add_metric([m, source], v)
        yield f
        yield from self.steps.families(m)
        f = CounterMetricFamily("http_requests", "HTTP requests by handler, method and status class.",
                                labels=["handler", "method", "status"])
        for key, v in self.http_count.items():
            f.add_metric(list(key), v)
        yield f
        f = HistogramMetricFamily("http_request_duration_seconds", "HTTP request duration until its response's "
                                  "last byte (s).", labels=["handler", "method"])
        for key, h in self.http_time.items():
            h.family(m, f, list(key))
        yield f
        g = engine_gauges(eng)
        f = CounterMetricFamily("vllm:num_preemptions", "Requests a fault sent back through the scheduler (their "
                                "work redone), vLLM's preemptions.", labels=["model_name"])
        f.add_metric([m], g["preempted"])
        yield f
        yield from _gauges(g, m, pace, late)

    def render(self, eng, pace: float = 1.0, late: int = 0) -> bytes:
        """The exposition text of all series (called in the engine process, once per scrape)."""
        series = list(self.collect(eng, pace, late))

        class _Once:
            def collect(self):
                return series
        r = CollectorRegistry()
        r.register(_Once())
        return generate_latest(r)


def _gauges(g: dict, m: str, pace: float, late: int):
    """Gauges of the whole twin (background traffic included), from `engine_gauges()`."""
    for name, doc, value in (
            ("vllm:num_requests_running", "Requests in prefill or decode.", g["running"]),
            ("vllm:num_requests_waiting", "Requests queued for prefill or decode, or whose KV is on its way to "
             "decode.", g["waiting"] + g["deferred"]),
            ("vllm:num_requests_swapped", "Always 0: the twin never swaps KV to host memory.", 0),
            ("vllm:kv_cache_usage_perc", "KV cache reserved on the decode dies (0-1).", g["kv"]),
            ("vllm:gpu_cache_usage_perc", "Same as kv_cache_usage_perc (vLLM V0 name).", g["kv"]),
            ("vllm:cpu_cache_usage_perc", "EMS DRAM in use (0-1), the twin's host-memory KV tier.",
             g["ems_dram_frac"])):
        f = GaugeMetricFamily(name, doc, labels=["model_name"])
        f.add_metric([m], float(value))
        yield f
    f = GaugeMetricFamily("vllm:num_requests_waiting_by_reason", "Waiting requests by reason: capacity (queued "
                          "for a prefill or decode instance), deferred (KV on its way to decode).",
                          labels=["model_name", "reason"])
    f.add_metric([m, "capacity"], float(g["waiting"]))
    f.add_metric([m, "deferred"], float(g["deferred"]))
    yield f
    yield _family("twin:sim_pace", "Sim seconds per wall second (1: real time).", [], [((), pace)])
    yield _family("twin:sim_time_seconds", "Sim time of the served twin.", [], [((), g["sim_time"])])
    yield _family("twin:events_late", "Token events known only after their send time (engine behind).",
                  [], [((), late)])
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
    deferred = sum(len(ids) for d in eng.decode for _at, ids in d.inbox)
    fm = eng.faults
    preempted = sum(t["requeued"] for t in fm.totals.values()) + sum(f.requeued for f in fm.faults)
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
    return {"running": max(eng.req.in_flight - waiting - deferred, 0), "waiting": waiting, "deferred": deferred,
            "preempted": preempted, "kv": kv,
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
