"""A region run: the global router and the window loop over the supernodes' engines.

Time advances in windows of `window_s`. At each window edge the driver (1) lands the faults due
(a supernode lost: its requests come back and are routed again; a link down or up), (2) routes
the arrivals of the next window, each request by the policy on the loads as of this edge plus what
it has routed since, (3) with cache reuse "fetch", models each prefix fetch from the supernode
holding it, and (4) sends every group its supernodes' arrivals and advances all to the window's
end. Arrival times are exact whatever the window; only the router's picture of the loads (and
fetched blocks, which land in the taker's EMS at the edge) is up to one window old.

Prefix fetch model: a request routed to supernode s whose prompt's leading blocks another live
supernode h holds further (by the router's index) fetches the missing ones from h over the link
h -> s: the link carries one fetch at a time at the region's `link_gbps` (a FIFO queue per
direction), and the request reaches s when its fetch is done plus `link_latency_us`. s's TTFT
counts from that moment; the regional report gives the fetch delays apart.
"""
from __future__ import annotations

import math
import pickle
import re
import time

import numpy as np

from twin.engine.metrics import LogHistogram
from twin.engine.scenario import load_scenario
from twin.engine.source import ARRIVAL_TICK_S, Batch, concat, make_source
from twin.region.routing import View, make
from twin.region.spec import RegionSpec
from twin.region.workers import InProcess, OnDask, partition

CACHE_REUSE = ("off", "fetch")
SESSIONS = 2000        # assumption: the region's users, each request from one drawn uniformly (session affinity)
_FAULT = re.compile(r"^(supernode):(\d+)@([0-9.eE+-]+)$|^(link):(\d+)-(\d+)@([0-9.eE+]+?)(?:\+([0-9.eE+]+))?$")


def parse_fault(text: str, size: int, duration_s: float) -> dict:
    """'supernode:I@T' (lost at T for the rest of the run) or 'link:I-J@T[+D]' (the link between I
    and J down from T, for D seconds or the rest of the run)."""
    allowed = ("allowed supernode:I@T or link:I-J@T[+D] with supernode indices 0.."
               f"{size - 1}, 0 <= T < duration ({duration_s:g} s), D > 0")
    m = _FAULT.match(text.strip())
    if not m:
        raise ValueError(f"--fail {text!r}: {allowed}")
    try:
        if m.group(1):
            f = {"kind": "supernode", "targets": (int(m.group(2)),), "at_s": float(m.group(3)), "for_s": math.inf}
        else:
            f = {"kind": "link", "targets": (int(m.group(5)), int(m.group(6))), "at_s": float(m.group(7)),
                 "for_s": float(m.group(8)) if m.group(8) else math.inf}
    except ValueError:
        raise ValueError(f"--fail {text!r}: {allowed}") from None
    if (any(i >= size for i in f["targets"]) or not 0 <= f["at_s"] < duration_s or not f["for_s"] > 0
            or (f["kind"] == "link" and f["targets"][0] == f["targets"][1])):
        raise ValueError(f"--fail {text!r}: {allowed}")
    return f


def member_seed(seed: int, i: int) -> int:
    """Supernode i's own seed: derived from the region's seed and its index (a live twin takes it)."""
    return int(np.random.SeedSequence([seed, i]).generate_state(1)[0] % 2**31)


def _sessions(first: int, n: int, seed: int) -> np.ndarray:
    """Session of requests first..first+n-1: a fixed hash of (seed, index), so the same requests
    get the same sessions whatever the window."""
    x = (np.arange(first, first + n, dtype=np.uint64) + np.uint64(seed) * np.uint64(1_000_003))
    x *= np.uint64(11400714819323198485)
    return ((x >> np.uint64(33)) % np.uint64(SESSIONS)).astype(np.int64)


