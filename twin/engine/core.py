"""The serving engine: CloudMatrix-Infer on the modelled supernode, as a SimPy simulation.

arrival -> global scheduler (least-loaded prefill instance) -> prefill batch (EMS lookup, compute
the misses, store new blocks) -> KV transfer over RDMA (max-min shared) -> decode continuous
batching (KV capacity, batch cap, TPOT SLO) -> completion.

The engine owns the SimPy environment and the one random generator; `advance()` runs it forward
after applying queued commands at the current sim time, and `snapshot()` returns a read-only copy.
The same seed and command log replay the same run exactly.
"""
from __future__ import annotations

import math
import operator
import queue
from dataclasses import dataclass, field

import numpy as np
import simpy

from ..config import CatalogError, catalog
from ..ems import EMS
from ..metrics import Metrics
from ..perf import NetState, PerfModel
from ..topology import parse, topology
from .faults import UB_KINDS, FaultManager, Policy, check_random, load_fault_file
from .flows import FlowNet
from .pools import DecodeInstance, PrefillInstance
from .requests import DONE, KEEP_ROWS, QUEUED, TRANSFER, RequestTable
from .scenario import Scenario, load_scenario
from .snapshot import Snapshot
from .source import SyntheticSource, TraceSource

ARRIVAL_TICK_S = 0.005    # assumption: the global scheduler assigns new requests every 5 ms
DRAIN_CAP_S = 600.0       # a drain stops after this many simulated seconds (stated bound)
MAX_EVENTS = 200          # events kept for the UI
SNAPSHOT_FAULTS = 20      # fault reports a snapshot carries (the newest, a screenful); the rest as counts
# Prefill step times are memoised per shape bucket: prompt length and tokens per NPU on a geometric
# grid of PREFILL_GRID steps per doubling (a value is at most 2^(1/2048) - 1 = 0.034% from its grid
# point), EMS reuse to the nearest 1/REUSE_GRID. Powers of two and reuse in 1/8ths are grid points
# (exact). tests/test_speed.py measures and prints the step-time error of this rounding. Fixed-length
# workloads hit the memo on almost every batch; varied lengths rarely do, so it is kept bounded.
PREFILL_GRID = 1024
REUSE_GRID = 4096
MEMO_LIMIT = 4096
_QUEUED_TOKENS = operator.attrgetter("queued_tokens")   # the scheduler's key: least-loaded by tokens


class _Environment(simpy.Environment):
    """A SimPy environment that counts the events it processes (for `bench`)."""

    processed = 0

    def step(self) -> None:
        self.processed += 1
        super().step()


@dataclass(frozen=True)
class Command:
    """A change requested from outside the engine thread, applied between advances."""
    kind: str                       # "rate" | "load" | "fault" | "policy" | "random" | "event"
    args: dict = field(default_factory=dict)


