"""Fixed-cadence metrics: counters accumulated by the engine, closed once per interval of sim time.

The engine adds to plain counters on its hot path; `close()` turns them into one row of history
(rates, percentiles of the requests that finished in the interval, utilisation, traffic) and
resets them. History is bounded, so a live run can go on for days; run-long TTFT / TPOT
percentiles come from fixed-size log histograms (`LogHistogram`), exact counts from counters.
"""
from __future__ import annotations

import math
from collections import deque

import numpy as np

from twin.model.rules import slo_met
from twin.engine.requests import RequestTable
from twin.engine.snapshot import HISTORY_KEYS

KPI_WINDOW = 10   # intervals the live KPIs average over (assumption: 10 s at the default 1 s interval)
HIT_WINDOW = 90   # intervals of finishes behind each "TTFT with / without a hit" point (assumption:
#                   on the default run a shorter window draws the cold start, when the only "hits" are
#                   short prompts half made of the shared system prompt, queued behind the first burst)
HIT_MIN = 50      # finishes of the kind a point needs in that window, else none is drawn (assumption)


class LogHistogram:
    """Counts in log-spaced bins (the DDSketch mapping over a fixed range): any quantile of any
    number of values within `rel` relative error, in fixed memory.

    Bin k >= 1 holds values in (lo * g^(k-1), lo * g^k] with g = (1 + rel) / (1 - rel) and reports
    2 lo g^k / (g + 1), so every value in the bin is within `rel` of it. Values <= lo fall in bin 0
    (reported as lo), values above hi in the last bin. The quantile q is the value of rank
    floor(q * (n - 1)) in sorted order (no interpolation between neighbours)."""

    def __init__(self, rel: float = 0.005, lo: float = 1e-3, hi: float = 1e9):
        self.rel, self.lo = rel, lo
        self.gamma = (1 + rel) / (1 - rel)
        self._lg = math.log(self.gamma)
        self.counts = np.zeros(int(math.ceil(math.log(hi / lo) / self._lg)) + 2, dtype=np.int64)
        self.n = 0

    def add(self, values) -> None:
        self.add_bins(self.bins(values))

    def bins(self, values) -> np.ndarray:
        """The bin of each finite value (kept by a rolling window to take its values out again):
        ceil(log(max(x, lo) / lo) / log(g)), worked in place in one temporary (every interval's
        TTFTs and TPOTs go through it)."""
        x = np.asarray(values, dtype=float)
        finite = np.isfinite(x)
        if not finite.all():
            x = x[finite]
        k = np.maximum(x, self.lo)
        k /= self.lo
        np.log(k, out=k)
        k /= self._lg
        np.ceil(k, out=k)
        k = k.astype(np.int64)
        return np.minimum(k, len(self.counts) - 1, out=k)

    def add_bins(self, k: np.ndarray, sign: int = 1) -> None:
        """Count (or, with sign -1, uncount) values by bin: an unbuffered add of the few hundred
        bins an interval brings, not a bincount and a sum over all of them."""
        np.add.at(self.counts, k, sign)
        self.n += sign * len(k)

    def merged(self, values) -> "LogHistogram":
        out = LogHistogram.__new__(LogHistogram)
        out.__dict__.update(self.__dict__, counts=self.counts.copy())
        out.add(values)
        return out

    def quantile(self, q: float) -> float | None:
        if not self.n:
            return None
        k = int(self.counts.cumsum().searchsorted(math.floor(q * (self.n - 1)), side="right"))
        return self.lo if k == 0 else 2 * self.lo * self.gamma ** k / (self.gamma + 1)


def percentiles(a: np.ndarray, qs: tuple) -> list:
    """np.percentile(a, qs) (its default linear method) from one sort and numpy's own arithmetic
    (index (n - 1) q, and its two-sided interpolation): the same floats in a fraction of the time
    for an interval's few hundred values (np.percentile was ~40% of closing an interval). Arrays
    with NaN or infinities, or none at all, go to np.percentile itself."""
    if not len(a) or not np.isfinite(a).all():
        return np.percentile(a, qs).tolist() if len(a) else [float("nan")] * len(qs)
    s = np.sort(a).tolist()
    n, out = len(s), []
    for q in qs:
        vi = (n - 1) * (q / 100)
        if vi >= n - 1:
            out.append(s[-1])
            continue
        lo = math.floor(vi)
        t, prev, nxt = vi - lo, s[lo], s[lo + 1]
        d = nxt - prev
        out.append(nxt - d * (1 - t) if t >= 0.5 else prev + d * t)
    return out