class Region:
    """One region run: the router, the window loop, the faults; `run()` returns the report."""

    def __init__(self, spec: RegionSpec, duration_s: float, seed: int = 0, load: float | None = None,
                 policy: str = "least-load", cache_reuse: str = "off", window_s: float = 1.0,
                 faults: tuple = (), workers: int | None = None, scheduler: str | None = None,
                 distributed: bool = True):
        if cache_reuse not in CACHE_REUSE:
            raise ValueError(f"cache reuse {cache_reuse!r}: allowed {', '.join(CACHE_REUSE)}")
        ticks = window_s / ARRIVAL_TICK_S
        if not (0 < window_s <= 60 and abs(ticks - round(ticks)) < 1e-6):
            raise ValueError(f"--window = {window_s!r}: allowed a multiple of the arrival tick "
                             f"({ARRIVAL_TICK_S:g} s) from {ARRIVAL_TICK_S:g} to 60 s")
        if workers is not None and not 1 <= workers <= spec.size:
            raise ValueError(f"--workers = {workers}: allowed 1..{spec.size} (one group of supernodes per worker)")
        self.router = make(policy)
        self.spec, self.duration, self.seed, self.window = spec, duration_s, seed, window_s
        self.cache_reuse = cache_reuse
        self.faults = sorted(faults, key=lambda f: f["at_s"])
        if len({f["targets"][0] for f in self.faults if f["kind"] == "supernode"}) >= spec.size:
            raise ValueError("--fail: every supernode would be lost; allowed at most "
                             f"{spec.size - 1} supernode fault(s) in a region of {spec.size}")
        k = spec.size
        groups = workers or (k if scheduler else 1)
        seeds = [member_seed(seed, i) for i in range(k)]
        parts = [{i: (spec.scenario, spec.deployments[i], seeds[i], duration_s) for i in r}
                 for r in partition(k, groups)]
        self.where = [g for g, r in enumerate(partition(k, groups)) for _ in r]
        self.pool = OnDask(parts, workers, scheduler) if distributed else InProcess(parts)
        info: dict[int, dict] = {}
        try:
            for part in self.pool.call("info", [()] * len(parts)):
                info.update(part)
        except BaseException:
            self.pool.close()
            raise
        self.info = [info[i] for i in range(k)]
        self.view = View(np.array([m["capacity_rps"] for m in self.info]))
        sc = load_scenario(spec.scenario, seed=seed, duration_s=duration_s)
        rate = (sc.rate * k if sc.rate else (load if load is not None else sc.load) * float(self.view.capacity.sum()))
        self.rate = rate
        self.source = make_source(load_scenario(spec.scenario, seed=seed, duration_s=duration_s, rate=rate))
        self.link_up = np.ones((k, k), dtype=bool)
        self.link_free = np.zeros((k, k))         # when each direction's fetch queue empties
        self.later: list[tuple] = []              # fetched requests reaching their supernode after this window
        self.link_faults: list[dict] = []         # each link fault as it landed: down (and up) at window edges
        self.arrived = 0
        self.moved = {"out": 0, "in": 0}
        self.routed = np.zeros(k, dtype=np.int64)
        self.fetch = {"requests": 0, "blocks": 0, "bytes": 0.0, "delay_s": 0.0, "max_delay_s": 0.0}
        self.stats = {"windows": 0, "wait_s": 0.0, "busy_s": 0.0, "sent_bytes": 0, "reply_bytes": 0,
                      "route_s": 0.0}

    # ---- faults ------------------------------------------------------------------------------------
    def _land_faults(self, t: float) -> list[tuple]:
        """Faults due by the edge at `t`; returns the requests taken back from lost supernodes. A link
        fault is logged as it lands (the report's `link_faults`: asked at/for, down and up again at
        the window edges that applied them; up None while it stays down to the end of the arrivals)."""
        back = []
        while self.faults and self.faults[0]["at_s"] <= t + 1e-9:
            f = self.faults.pop(0)
            if f["kind"] == "link":
                i, j = f["targets"]
                up = f.get("recovery", False)
                self.link_up[i, j] = self.link_up[j, i] = up
                if up:
                    f["entry"]["up_s"] = t
                    continue
                entry = {"link": [i, j], "at_s": f["at_s"], "for_s": f["for_s"] if math.isfinite(f["for_s"]) else None,
                         "down_s": t, "up_s": None}
                self.link_faults.append(entry)
                if math.isfinite(f["for_s"]):
                    self.faults.append({**f, "at_s": f["at_s"] + f["for_s"], "recovery": True, "entry": entry})
                    self.faults.sort(key=lambda x: x["at_s"])
                continue
            s = f["targets"][0]
            if not self.view.up[s]:
                continue
            self.view.up[s] = False
            taken = self.pool.call_one(self.where[s], "fail", (s,))
            n = len(taken["arrival"])
            self.moved["out"] += n
            ptr = taken["ptr"].tolist()
            back += [(t, int(taken["input"][r]), int(taken["output"][r]),
                      taken["ids"][ptr[r]:ptr[r + 1]].tolist(), -1) for r in range(n)]
        return back

    # ---- routing -----------------------------------------------------------------------------------
    def _route(self, reqs: list[tuple], end: float):
        """Route (arrival, input, output, blocks, session) requests; returns per supernode the
        pushes for this window and the blocks fetched into its EMS."""
        view, k = self.view, self.spec.size
        lists: list[list] = [[] for _ in range(k)]
        stores: list[list] = [[] for _ in range(k)]
        for a, inp, out, blocks, session in reqs:
            s = self.router.choose(view, blocks, session)
            if self.cache_reuse == "fetch" and blocks:
                a = self._fetch(s, a, blocks, stores[s])
            view.sent[s] += 1
            view.index.add(s, blocks)
            self.routed[s] += 1
            if a < end:
                lists[s].append((a, inp, out, blocks))
            else:
                self.later.append((a, inp, out, blocks, s))
        keep = []
        for item in self.later:
            if item[0] < end:
                lists[item[4]].append(item[:4])
            else:
                keep.append(item)
        self.later = keep
        return lists, stores

    def _fetch(self, s: int, a: float, blocks: list[int], store: list) -> float:
        """The request's arrival at s after fetching the prefix blocks another supernode holds
        further than s (the longest holder; ties the lowest index), or `a` when none does."""
        idx, view = self.view.index, self.view
        have = idx.lead(s, blocks)
        best, most = -1, have
        for h in range(self.spec.size):
            if h != s and view.up[h] and self.link_up[h, s]:
                n = idx.lead(h, blocks)
                if n > most:
                    best, most = h, n
        if best < 0:
            return a
        nbytes = (most - have) * self.info[best]["block_bytes"]
        start = max(a, self.link_free[best, s])
        done = start + nbytes * 8 / (self.spec.link_gbps * 1e9)
        self.link_free[best, s] = done
        ready = done + self.spec.link_latency_us * 1e-6
        store.extend(blocks[have:most])
        f = self.fetch
        f["requests"] += 1
        f["blocks"] += most - have
        f["bytes"] += nbytes
        f["delay_s"] += ready - a
        f["max_delay_s"] = max(f["max_delay_s"], ready - a)
        return ready

    @staticmethod
    def _batch(items: list[tuple]) -> tuple:
        items.sort(key=lambda x: x[0])           # stable: arrival order, ties as routed
        sizes = [len(x[3]) for x in items]
        return (np.array([x[0] for x in items], dtype=float), np.array([x[1] for x in items], dtype=np.int64),
                np.array([x[2] for x in items], dtype=np.int64),
                np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                np.array([b for x in items for b in x[3]], dtype=np.int64))

    # ---- the loop ----------------------------------------------------------------------------------
    def run(self, drain_cap: float | None = None, progress=None) -> dict:
        """The report; `progress(windows done)` is called after each window (a page's job reads it)."""
        c0, w0 = time.process_time(), time.perf_counter()
        t = 0.0
        while t < self.duration - 1e-9:
            end = min(t + self.window, self.duration)
            reqs = self._land_faults(t)
            self.moved["in"] += len(reqs)
            batch = self.source.take(end)
            if batch is not None and not self._vectorised():
                sess = _sessions(self.arrived, len(batch), self.seed)
                ptr, ids = batch.ptr.tolist(), batch.ids
                reqs += [(float(batch.arrival[r]), int(batch.input[r]), int(batch.output[r]),
                          ids[ptr[r]:ptr[r + 1]].tolist(), int(sess[r])) for r in range(len(batch))]
                self.arrived += len(batch)
                batch = None
            self._window(end, reqs, batch)
            t = end
            if progress is not None:
                progress(self.stats["windows"])
        if self.later:     # fetches done after the last edge: their requests still reach their supernode
            self._window(max(x[0] for x in self.later) + ARRIVAL_TICK_S, [])
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        parts = self.pool.call("finish", [(drain_cap,)] * len(self.pool.groups))
        self.stats["finish_s"] = time.perf_counter() - w0 - wall
        return self._report(parts, drain_cap, wall, cpu)

    def _vectorised(self) -> bool:
        """Whether a window's arrivals are routed as arrays (the policy assigns many at once and
        no fetch needs a look at each prompt): the same choices, without a Python step each."""
        return self.cache_reuse == "off" and getattr(self.router, "assign", None) is not None

    def _assign(self, batch, pushes: dict) -> None:
        """Route a window's arrivals at once (after the requests `pushes` already holds)."""
        who = self.router.assign(self.view, len(batch))
        counts = np.bincount(who, minlength=self.spec.size)
        self.view.sent += counts
        self.routed += counts
        self.arrived += len(batch)
        lens = np.diff(batch.ptr)
        for i in np.flatnonzero(counts).tolist():
            rows = np.flatnonzero(who == i)
            n = lens[rows]
            ptr = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
            ids = batch.ids[np.repeat(batch.ptr[rows] - ptr[:-1], n) + np.arange(ptr[-1])]
            mine = Batch(batch.arrival[rows], batch.input[rows], batch.output[rows], ptr, ids)
            b = concat([Batch(*pushes[i]), mine]) if i in pushes else mine
            pushes[i] = (b.arrival, b.input, b.output, b.ptr, b.ids)

    def _window(self, end: float, reqs: list[tuple], batch=None) -> None:
        """Route `reqs` (then `batch`, as arrays), send every group its supernodes' share,
        advance all to `end`, read the loads."""
        r0 = time.process_time()
        lists, stores = self._route(reqs, end)
        pushes = {i: self._batch(x) for i, x in enumerate(lists) if x}
        if batch is not None:
            self._assign(batch, pushes)
        self.stats["route_s"] += time.process_time() - r0
        args = [(end, {i: pushes[i] for i in r if i in pushes},
                 {i: np.array(stores[i], dtype=np.int64) for i in r if stores[i]}) for r in self._parts()]
        st = self.stats
        st["sent_bytes"] += sum(len(pickle.dumps(a, protocol=5)) for a in args)
        t1 = time.perf_counter()
        replies = self.pool.call("window", args)
        st["wait_s"] += time.perf_counter() - t1
        st["busy_s"] += max(b for _, b in replies)
        st["reply_bytes"] += sum(len(pickle.dumps(r, protocol=5)) for r in replies)
        st["windows"] += 1
        load = self.view.base.copy()
        for loads, _ in replies:
            for i, v in loads.items():
                load[i] = v
        self.view.edge(load)

    def round_trip_ms(self, n: int = 20) -> float:
        """A call to every group that does nothing, timed: the exchange's floor per window."""
        t0 = time.perf_counter()
        for _ in range(n):
            self.pool.call("ping", [()] * len(self.pool.groups))
        return round(1e3 * (time.perf_counter() - t0) / n, 3)

    def _parts(self) -> list[range]:
        return partition(self.spec.size, len(self.pool.groups))

    # ---- the report --------------------------------------------------------------------------------
    def _report(self, parts: list[dict], drain_cap, wall: float, cpu: float) -> dict:
        members: dict[int, dict] = {}
        for p in parts:
            members.update(p)
        per, ttft, tpot = [], [], []
        tot = {"completed": 0, "rejected": 0, "timed_out": 0, "in_flight": 0}
        out_tokens, sim_end = 0.0, 0.0
        for i in range(self.spec.size):
            m = members[i]
            s, a = m["summary"], m["summary"]["requests"]
            for key in ("completed", "rejected", "timed_out"):
                tot[key] += a[key]
            if m["failed_at"] is None:
                tot["in_flight"] += a["in_flight"]
            ttft.append(m["ttft"])
            tpot.append(m["tpot"])
            out_tokens += m["output_tokens"]
            sim_end = max(sim_end, s["sim_seconds"])
            per.append({"supernode": i, "deployment": self.info[i]["deployment"], "system": self.info[i]["system"],
                        "npus": self.info[i]["npus"], "capacity_rps": round(self.info[i]["capacity_rps"], 2),
                        "status": "up" if m["failed_at"] is None else "failed",
                        "failed_at_s": m["failed_at"], "routed": int(self.routed[i]),
                        "throughput_rps": round(a["completed"] / max(s["sim_seconds"], 1e-9), 3),
                        "requests": a, "ttft_ms": s["ttft_ms"], "tpot_ms": s["tpot_ms"],
                        "cache": s["cache"], **({"drain": s["drain"]} if "drain" in s else {}),
                        "worker_cpu_s": m["group_cpu_s"]})
        accounted = tot["completed"] + tot["rejected"] + tot["timed_out"] + tot["in_flight"]
        drained = drain_cap is not None
        audit = {"arrived": self.arrived, **tot, "moved": dict(self.moved),
                 "lost": self.arrived - accounted + (tot["in_flight"] if drained else 0)}
        audit["conserved"] = (self.arrived == accounted and all(
            p["requests"]["conserved"] for p in per if p["status"] == "up"))
        st = self.stats
        n = max(st["windows"], 1)
        return {
            "region": self.spec.name, "scenario": self.spec.scenario, "seed": self.seed,
            "policy": self.router.name, "cache_reuse": self.cache_reuse, "window_s": self.window,
            "workers": self.pool.workers, "groups": len(self.pool.groups),
            "rate_rps": round(self.rate, 3), "duration_s": self.duration, "sim_seconds": round(sim_end, 3),
            "regional": {
                "requests": audit,
                "throughput_rps": round(tot["completed"] / max(sim_end, 1e-9), 3),
                "output_tokens_per_s": round(out_tokens / max(sim_end, 1e-9), 1),
                "ttft_ms": _pcts(ttft), "tpot_ms": _pcts(tpot),
                "fetch": {**self.fetch, "bytes": round(self.fetch["bytes"]),
                          "mean_delay_ms": round(1e3 * self.fetch["delay_s"] / self.fetch["requests"], 3)
                          if self.fetch["requests"] else None,
                          "delay_s": round(self.fetch["delay_s"], 6), "max_delay_s": round(self.fetch["max_delay_s"], 6),
                          "link_gbps": self.spec.link_gbps, "link_latency_us": self.spec.link_latency_us},
            },
            "supernodes": per,
            "link_faults": [dict(f) for f in self.link_faults],
            "cost": {"wall_s": round(wall, 3), "finish_wall_s": round(st["finish_s"], 3), "driver_cpu_s": round(cpu, 3), "windows": st["windows"],
                     "exchange_ms_per_window": round(1e3 * (st["wait_s"] - st["busy_s"]) / n, 3),
                     "route_ms_per_window": round(1e3 * st["route_s"] / n, 3),
                     "round_trip_ms": self.round_trip_ms(),
                     "sent_bytes_per_window": round(st["sent_bytes"] / n), "reply_bytes_per_window":
                     round(st["reply_bytes"] / n)},
        }


def _pcts(hists: list[LogHistogram]) -> dict:
    """Regional percentiles from the supernodes' sketches (the same bins: counts add exactly)."""
    h = LogHistogram()
    for x in hists:
        h.counts += x.counts
        h.n += x.n
    q = lambda p: None if h.n == 0 else round(h.quantile(p / 100), 3)
    return {"p50": q(50), "p99": q(99)}


def run_region(spec: RegionSpec, duration_s: float, drain_cap: float | None = None, progress=None, **kw) -> dict:
    reg = Region(spec, duration_s, **kw)
    try:
        return reg.run(drain_cap, progress)
    finally:
        reg.pool.close()