class Engine:
    def __init__(self, scenario: str | Scenario | None = "default", seed: int | None = None,
                 **overrides):
        self.scenario = (scenario if isinstance(scenario, Scenario)
                         else load_scenario(scenario, seed=seed, **overrides))
        sc = self.scenario
        self.seed = sc.seed
        self.env = _Environment()
        self.rng = np.random.default_rng(sc.seed)
        self._uniform = np.empty(0)        # MTP acceptance draws (see accepted_tokens)
        self.cat = catalog()
        self.dep = self.cat.deployment(sc.deployment)
        self.system = self.cat.system(self.dep.system)
        self.topo = topology(self.dep.system)
        self.pm = PerfModel(self.dep, self.cat)
        self.net = NetState()
        self.dies_per_node = self.system.npus_per_node * self.pm.dies_per_npu
        self.kv_bytes = self.pm.kv_bytes_per_token()
        self.kv_capacity_tokens = self.pm.kv_capacity_bytes_per_die() / self.kv_bytes
        self.partitioned, self.message = False, ""
        self.req = RequestTable()
        self.keep_rows = KEEP_ROWS        # per-request rows kept in memory (the rest are terminal)
        self.transfers: dict[int, np.ndarray] = {}   # KV transfers under way: key -> request ids
        self._transfer_seq = 0
        self.arrivals_on = True
        self.drained: dict | None = None   # set by drain(): how it ended
        self.commands: queue.Queue[Command] = queue.Queue()
        self.command_log: list[tuple[float, Command]] = []
        self.events: list[dict] = []
        self.version = 0
        self._decode_memo: dict = {}
        self._place_instances()
        self._make_cache()
        self._make_traffic_groups()
        # KV-transfer completions wait for the decode instances' step boundaries while all step
        self.flows = FlowNet(self.env, defer=lambda: all(d.stepping for d in self.decode))
        self._net_event = self.env.event()
        self._set_flow_capacities()
        self.source = self._make_source()
        n_nodes = self.system.nodes
        self.metrics = Metrics(n_nodes, len(self.prefill), len(self.decode), sc.interval_s)
        self.interval_end = sc.interval_s
        self.faults = FaultManager(self)
        if sc.faults:
            spec = load_fault_file(sc.faults)
            self.faults.policy = Policy.load(**spec.get("policy", {}))
            for f in spec.get("fault", []):
                self.faults.inject(f)
            if "random" in spec:
                self.faults.set_random(spec["random"]["hours_per_sim_s"])
        for inst in self.decode:          # prefill instances run on callbacks (pools.py)
            self.env.process(inst.run())
        # decode-only runs with one decode instance admit arrivals lazily: while it steps, it takes
        # them itself at each step boundary (where it would first look at them), so a busy
        # instance costs no event per arrival tick; anything else that looks catches up first
        self.lazy_decode = (self.decode[0] if sc.pipeline == "decode_only" and len(self.decode) == 1
                             else None)
        self._tick_k = 0                  # the next arrival tick not yet run
        self._arrival_proc = self.env.process(self._arrivals())
        self.env.process(self._monitor())
        self.log("start", f"scenario {sc.name}: {sc.description or sc.deployment} (seed {sc.seed})")

    # ---- setup -------------------------------------------------------------------------------
    def _place_instances(self) -> None:
        """Prefill instances take the first nodes, decode the next (the paper uses 32 nodes)."""
        dep, next_die = self.dep, 0
        self.prefill: list[PrefillInstance] = []
        self.decode: list[DecodeInstance] = []
        slot = 0
        for i in range(dep.prefill.instances):
            dies = np.arange(next_die, next_die + dep.prefill.dies_per_instance)
            next_die += len(dies)
            self.prefill.append(PrefillInstance(self, i, slot, dies))
            slot += 1
        for i in range(dep.decode.instances):
            dies = np.arange(next_die, next_die + dep.decode.dies_per_instance)
            next_die += len(dies)
            self.decode.append(DecodeInstance(self, i, slot, dies))
            slot += 1
        if not self.decode or (self.scenario.pipeline == "full" and not self.prefill):
            raise ValueError(f"deployment {self.scenario.deployment}: needs at least one decode "
                             f"instance{' and one prefill instance' if self.scenario.pipeline == 'full' else ''} "
                             f"to serve (allowed: deployments with instances > 0)")
        self.die_pool = [""] * (self.system.nodes * self.dies_per_node)
        for inst in self.prefill + self.decode:
            for d in inst.dies:
                self.die_pool[d] = inst.kind

    def _make_cache(self) -> None:
        sc, dep = self.scenario, self.dep
        cpu = self.cat.chip(self.system.cpu) if self.system.cpu else None
        servers = self.topo.cpu_ids[: dep.ems_nodes * self.system.cpus_per_node]
        self.block_tokens = sc.block_size
        self.ems = None
        if not servers or cpu is None:
            return
        if sc.cache_capacity == "unlimited":
            dram, ssd = None, None
        elif sc.cache_capacity == "default":
            dram = cpu.dram_gb * 1e9 * dep.ems_dram_fraction
            ssd = cpu.ssd_gb * 1e9
        else:
            dram, ssd = float(sc.cache_capacity) / len(servers), 0.0
        self.ems = EMS(list(servers), dram, ssd, self.block_tokens * self.kv_bytes,
                       block_tokens=self.block_tokens)
        self.ems_node = {s: int(s[1:3]) for s in servers}

    def _make_traffic_groups(self) -> None:
        """Traffic is added up between groups of nodes (group = instance slot, or n_slots + node)
        on the hot path, one scalar add per batch, and spread evenly over the groups' node pairs
        once per interval (`_flush_traffic`)."""
        insts, n_nodes = self.prefill + self.decode, self.system.nodes
        n_groups = len(insts) + n_nodes
        self._spread = np.zeros((n_groups, n_nodes))
        for inst in insts:
            self._spread[inst.slot, inst.nodes] = 1.0 / len(inst.nodes)
        self._spread[len(insts) + np.arange(n_nodes), np.arange(n_nodes)] = 1.0
        self._g_ub = np.zeros((n_groups, n_groups))
        self._g_rdma = np.zeros((2, n_groups))       # bytes out of, into each group
        servers = self.ems.servers if self.ems is not None else ()
        self._srv_group = np.zeros((len(servers), n_groups))     # server -> its node's group
        for i, s in enumerate(servers):
            self._srv_group[i, len(insts) + self.ems_node[s]] = 1.0
        self._ems_blocks()

    def _ems_blocks(self) -> None:
        """Per instance slot and EMS server: blocks sent for hits, blocks written (plain lists,
        added to in EMS.lookup_store's loop; turned into traffic once per interval)."""
        n_srv, n_slots = len(self._srv_group), len(self.prefill) + len(self.decode)
        self._ems_hit = [[0] * n_srv for _ in range(n_slots)]
        self._ems_new = [[0] * n_srv for _ in range(n_slots)]

    def _flush_traffic(self) -> None:
        """Spread the group totals over node pairs into the interval's counters."""
        cur, sp = self.metrics.cur, self._spread
        if self.ems is not None:
            n_slots, bb = len(self._ems_hit), self.ems.block_bytes
            self._g_ub[:, :n_slots] += self._srv_group.T @ (np.array(self._ems_hit).T * bb)
            self._g_ub[:n_slots] += np.array(self._ems_new) * bb @ self._srv_group
            self._ems_blocks()
        cur.node_bytes += sp.T @ self._g_ub @ sp
        cur.rdma_out += self._g_rdma[0] @ sp
        cur.rdma_in += self._g_rdma[1] @ sp
        self._g_ub[:] = 0.0
        self._g_rdma[:] = 0.0

    def _make_source(self):
        sc = self.scenario
        if sc.workload == "trace":
            src = TraceSource(sc.trace, sc.speedup, sc.loop, sc.trace_format, sc.lenient)
            skipped = src.workload.skipped
            if skipped:
                self.log("trace", f"lenient mode skipped {skipped} bad rows: "
                                  f"{'; '.join(src.workload.skip_reasons[:3])}")
            return src
        kw = dict(arrival=sc.arrival, cv=sc.cv, diurnal_amplitude=sc.diurnal_amplitude,
                  diurnal_period_s=sc.diurnal_period_s, input=sc.input.dist(),
                  output=sc.output.dist(), reuse_rate=sc.reuse_rate, prefix_pool=sc.prefix_pool,
                  block_size=sc.block_size)
        rate = sc.rate or sc.load * self.capacity_rps()
        return SyntheticSource(rate, sc.seed, kw)

    def capacity_rps(self, input_mean: float | None = None, output_mean: float | None = None) -> float:
        """Requests/s the bottleneck pool sustains for the scenario's mean lengths (perf model)."""
        sc = self.scenario
        inp = input_mean or sc.input.mean_value()
        out = output_mean or sc.output.mean_value()
        kv = inp + out / 2
        batch = min(self.dep.decode.batch_per_die * self.pm.dies_per_npu,
                    self.pm.max_batch_for_slo(kv_len=kv)["batch_per_npu"] or 1)
        dec = self.pm.decode_step(batch, kv).tokens_per_s_per_npu * sum(d.npus for d in self.decode)
        dec_rps = dec / max(out - (0 if sc.pipeline == "decode_only" else 1), 1)
        if sc.pipeline == "decode_only":
            return dec_rps
        pre = self.pm.prefill_batch(min(inp, 131072), reuse=min(sc.reuse_rate, 0.99))
        pre_rps = pre.tokens_per_s_per_npu * sum(p.npus for p in self.prefill) / inp
        return min(pre_rps, dec_rps)

    def _set_flow_capacities(self) -> None:
        """KV transfer links: each instance's RDMA NICs (or its UB uplinks), scaled by health."""
        plane = self.dep.kv_transfer_plane
        for inst in self.prefill + self.decode:
            if plane == "rdma":
                bw = sum(self.topo.rdma_bandwidth(int(n)) for n in inst.nodes) * len(inst.dies) \
                    / (len(inst.nodes) * self.dies_per_node)
            else:
                bw = sum(self.topo.node_uplink_gbps(int(n)) for n in inst.nodes)
            self.flows.set_capacity(inst.name, bw * 1e9)

    # ---- logging and commands ------------------------------------------------------------------
    def log(self, kind: str, message: str) -> None:
        self.events.append({"t": round(self.env.now, 3), "kind": kind, "message": message})
        del self.events[:-MAX_EVENTS]

    def submit(self, cmd: Command) -> None:
        """Thread-safe: queue a command; it lands at the sim time of the next advance()."""
        if not isinstance(cmd, Command):
            raise TypeError("submit() takes a Command")
        self.commands.put(cmd)

    def _apply(self, cmd: Command) -> None:
        try:
            if cmd.kind == "rate":
                self.source.set_rate(self.env.now, float(cmd.args["rate"]))
                self._kick_arrivals()
                self.log("rate", f"arrival rate set to {float(cmd.args['rate']):.3g} req/s")
            elif cmd.kind == "load":
                frac = float(cmd.args["fraction"])
                if not 0 < frac <= 5:
                    raise ValueError(f"load = {frac}: allowed 0 < load <= 5 (fraction of capacity)")
                rate = frac * self.capacity_rps()
                self.source.set_rate(self.env.now, rate)
                self._kick_arrivals()
                self.log("rate", f"load set to {frac:.0%} of capacity ({rate:.3g} req/s)")
            elif cmd.kind == "fault":
                self.inject_fault(cmd.args)
            elif cmd.kind == "policy":
                current = dict(self.faults.policy.__dict__)
                self.faults.policy = Policy.load(**{**current, **cmd.args})
                self.log("policy", "fault policy: " + ", ".join(f"{k}={v}" for k, v in cmd.args.items()))
            elif cmd.kind == "random":
                h = check_random(cmd.args)["hours_per_sim_s"]
                self.faults.set_random(h)
                self.log("policy", f"random failures on ({h:g} failure-clock hours per simulated "
                                   f"second)" if h else "random failures off")
            elif cmd.kind == "event":
                self.log(cmd.args.get("kind", "note"), str(cmd.args.get("message", "")))
            else:
                raise ValueError(f"command {cmd.kind!r}: unknown (allowed: rate, load, fault, "
                                 f"policy, random, event)")
            self.command_log.append((self.env.now, cmd))
        except (ValueError, KeyError, TypeError, CatalogError) as exc:
            msg = exc.args[0] if exc.args else repr(exc)
            self.log("error", f"{cmd.kind} refused: {msg}")

    def inject_fault(self, args: dict) -> None:
        self.faults.inject(args)

    def fault_report(self, limit: int | None = None) -> list[dict]:
        """Reports of the recorded faults (the newest `limit` of them, if given)."""
        faults = self.faults.faults[-limit:] if limit else self.faults.faults
        if not faults:
            return []
        h = self.metrics.history
        t, g = np.array(h["t"]), np.array(h["goodput_tps"])
        lost = self.lost_ids()
        return [f.report(self, lost, t, g) for f in faults]

    def fault_summary(self) -> dict:
        """Counts over every fault of the run (records dropped from the history included)."""
        fm = self.faults
        return {"injected": fm.injected, "active": sum(f.active for f in fm.faults),
                "recorded": len(fm.faults), "folded": {k: dict(v) for k, v in fm.totals.items()}}

    # ---- lifecycle audit -----------------------------------------------------------------------
    def held_ids(self) -> np.ndarray:
        """Every request some part of the engine holds: prefill queues and batches, KV transfers,
        decode queues and batches."""
        parts = [np.fromiter(i.queue, dtype=np.int64, count=len(i.queue))
                 for i in self.prefill + self.decode]
        parts += [np.asarray(p.running, dtype=np.int64) for p in self.prefill]
        parts += [d.ids for d in self.decode] + list(self.transfers.values())
        parts += [ids for d in self.decode for _, ids in d.inbox]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def audit(self) -> dict:
        """The request table's conservation audit, checked against what the engine holds;
        `lost` = in-flight requests nothing holds (they can never finish), or after a drain every
        admitted request neither completed nor rejected."""
        a = self.req.audit(self.held_ids())
        a["lost"] = a["in_flight"] if self.drained is not None else a["orphaned"]
        return a

    def lost_ids(self) -> np.ndarray:
        live = self.req.in_flight_ids()
        return live if self.drained is not None else np.setdiff1d(live, self.held_ids())

    def drain(self, cap_s: float = DRAIN_CAP_S, step_s: float = 1.0) -> dict:
        """Stop arrivals and run until every admitted request has finished or `cap_s` simulated
        seconds have passed; returns (and keeps in `drained`) how it ended."""
        if not (0 < cap_s <= 86400 and 0 < step_s):
            raise ValueError(f"drain cap = {cap_s}: allowed 0 < cap <= 86400 simulated seconds")
        self.catch_up()
        self.arrivals_on = False
        t0 = self.env.now
        while self.req.in_flight and self.env.now < t0 + cap_s - 1e-9:
            self.env.run(until=min(self.env.now + step_s, t0 + cap_s))
        left = self.req.in_flight
        self.drained = {"cap_s": cap_s, "seconds": round(self.env.now - t0, 3),
                        "complete": not left, "still_in_flight": left}
        self.version += 1
        return self.drained

    # ---- what faults act on ----------------------------------------------------------------------
    def network_changed(self) -> None:
        """Recompute every instance's network state from the topology and the open faults."""
        topo, blocked = self.topo, []
        for inst in self.prefill + self.decode:
            alive_nodes = [int(n) for n in inst.nodes if self._node_has_live_die(int(n))]
            fracs = []
            for n in alive_nodes:
                healthy = topo.node_uplink_gbps(n, healthy=True)
                fracs.append(topo.node_uplink_gbps(n) / healthy if healthy else 1.0)
            ub = min(fracs, default=1.0) if self.system.kind == "supernode" else 1.0
            rto = any(f.active and not f.rerouted and f.kind in UB_KINDS
                      and set(f.nodes) & set(alive_nodes) for f in self.faults.faults)
            net = NetState(ub=ub, extra_latency_us=self.faults.policy.retransmit_us if rto else 0.0)
            if net != inst.pm.net:
                inst.pm = self.pm.with_net(net)
                inst.memo, inst.cap = {}, None
            inst.blocked = ub <= 0
            if inst.blocked and inst.alive:
                blocked.append(inst.name)
            inst.wake()
        self._set_flow_capacities()
        if not self._net_event.triggered:
            self._net_event.succeed()       # wakes KV transfers waiting for a path
        self._net_event = self.env.event()
        was = self.partitioned
        self.partitioned = bool(blocked)
        self.message = (f"partitioned: {', '.join(blocked)} cut off from the UB fabric; "
                        f"their requests wait until a path returns" if blocked else "")
        if self.partitioned != was:
            self.log("partition" if blocked else "recover", self.message or "UB paths restored")

    def _node_has_live_die(self, n: int) -> bool:
        ids = self.topo.die_ids[n * self.dies_per_node:(n + 1) * self.dies_per_node]
        return any(self.topo.alive(d) for d in ids)

    def dies_of(self, target: str) -> np.ndarray:
        """Topology die indices inside a fault target (a die, an NPU or a node)."""
        index = {d: i for i, d in enumerate(self.topo.die_ids)}
        p = parse(target)
        if p["kind"] == "die":
            return np.array([index[target]])
        if p["kind"] in ("npu", "node"):
            return np.array([i for d, i in index.items() if d.startswith(target + "/")])
        return np.zeros(0, dtype=np.int64)

    def servers_of(self, target: str) -> list[str]:
        if self.ems is None:
            return []
        if parse(target)["kind"] == "cpu":
            return [target] if target in self.ems_node else []
        if parse(target)["kind"] == "node":
            return [s for s in self.ems_node if s.startswith(target + "/")]
        return []

    def instances_with(self, dies: np.ndarray) -> list:
        return [i for i in self.prefill + self.decode if np.intersect1d(i.dies, dies).size]

    def in_flight_on(self, instances: list) -> np.ndarray:
        """Ids of the requests queued or running on these instances (sorted, unique)."""
        self.catch_up()
        parts = [np.zeros(0, dtype=np.int64)]
        for inst in instances:
            if inst.kind == "decode":
                inst.flush_inbox()
            parts.append(np.fromiter(inst.queue, dtype=np.int64, count=len(inst.queue)))
            parts.append(inst.ids if inst.kind == "decode" else np.asarray(inst.running, dtype=np.int64))
        return np.unique(np.concatenate(parts))

    def in_flight_on_nodes(self, nodes) -> np.ndarray:
        nodes = set(int(n) for n in nodes)
        return self.in_flight_on([i for i in self.prefill + self.decode
                                  if nodes & set(int(n) for n in i.nodes)])

    def spare_redundant(self, inst) -> int:
        """Redundant expert slots still free in a decode instance."""
        used = self.dep.decode.dies_per_instance - len(inst.dies)
        return max(0, self.dep.decode.redundant_experts - used) if inst.kind == "decode" else 0

    def _requeue(self, ids: np.ndarray) -> tuple[int, int]:
        """Send requests back through the scheduler; (requeued, recomputed) counts."""
        req = self.req
        ids = ids[req.state[ids] < DONE]     # in flight only
        req.requeued[ids] += 1
        if self.scenario.pipeline == "decode_only" or not self.prefill:
            self._to_decode(ids)     # KV comes back from outside the run: nothing recomputed
            return len(ids), 0
        recomputed = ids[req.generated[ids] > 1]
        req.recomputed[recomputed] += 1
        for rid in ids:
            self.schedule_prefill(int(rid))
        return len(ids), len(recomputed)

    def shrink_decode(self, inst: DecodeInstance, dead: np.ndarray) -> tuple[int, int]:
        """A redundant expert takes over: drop the dead dies and requeue their sequences
        (attention is data parallel: request r lives on die r mod n of its instance)."""
        pos = np.flatnonzero(np.isin(inst.dies, dead))
        on_dead = np.isin(inst.ids % len(inst.dies), pos)
        ids = inst.evict(on_dead, queue=False)
        inst.dies = np.setdiff1d(inst.dies, dead)
        inst.npus = len(inst.dies) / self.pm.dies_per_npu
        inst.cap = None
        for d in dead:
            self.die_pool[d] = ""
        return self._requeue(ids)

    def evict(self, inst) -> tuple[int, int]:
        """An instance restarts: everything it held goes back through the scheduler."""
        if inst.kind == "decode":
            ids = inst.evict(queue=self.scenario.pipeline == "full")   # KV buffered there is lost
        else:
            ids = np.array(list(inst.queue) + list(inst.running), dtype=np.int64)
            inst.queue.clear()
            inst.queued_tokens = 0
            inst.running = []
        others = [p for p in self.prefill if p.alive and p is not inst]
        if inst.kind == "prefill" and not others:
            inst.queue.extend(int(r) for r in ids)     # nowhere else to go: wait for the restart
            inst.queued_tokens = int(self.req.input[ids].sum())
            self.req.requeued[ids] += 1
            return len(ids), 0
        return self._requeue(ids)

    # ---- the simulation ------------------------------------------------------------------------
    def advance(self, sim_seconds: float) -> Snapshot:
        """Apply queued commands at the current sim time, then run `sim_seconds` forward."""
        if not sim_seconds >= 0 or math.isinf(sim_seconds):
            raise ValueError(f"advance: sim_seconds = {sim_seconds}: must be a finite number >= 0")
        self.catch_up()
        while True:
            try:
                self._apply(self.commands.get_nowait())
            except queue.Empty:
                break
        if sim_seconds > 0:
            self.env.run(until=self.env.now + sim_seconds)
        else:                       # process what is due now (e.g. a fault injected "now")
            while self.env.peek() <= self.env.now:
                self.env.step()
        self.version += 1
        return self.snapshot()

    @classmethod
    def replay(cls, scenario: Scenario, command_log: list, until: float) -> "Engine":
        """Re-run a scenario applying each logged command at the sim time it landed."""
        eng = cls(scenario)
        for t, cmd in command_log:
            eng.advance(max(0.0, t - eng.sim_time))
            eng.submit(cmd)
        eng.advance(max(0.0, until - eng.sim_time))
        return eng

    @property
    def sim_time(self) -> float:
        return self.env.now

    def _arrivals(self):
        """Every ARRIVAL_TICK_S (tick k at k * ARRIVAL_TICK_S) the scheduler admits the requests
        that arrived since the last tick; ticks with no arrival are skipped, not simulated."""
        tick, lazy = ARRIVAL_TICK_S, self.lazy_decode
        while True:
            busy = lazy is not None and lazy.stepping
            if not busy:
                self.take_ticks(self.env.now)
            if self.source.exhausted or not self.arrivals_on:
                return
            try:
                if busy:                       # it takes the arrivals at its step boundaries
                    yield lazy.until_idle()
                else:
                    k = max(self._tick_k, math.ceil((self.source.next_arrival() - 1e-12) / tick))
                    yield self.env.timeout(max(0.0, k * tick - self.env.now))
            except simpy.Interrupt:            # the rate changed: the next arrival moved
                pass

    def take_ticks(self, upto: float, inclusive: bool = True) -> None:
        """Run every arrival tick not yet run at or before `upto` (before it, if not inclusive):
        its requests join the request table and go to the scheduler."""
        tick = ARRIVAL_TICK_S
        k = math.floor(upto / tick + 1e-9) if inclusive else math.ceil(upto / tick - 1e-9) - 1
        if k < self._tick_k or not self.arrivals_on:
            return
        self._tick_k = k + 1
        batch = self.source.take(k * tick + 1e-12)
        if batch is not None:
            decode_only = self.scenario.pipeline == "decode_only"
            ids = self.req.add(batch.arrival, batch.input, batch.output,
                               None if decode_only else batch.ptr, None if decode_only else batch.ids)
            self._admit_new(ids)

    def catch_up(self) -> None:
        """Before anything outside the decode instances looks at requests: run the ticks a lazy
        decode-only run has not yet taken (those before now; one at now has not happened yet)
        and write the decoding sequences' generated counts to the request table."""
        if self.lazy_decode is not None:
            self.take_ticks(self.env.now, inclusive=False)
        for d in self.decode:
            d.sync()

    def _kick_arrivals(self) -> None:
        if self._arrival_proc.is_alive:
            self._arrival_proc.interrupt()

    def _admit_new(self, ids: np.ndarray) -> None:
        req = self.req
        rows = req.rows(ids)
        too_long = (req.input.a[rows] + req.output.a[rows]) > self.kv_capacity_tokens
        if too_long.any():
            bad = req.reject(ids[too_long], "kv_too_long")
            self.log("reject", f"{len(bad)} request(s) need more KV than a die holds "
                               f"(> {self.kv_capacity_tokens:,.0f} tokens); rejected")
            ids = ids[~too_long]
        if self.scenario.pipeline == "decode_only":
            if len(ids):
                self._to_decode(ids)
            return
        touched: dict = {}
        live = [p for p in self.prefill if p.alive]
        for rid in ids.tolist():
            inst = self.schedule_prefill(rid, wake=False, live=live)
            touched.setdefault(inst.idx, inst)
        for inst in touched.values():      # in the order they got work, as their wake-ups were
            inst.start()

    def schedule_prefill(self, rid: int, wake: bool = True, live: list | None = None) -> PrefillInstance:
        """Stateless global scheduler: any live prefill instance; the least-loaded by tokens (the
        first such in index order). `live`: the live instances, when the caller already has them."""
        live = live if live is not None else [p for p in self.prefill if p.alive]
        inst = min(live or self.prefill, key=_QUEUED_TOKENS)
        inst.enqueue(rid, wake)
        self.req.state[rid] = QUEUED
        return inst

    def _to_decode(self, ids: np.ndarray) -> None:
        live = [d for d in self.decode if d.alive] or self.decode
        min(live, key=lambda d: (d.load(), d.idx)).enqueue(ids)

    def transfer_kv(self, ids: np.ndarray, src: PrefillInstance) -> None:
        """One flow per prefill batch and decode instance: the batch's KV over RDMA. The flow's
        end hands the batch to the decode instance (a callback, not a process per transfer); until
        then the batch is held in `transfers` (the audit sees it)."""
        self.req.state[ids] = TRANSFER
        self._transfer_seq += 1
        key = self._transfer_seq
        self.transfers[key] = ids
        dst = min((d for d in self.decode if d.alive), key=lambda d: (d.load(), d.idx),
                  default=self.decode[0])
        if self._kv_route(src, dst).partitioned:
            self.env.process(self._transfer_when_routed(key, src, dst))
        else:
            self._start_kv_flow(key, src, dst)

    def _kv_route(self, src: PrefillInstance, dst: DecodeInstance):
        plane = "rdma" if self.dep.kv_transfer_plane == "rdma" else "ub"
        return self.topo.route(self.topo.die_ids[src.dies[0]], self.topo.die_ids[dst.dies[0]], plane)

    def _transfer_when_routed(self, key: int, src: PrefillInstance, dst: DecodeInstance):
        self.log("partition", f"KV transfer {src.name} -> {dst.name}: no {self._kv_route(src, dst).plane} "
                              f"path; {len(self.transfers[key])} request(s) wait for the network")
        while self._kv_route(src, dst).partitioned:
            yield self._net_event
        self._start_kv_flow(key, src, dst)

    def _start_kv_flow(self, key: int, src: PrefillInstance, dst: DecodeInstance) -> None:
        nbytes = float(self.req.input[self.transfers[key]].sum()) * self.kv_bytes
        plane = self.dep.kv_transfer_plane
        lat = (self.system.rdma_latency_us if plane == "rdma" else self.system.ub_latency_us) * 1e-6
        path_plane = "rdma" if plane == "rdma" else "ub"
        self.metrics.cur.plane_bytes[path_plane] += nbytes
        self._node_traffic(src.slot, dst.slot, nbytes, path_plane)
        self.flows.start(nbytes, (src.name, dst.name), lat,
                         on_finish=lambda at: dst.deliver(self.transfers.pop(key), at))

    def finish(self, ids: np.ndarray) -> None:
        """The one way a request completes (the table counts it once and refuses a second)."""
        self.metrics.cur.finished.append(self.req.complete(ids, self.env.now))

    def accepted_tokens(self, n: int) -> np.ndarray:
        """Tokens each sequence gains this step: 1, plus the MTP draft when accepted."""
        if not self.dep.mtp:
            return np.ones(n, dtype=np.int64)
        if len(self._uniform) < n:          # reused buffer: the same draws as rng.random(n)
            self._uniform = np.empty(max(n, 2 * len(self._uniform)))
        u = self._uniform[:n]
        self.rng.random(out=u)
        return (u < self.dep.mtp_acceptance) + 1

    # ---- timing from the perf model ------------------------------------------------------------
    def decode_seconds(self, inst: DecodeInstance, batch_per_npu: float, ctx: float) -> float:
        """Step time memoised per (batch per NPU to 1/4, context to 128 tokens) bucket."""
        key = (round(batch_per_npu * 4), int(ctx // 128))
        t = inst.memo.get(key)
        if t is None:
            t = inst.pm.decode_step(max(key[0] / 4, 0.25), (key[1] + 0.5) * 128).step_ms / 1e3
            inst.memo[key] = t
        return t

    def decode_cap(self, inst: DecodeInstance) -> int:
        """Sequences an instance may hold: the deployment's batch cap within the TPOT SLO."""
        if inst.cap is None:
            kv = self.scenario.input.mean_value() + self.scenario.output.mean_value() / 2
            slo = inst.pm.max_batch_for_slo(kv_len=kv)["batch_per_npu"]
            per_npu = min(self.dep.decode.batch_per_die * self.pm.dies_per_npu, max(slo, 1))
            inst.cap = max(1, int(per_npu * inst.npus))
        return inst.cap

    def prefill_tokens(self, ids: np.ndarray) -> np.ndarray:
        """Prompt tokens to prefill; a requeued request also recomputes the tokens it generated."""
        rows = self.req.rows(ids)
        return self.req.input.a[rows] + np.maximum(self.req.generated.a[rows] - 1, 0)

    def prefill_seconds(self, inst: PrefillInstance, inputs: np.ndarray, cached: np.ndarray) -> float:
        """Batch time from the perf model, memoised per shape bucket (see PREFILL_GRID)."""
        total = float(inputs.sum())
        prompt = float(inputs @ inputs.astype(float)) / total
        reuse = min(float(cached.sum()) / total, 0.99)
        npus = len(inst.dies) / self.pm.dies_per_npu
        key = (round(math.log2(prompt) * PREFILL_GRID), round(math.log2(total / npus) * PREFILL_GRID),
               round(reuse * REUSE_GRID))
        t = inst.memo.get(key)
        if t is None:
            if len(inst.memo) >= MEMO_LIMIT:
                inst.memo.clear()
            t = inst.pm.prefill_batch(2.0 ** (key[0] / PREFILL_GRID), 2.0 ** (key[1] / PREFILL_GRID),
                                      reuse=key[2] / REUSE_GRID).step_ms / 1e3
            inst.memo[key] = t
        return t

    # ---- EMS -------------------------------------------------------------------------------------
    def cache_lookup(self, ids: np.ndarray, inst: PrefillInstance) -> np.ndarray:
        """Prefix hits per request (tokens; at least one token is left to compute).

        A request's blocks are entered into EMS as soon as its batch starts (the KV is being
        made; later lookups share it), so requests replayed in any order reach the in-order
        ideal hit ratio when capacity is unlimited; the write traffic is counted with it."""
        req, cur = self.req, self.metrics.cur
        if self.ems is None:
            return np.zeros(len(ids), dtype=np.int64)
        rows = req.rows(ids)
        lo, hi, inp = req.block_lo.a[rows].tolist(), req.block_hi.a[rows].tolist(), req.input.a[rows].tolist()
        sel = [j for j in range(len(lo)) if hi[j] > lo[j]]  # requests without blocks: no lookup
        cached = [0] * len(lo)
        if sel:
            ptr = [0]
            for j in sel:
                ptr.append(ptr[-1] + hi[j] - lo[j])
            bids, base = req.block_ids, req.block_base     # positions are absolute (window)
            blocks = (bids[lo[sel[0]] - base:hi[sel[0]] - base] if len(sel) == 1
                      else np.concatenate([bids[lo[j] - base:hi[j] - base] for j in sel]))
            tokens = [inp[j] for j in sel]
            r = self.ems.lookup_store(blocks, ptr, tokens, self._ems_hit[inst.slot],
                                      self._ems_new[inst.slot])
            cur.lookups_blocks += ptr[-1]
            cur.hit_blocks += sum(r.prefix_blocks)
            cur.lookup_tokens += sum(tokens)
            cur.hit_tokens += sum(r.hit_tokens)
            cur.hit_requests += sum(1 for h in r.prefix_blocks if h)
            for j, ht, t in zip(sel, r.hit_tokens, tokens):
                cached[j] = min(ht, t - 1)
            cur.plane_bytes["ub" if self.dep.cache_plane == "ub" else "vpc"] += r.new_blocks * self.ems.block_bytes
        out = np.array(cached, dtype=np.int64)
        req.cached.a[rows] = out
        return out

    # ---- traffic accounting ------------------------------------------------------------------------
    def _node_traffic(self, src: int, dst: int, nbytes: float, plane: str = "ub") -> None:
        """Bytes between two traffic groups (see _make_traffic_groups)."""
        if plane == "ub":
            self._g_ub[src, dst] += nbytes
        else:
            self._g_rdma[0, src] += nbytes
            self._g_rdma[1, dst] += nbytes

    def _a2a_bytes(self, pool: str, tokens_per_die: float, dies: int) -> float:
        """UB bytes of one step's MoE dispatch + combine over all MoE layers."""
        m, p = self.pm.model, getattr(self.dep, pool)
        ep = p.ep
        ranks = (ep - 1) * (1 - (1 - 1 / ep) ** m.top_k)
        per = tokens_per_die * ranks * (m.dispatch_bytes_per_token + m.combine_bytes_per_token)
        return per * dies * self.pm.moe_layers

    def account_prefill(self, inst: PrefillInstance, ids: np.ndarray, cached: np.ndarray) -> None:
        new = float((self.req.input[ids] - cached).sum())
        a2a = self._a2a_bytes("prefill", new / len(inst.dies), len(inst.dies))
        loaded = float(cached.sum()) * self.kv_bytes
        cur = self.metrics.cur
        cur.plane_bytes["ub"] += a2a + (loaded if self.dep.cache_plane == "ub" else 0.0)
        cur.plane_bytes["vpc"] += loaded if self.dep.cache_plane == "vpc" else 0.0
        cur.cache_bytes += loaded
        self._node_traffic(inst.slot, inst.slot, a2a)

    def account_decode(self, inst: DecodeInstance, n: int, seconds: float) -> None:
        tok = (2 if self.dep.mtp else 1) * n / len(inst.dies)
        a2a = self._a2a_bytes("decode", tok, len(inst.dies))
        cur = self.metrics.cur
        cur.plane_bytes["ub"] += a2a
        cur.batch_samples += n / inst.npus
        cur.batch_steps += 1
        self._node_traffic(inst.slot, inst.slot, a2a)

    # ---- metrics and snapshots ---------------------------------------------------------------------
    def _monitor(self):
        dt = self.scenario.interval_s
        while True:
            yield self.env.timeout(dt)
            self._flush_traffic()
            self.metrics.close(self.env.now, self.req, self._ctx())
            self.interval_end = self.env.now + dt
            self.req.compact(self.keep_rows)

    def _ctx(self) -> dict:
        self.catch_up()
        for d in self.decode:
            d.flush_inbox()
        st = self.ems.stats() if self.ems else {}
        return {"ttft_slo_ms": self.dep.ttft_slo_ms, "tpot_slo_ms": self.dep.tpot_slo_ms,
                "prefill_npus": sum(p.npus for p in self.prefill),
                "decode_npus": sum(d.npus for d in self.decode),
                "ems_dram_bytes": st.get("dram_bytes", 0.0), "ems_ssd_bytes": st.get("ssd_bytes", 0.0),
                "queue_prefill": sum(len(p.queue) for p in self.prefill),
                "queue_decode": sum(len(d.queue) for d in self.decode)}

    def kpis(self) -> dict:
        """Latest values over the last window of intervals, plus run totals."""
        m, req = self.metrics, self.req
        self.catch_up()
        k = {key: m.window(key) for key in m.history}
        for i, name in enumerate(("ttft", "tpot")):
            arr = np.concatenate([r[i] for r in m.recent]) if m.recent else np.zeros(0)
            if len(arr):
                k[f"{name}_p50_ms"] = float(np.percentile(arr, 50))
                k[f"{name}_p99_ms"] = float(np.percentile(arr, 99))
        k.update(req.counts())
        t = m.running_totals()
        k["total_block_hit_ratio"] = t["hit_blocks"] / t["lookup_blocks"] if t["lookup_blocks"] else float("nan")
        k["sim_time"] = self.env.now
        return k

    def link_frame(self):
        """Per link over the last interval: ends, plane, kind, capacity, traffic and utilisation."""
        import pandas as pd
        la = self.topo.link_arrays()
        util = self.link_util()
        cap = np.asarray(la.capacity_gbps, dtype=float)
        return pd.DataFrame({"u": [e[0] for e in la.ends], "v": [e[1] for e in la.ends],
                             "plane": [e[2] for e in la.ends], "kind": [e[3] for e in la.ends],
                             "capacity_gbps": cap, "traffic_gbps": util * cap, "util": util})

    def die_frame(self):
        """Per die over the last interval: pool and busy fraction."""
        import pandas as pd
        snap_util = np.zeros(len(self.die_pool))
        for inst in self.prefill + self.decode:
            snap_util[inst.dies] = self.metrics.last_busy[inst.slot]
        return pd.DataFrame({"die": self.topo.die_ids, "pool": self.die_pool, "util": snap_util})

    def link_util(self) -> np.ndarray:
        from .traffic import link_utilisation
        return link_utilisation(self)

    def snapshot(self) -> Snapshot:
        m = self.metrics
        die_util = np.zeros(len(self.die_pool), dtype=np.float32)
        for inst in self.prefill + self.decode:
            die_util[inst.dies] = m.last_busy[inst.slot]
        return Snapshot(
            version=self.version, sim_time=self.env.now, scenario=self.scenario.name,
            deployment=self.scenario.deployment, seed=self.seed, kpis=self.kpis(),
            history={k: list(v) for k, v in m.history.items()},
            plane_gbps=dict(m.last_plane_gbps),
            link_util=self.link_util(), node_traffic=m.last_node_gbps.copy(),
            die_util=die_util, die_pool=tuple(self.die_pool), events=tuple(dict(e) for e in self.events),
            faults=tuple(self.fault_report(SNAPSHOT_FAULTS)), failed=tuple(sorted(self.topo.failed)),
            partitioned=self.partitioned, message=self.message,
            cache=dict(self.ems.stats()) if self.ems else {},
            fault_summary=self.fault_summary() if self.faults.injected else {})

    # ---- summaries ---------------------------------------------------------------------------------
    def summary(self) -> dict:
        """Run totals over every request so far (the CLI prints this)."""
        self.catch_up()
        lat = self.metrics.run_latency(self.req, self._ctx())
        t, dur = self.metrics.running_totals(), max(self.env.now, 1e-9)
        pct = lambda h, q: None if h.n == 0 else round(h.quantile(q / 100), 3)
        audit = self.audit()
        completed = audit["completed"]
        pre_npus = sum(p.npus for p in self.prefill)
        dec_npus = sum(d.npus for d in self.decode)
        skipped = getattr(getattr(self.source, "workload", None), "skipped", 0)
        return {
            "scenario": self.scenario.name, "deployment": self.scenario.deployment,
            **({"trace_rows_skipped": skipped} if skipped else {}),
            "seed": self.seed, "sim_seconds": round(self.env.now, 3),
            "requests": audit,
            **({"drain": self.drained} if self.drained is not None else {}),
            "prefill": {"tokens_per_s_per_npu": round(t["input_tokens"] / dur / pre_npus, 2) if pre_npus else 0.0,
                        "npus": pre_npus},
            "decode": {"tokens_per_s_per_npu": round(t["output_tokens"] / dur / dec_npus, 2),
                       "npus": dec_npus},
            "ttft_ms": {"p50": pct(lat["ttft"], 50), "p99": pct(lat["ttft"], 99)},
            "tpot_ms": {"p50": pct(lat["tpot"], 50), "p99": pct(lat["tpot"], 99)},
            "latency_relative_accuracy": lat["ttft"].rel,
            "slo_attainment": round(lat["slo_met"] / completed, 4) if completed else None,
            "cache": {"block_hit_ratio": round(t["hit_blocks"] / t["lookup_blocks"], 4) if t["lookup_blocks"] else None,
                      "token_hit_ratio": round(t["hit_tokens"] / t["lookup_tokens"], 4) if t["lookup_tokens"] else None},
        }