def _mean(a: np.ndarray) -> float:
    """a.mean() of a float array (numpy's own sum over the count) without its Python wrapper."""
    return float(np.add.reduce(a) / len(a))


def latency(req: RequestTable, rows: np.ndarray, ctx: dict) -> tuple:
    """TTFT and TPOT (ms) of finished requests (their rows in the window: every column read
    once), whether each met both SLOs, and their output tokens."""
    first, out = req.first_token.a[rows], req.output.a[rows]
    ttft = (first - req.arrival.a[rows]) * 1e3
    tpot = (req.finish.a[rows] - first) / np.maximum(out - 1, 1) * 1e3
    ok = slo_met(ttft, tpot, out, ctx["ttft_slo_ms"], ctx["tpot_slo_ms"])
    return ttft, tpot, ok, out


class Interval:
    """Counters of the interval in progress."""

    def __init__(self, n_nodes: int, n_instances: int):
        self.input_tokens = 0.0          # prompt tokens prefilled (computed + loaded from cache)
        self.output_tokens = 0.0
        self.lookups_blocks = 0
        self.hit_blocks = 0
        self.lookup_tokens = 0
        self.hit_tokens = 0
        self.hit_requests = 0
        self.cache_bytes = 0.0           # KV bytes loaded from EMS
        self.plane_bytes = {"ub": 0.0, "rdma": 0.0, "vpc": 0.0}
        self.traffic = None              # () -> (UB bytes node x node, row = source; RDMA bytes out
        #                                  of, into each node), from Accounting.flush; None: none
        self.busy = [0.0] * n_instances      # busy seconds per instance (prefill first, then decode;
        #                                      a list: one Python float add per batch or step)
        self.finished: list[np.ndarray] = []
        self.batch_samples = 0.0
        self.batch_steps = 0


class Metrics:
    def __init__(self, n_nodes: int, n_prefill: int, n_decode: int, interval_s: float,
                 history_len: int = 900, split_nodes: bool = False):
        self.interval_s = interval_s
        self.split_nodes = split_nodes    # a GPU cluster: each close says how much scale-up traffic left its node
        self.n_nodes, self.n_prefill, self.n_decode = n_nodes, n_prefill, n_decode
        self.cur = Interval(n_nodes, n_prefill + n_decode)
        self.history = {k: deque(maxlen=history_len) for k in HISTORY_KEYS}
        self._append = [(k, self.history[k].append) for k in HISTORY_KEYS]   # a close adds to each
        self._last_traffic = None         # the last closed interval's `traffic`, or its GB/s once read
        self.last_plane_gbps = {"ub": 0.0, "rdma": 0.0, "vpc": 0.0}
        self.last_busy = np.zeros(n_prefill + n_decode)
        self.carry = [0.0] * (n_prefill + n_decode)   # busy time that spills into the next interval
        self.recent: deque = deque(maxlen=KPI_WINDOW)   # (ttft ms, tpot ms) of the last intervals' finishes
        self.recent_hit: deque = deque()   # (bins with a hit, bins without) of the last intervals' TTFTs
        self.hit_ttft, self.miss_ttft = LogHistogram(), LogHistogram()   # ... summed over those intervals
        self.totals = {"input_tokens": 0.0, "output_tokens": 0.0, "hit_blocks": 0,
                       "lookup_blocks": 0, "hit_tokens": 0, "lookup_tokens": 0}
        self.ttft = LogHistogram()       # ms, every request finished in a closed interval
        self.tpot = LogHistogram()       # ms, those with more than one output token
        self.slo_met = 0

    def reports(self) -> dict:
        """Snapshot fields: the per-interval series, and the last interval's traffic per plane and node pair."""
        return {"history": lambda: {k: list(v) for k, v in self.history.items()},
                "plane_gbps": lambda: dict(self.last_plane_gbps),
                "node_traffic": lambda: self.last_node_gbps.copy()}

    def run_latency(self, req: RequestTable, ctx: dict) -> dict:
        """Whole-run TTFT / TPOT sketches and SLO count, including the interval in progress."""
        ttft, tpot, ok, out = latency(req, self._finished_rows(req), ctx)
        return {"ttft": self.ttft.merged(ttft), "tpot": self.tpot.merged(tpot[out > 1]),
                "slo_met": self.slo_met + int(ok.sum())}

    def _finished_rows(self, req: RequestTable) -> np.ndarray:
        """Window rows of the requests finished in the interval in progress (compaction runs
        after a close, so they are all in the window)."""
        fin = self.cur.finished
        return req.rows(np.concatenate(fin) if fin else np.zeros(0, dtype=np.int64))

    def add_busy(self, inst: int, start: float, duration: float, interval_end: float) -> None:
        """Credit busy time to this interval and carry what falls after its end (once per batch
        and step: max(0.0, min(duration, left)) as conditionals, the builtins' results exactly)."""
        left = interval_end - start
        inside = left if left < duration else duration
        inside = inside if inside > 0.0 else 0.0
        self.cur.busy[inst] += inside
        self.carry[inst] += duration - inside

    def close(self, now: float, req: RequestTable, ctx: dict) -> dict:
        """Finish the interval ending at `now`; returns the row appended to history."""
        c, dt = self.cur, self.interval_s
        rows = self._finished_rows(req)
        ttft, tpot, ok, out = latency(req, rows, ctx)
        multi = tpot[out > 1]
        k = self.ttft.bins(ttft)        # hit_ttft and miss_ttft share its mapping: binned once
        self.ttft.add_bins(k)
        self.tpot.add(multi)
        n_ok = int(np.count_nonzero(ok))
        self.slo_met += n_ok
        hit = 2 * req.cached.a[rows] >= req.input.a[rows]   # "with a hit": at least half the prompt from EMS
        if len(k) < len(hit):           # NaN or infinite TTFTs have no bin
            hit = hit[np.isfinite(ttft)]
        ttft_p50, ttft_p99 = percentiles(ttft, (50, 99))
        tpot_p50, tpot_p99 = percentiles(tpot, (50, 99))
        util = np.minimum(1.0, np.array(c.busy) / dt)
        counts = req.counts()
        batch = c.batch_samples / c.batch_steps if c.batch_steps else 0.0
        out_npu = c.output_tokens / dt / max(ctx["decode_npus"], 1)
        row = {
            "t": now,
            "input_tps": c.input_tokens / dt, "output_tps": c.output_tokens / dt,
            "input_tps_per_npu": c.input_tokens / dt / max(ctx["prefill_npus"], 1),
            "output_tps_per_npu": out_npu,
            "ttft_p50_ms": ttft_p50, "ttft_p99_ms": ttft_p99,
            "tpot_p50_ms": tpot_p50, "tpot_p99_ms": tpot_p99,
            **self._hit_medians(k, hit),
            "slo_attainment": n_ok / len(ok) if len(ok) else float("nan"),   # = ok.mean(), exactly
            "block_hit_ratio": c.hit_blocks / c.lookups_blocks if c.lookups_blocks else float("nan"),
            "token_hit_ratio": c.hit_tokens / c.lookup_tokens if c.lookup_tokens else float("nan"),
            "ems_dram_gb": ctx["ems_dram_bytes"] / 1e9, "ems_ssd_gb": ctx["ems_ssd_bytes"] / 1e9,
            "ub_bytes_per_hit_mb": c.cache_bytes / c.hit_requests / 1e6 if c.hit_requests else float("nan"),
            "queue_prefill": ctx["queue_prefill"], "queue_decode": ctx["queue_decode"],
            "util_prefill": _mean(util[:self.n_prefill]) if self.n_prefill else 0.0,
            "util_decode": _mean(util[self.n_prefill:]) if self.n_decode else 0.0,
            "decode_batch_per_npu": batch,
            "decode_model_tps_per_npu": ctx["decode_model_tps"](batch) if c.batch_steps else float("nan"),
            "decode_useful": out_npu / ctx["decode_op_tps_per_npu"] if ctx["decode_op_tps_per_npu"] else float("nan"),
            "ub_gbps": c.plane_bytes["ub"] / dt / 1e9, "rdma_gbps": c.plane_bytes["rdma"] / dt / 1e9,
            "vpc_gbps": c.plane_bytes["vpc"] / dt / 1e9,
            "ub_across_gbps": self._across_gbps(c) if self.split_nodes else float("nan"),
            "goodput_tps": float(out[ok].sum()) / dt,
            "finished_output_tps": float(out.sum()) / dt,
            **counts,
        }
        for k, append in self._append:
            append(row[k])
        self.recent.append((ttft, multi))
        self.totals = self.running_totals()
        if not self.split_nodes:        # _across_gbps already spread it
            self._last_traffic = c.traffic
        self.last_busy = util
        self.last_plane_gbps = {k: v / dt / 1e9 for k, v in c.plane_bytes.items()}
        nxt = Interval(self.n_nodes, self.n_prefill + self.n_decode)
        nxt.busy = [min(b, dt) for b in self.carry]
        self.carry = [max(0.0, b - dt) for b in self.carry]
        self.cur = nxt
        return row

    def _across_gbps(self, c: Interval) -> float:
        """Scale-up GB/s between two nodes in the interval `c` (on a GPU cluster: the all-to-all that
        leaves its server, over RDMA): the engine's one scale-up bucket split as the node matrix splits
        it, off its diagonal (the same split as `Snapshot.fabric_gbps`). Spreads the interval's traffic,
        kept as the last interval's."""
        self._last_traffic = c.traffic
        node = self._traffic_gbps()[0]
        total = float(node.sum())
        ub = c.plane_bytes["ub"] / self.interval_s / 1e9
        return ub * (1 - float(np.trace(node)) / total) if total > 0 else 0.0

    @property
    def last_node_gbps(self) -> np.ndarray:
        """UB GB/s between nodes over the last closed interval (row = source node)."""
        return self._traffic_gbps()[0]

    @property
    def last_rdma_gbps(self) -> tuple[np.ndarray, np.ndarray]:
        """RDMA GB/s out of and into each node over the last closed interval."""
        return self._traffic_gbps()[1]

    def _traffic_gbps(self) -> tuple:
        """The last closed interval's traffic in GB/s, computed on its first read (most intervals
        are never drawn: a bench, those between two page updates)."""
        t = self._last_traffic
        if not isinstance(t, tuple):
            n, dt = self.n_nodes, self.interval_s
            node, out, into = t() if t else (np.zeros((n, n)), np.zeros(n), np.zeros(n))
            t = self._last_traffic = (node / dt / 1e9, (out / dt / 1e9, into / dt / 1e9))
        return t

    def _hit_medians(self, bins: np.ndarray, hit: np.ndarray) -> dict:
        """TTFT p50 of finishes with / without a hit over the last HIT_WINDOW intervals, NaN until
        the window is full and with fewer than HIT_MIN of the kind: the cold start never draws a
        crossing, and rare misses under high reuse still give a line. Rolling log histograms (the
        median of rank floor((n-1)/2), within LogHistogram's 0.5%): a window of ~10^5 finishes
        costs a few bin adds per interval, not a sort. `bins`: the interval's TTFTs' bins."""
        add = (bins[hit], bins[~hit])
        self.recent_hit.append(add)
        self.hit_ttft.add_bins(add[0])
        self.miss_ttft.add_bins(add[1])
        if len(self.recent_hit) > HIT_WINDOW:
            gone = self.recent_hit.popleft()
            self.hit_ttft.add_bins(gone[0], -1)
            self.miss_ttft.add_bins(gone[1], -1)
        if len(self.recent_hit) < HIT_WINDOW:
            return {"ttft_hit_p50_ms": float("nan"), "ttft_miss_p50_ms": float("nan")}
        med = lambda h: h.quantile(0.5) if h.n >= HIT_MIN else float("nan")
        return {"ttft_hit_p50_ms": med(self.hit_ttft), "ttft_miss_p50_ms": med(self.miss_ttft)}

    def running_totals(self) -> dict:
        """Totals of the closed intervals plus the one in progress."""
        c, t = self.cur, dict(self.totals)
        t["input_tokens"] += c.input_tokens
        t["output_tokens"] += c.output_tokens
        t["hit_blocks"] += c.hit_blocks
        t["lookup_blocks"] += c.lookups_blocks
        t["hit_tokens"] += c.hit_tokens
        t["lookup_tokens"] += c.lookup_tokens
        return t

    def frame(self):
        import pandas as pd     # lazy: pandas only for frames (the engine's hot path never needs it)
        return pd.DataFrame({k: list(v) for k, v in self.history.items()})

    def window(self, key: str, n: int = KPI_WINDOW) -> float:
        """Mean of the last n intervals, ignoring intervals with no data (NaN)."""
        vals = np.array(list(self.history[key])[-n:], dtype=float)
        vals = vals[~np.isnan(vals)]
        return float(vals.mean()) if len(vals) else float("nan")
