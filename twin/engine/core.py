"""The serving engine: CloudMatrix-Infer on the modelled system, as a SimPy simulation.

arrival -> placement (scheduling/) -> prefill batch (EMS lookup, compute the misses, store new
blocks) -> KV transfer (transfer.py, max-min shared flows) -> decode admission and continuous
batching -> completion. The Engine owns the clock (the SimPy environment), the one random
generator and the wiring of its components; it applies typed commands (commands.py) between
advances. Components: scheduling policies, the time predictor (twin.predict.perf / twin.predict), step
timing (timing.py), the EMS lookups (ems/prefix.py), traffic accounting (accounting.py), KV transfers,
faults (faults/, notified through `network_changed`), metrics and reports (report.py).
Components see the engine through the narrow ports of ports.py; each declares the snapshot fields
it reports, and extensions (the co-pool scheduler, outside requests) register themselves, through
the registries of registry.py. The same seed and command log replay the same run exactly.
"""
from __future__ import annotations

import math
import queue

import numpy as np
import simpy
from simpy.events import URGENT

from twin.model.config import CatalogError, catalog
from twin.i18n import N_
from twin.predict.roofline import PerfModel
from twin.topology import topology
from twin.engine import network, report, traffic
from twin.engine.ems import prefix as cache
from twin.engine.accounting import Accounting
from twin.engine.clock import Clock
from twin.engine.commands import Command, Ticket
from twin.engine.deadlines import Deadlines
from twin.engine.faults import FaultManager, Policy, load_fault_file
from twin.engine.metrics import Metrics
from twin.engine.pools import DecodeInstance, PrefillInstance
from twin.engine.registry import Extensions, Reporters
from twin.engine.requests import DONE, KEEP_ROWS, MAX_WINDOW_ROWS, QUEUED, RequestTable
from twin.engine.scenario import Scenario, load_scenario
from twin.engine.scheduling import Policies
from twin.engine.snapshot import Snapshot
from twin.engine.source import ARRIVAL_TICK_S, Staged, make_source
from twin.engine.timing import MAX_REUSE, StepTimes
from twin.engine.transfer import KvTransfers

MAX_EVENTS = 200          # events kept for the UI
TICK_EPS = 1e-9           # float slack when mapping times onto arrival ticks
ARRIVAL_EPS = 1e-12       # float slack: an arrival at a tick's exact time belongs to that tick
CAPACITY_PROMPT_CAP = 131072   # assumption: capacity estimates cap the mean prompt at 128 K tokens
FEW_ARRIVALS = 4          # speed only: a tick with fewer arrivals is placed by choose() in a loop (no closure)


class Engine:
    def __init__(self, scenario: str | Scenario | None = "default", seed: int | None = None,
                 predictor=None, policies: dict | None = None, ems=None, **overrides):
        """`predictor`: a time predictor for the deployment (twin.predict; default the roofline
        PerfModel); `policies`: scheduling policy specs (a name, or a table of name and parameters)
        by decision, over the scenario's `scheduling` (whose defaults are scheduling.DEFAULTS);
        `ems`: an EMS pool shared with other engines (twin.cloud.fabric), instead of one of its own."""
        self.scenario = (scenario if isinstance(scenario, Scenario)
                         else load_scenario(scenario, seed=seed, **overrides))
        sc = self.scenario
        self.seed = sc.seed
        self.env = Clock()
        self.rng = np.random.default_rng(sc.seed)
        self.cat = catalog()
        self.dep = self.cat.deployment(sc.deployment)
        self.system = self.cat.system(self.dep.system)
        self.topo = topology(self.dep.system)
        self.pm = predictor if predictor is not None else PerfModel(self.dep, self.cat)
        self.policies = Policies.load({**dict(sc.scheduling), **(policies or {})})
        self.dies_per_node = self.system.npus_per_node * self.pm.dies_per_npu
        self.kv_bytes = self.pm.kv_bytes_per_token()
        self.kv_capacity_tokens = self.pm.kv_capacity_bytes_per_die() / self.kv_bytes
        self.decode_rate = report.DecodeRate(self.pm, self.dep)
        self.partitioned, self.message = False, ""
        self.req = RequestTable()
        self.deadlines = Deadlines(self)  # clients that give up waiting for prefill
        self.health = 0                   # bumped whenever an instance is held down or released
        self._live: tuple = (-1, [], [])  # (health, live prefill, live decode) when last computed
        self.keep_rows = KEEP_ROWS        # per-request rows kept in memory (the rest are terminal)
        self.shed = 0                     # arrivals refused as overloaded since shedding began (0: admitting)
        self.arrivals_on = True
        self.drained: dict | None = None   # set by drain(): how it ended
        self.external = None              # the "external" extension (twin.engine.external), a slot
        self.reporters = Reporters(Snapshot)    # what a snapshot is assembled from, declared by the parts
        self.extensions = Extensions(self, self.reporters, slots=("external",))
        self.commands: queue.SimpleQueue[tuple[Command, Ticket]] = queue.SimpleQueue()   # the one command queue
        self.command_log: list[tuple[float, Command]] = []
        self.events: list[dict] = []
        self.version = 0
        self.timing = StepTimes(self.pm, self.dep, sc, self.rng, shared=predictor is None)
        self._place_instances()
        cpu = self.cat.chip(self.system.cpu) if self.system.cpu else None
        self.ems = ems if ems is not None else cache.build_ems(sc, self.dep, self.system, cpu,
                                                               self.topo.cpu_ids, self.kv_bytes)
        self.ems_node = cache.server_nodes(self.ems)
        self.metrics = Metrics(self.system.nodes, len(self.prefill), len(self.decode), sc.interval_s,
                               split_nodes=self.system.kind != "supernode")
        self.interval_end = sc.interval_s
        self.acct = Accounting(self.metrics, self.instances, self.system.nodes, self.dep, self.pm.model,
                               self.pm.moe_layers, self.kv_bytes, list(self.ems_node), self.ems_node,
                               self.ems.block_bytes if self.ems else 0.0)
        self.kv = KvTransfers(self)
        self.source = self._make_source()
        self.incoming = Staged(self.source, self.req, sc.pipeline != "decode_only", self.kv_capacity_tokens)
        self.faults = FaultManager(self)
        if sc.faults:
            spec = load_fault_file(sc.faults)
            self.faults.policy = Policy.load(**spec.get("policy", {}))
            for f in spec.get("fault", []):
                self.faults.inject(f)
            if "random" in spec:
                self.faults.set_random(spec["random"]["hours_per_sim_s"], gray=spec["random"]["gray"])
        for owner, reports in (("engine", self.reports()), ("report", report.reports(self)),
                               ("metrics", self.metrics.reports()), ("traffic", traffic.reports(self)),
                               ("network", network.reports(self)), ("faults", self.faults.reports()),
                               ("cache", cache.reports(self.ems))):
            self.reporters.declare(owner, reports)
        for inst in self.decode:          # prefill instances run on callbacks (pools.py)
            inst.proc = self.env.process(inst.run())
        # decode-only runs with one decode instance admit arrivals lazily: while it steps, it takes
        # them itself at each step boundary (where it would first look at them), so a busy
        # instance costs no event per arrival tick; anything else that looks catches up first
        self.decode_only = sc.pipeline == "decode_only"
        self.lazy_decode = self.decode[0] if self.decode_only and len(self.decode) == 1 else None
        self._tick_k = 0                  # the next arrival tick not yet run
        self._arrival_gen = 0             # the arrival chain's generation (a rate change starts a new one)
        self._arrivals_live = True        # False once the source is exhausted or arrivals are off
        self._arrivals_now(URGENT)        # as a process would start
        self.env.process(self._monitor())
        self.log("start", N_("scenario %(name)s: %(about)s (seed %(seed)s)"), name=sc.name,
                 about=sc.description or sc.deployment, seed=sc.seed)

    # ---- setup -------------------------------------------------------------------------------
    def _place_instances(self) -> None:
        """Prefill instances take the first dies, decode the next (the paper uses 32 nodes)."""
        dep, sc, next_die = self.dep, self.scenario, 0
        self.prefill: list[PrefillInstance] = []
        self.decode: list[DecodeInstance] = []
        for pool, cls, out in ((dep.prefill, PrefillInstance, self.prefill),
                               (dep.decode, DecodeInstance, self.decode)):
            for i in range(pool.instances):
                dies = np.arange(next_die, next_die + pool.dies_per_instance)
                next_die += len(dies)
                out.append(cls(self, i, len(self.prefill) + len(self.decode), dies))
        if not self.decode or (sc.pipeline == "full" and not self.prefill):
            raise ValueError(f"deployment {sc.deployment}: needs at least one decode "
                             f"instance{' and one prefill instance' if sc.pipeline == 'full' else ''} "
                             f"to serve (allowed: deployments with instances > 0)")
        self.instances = self.prefill + self.decode
        self.die_pool = [""] * (self.system.nodes * self.dies_per_node)
        for inst in self.instances:
            for d in inst.dies:
                self.die_pool[d] = inst.kind

    def _make_source(self):
        sc = self.scenario
        src = make_source(sc, None if sc.workload == "trace" or sc.rate else self.capacity_rps())
        skipped = src.workload.skipped if sc.workload == "trace" else 0
        if skipped:
            self.log("trace", N_("lenient mode skipped %(n)s bad rows: %(why)s"), n=skipped,
                     why="; ".join(src.workload.skip_reasons[:3]))
        return src

    def capacity_rps(self, input_mean: float | None = None, output_mean: float | None = None) -> float:
        """Requests/s the bottleneck pool sustains for the scenario's mean lengths (predictor)."""
        sc, pm = self.scenario, self.pm
        inp = input_mean or sc.input.mean_value()
        out = output_mean or sc.output.mean_value()
        kv = inp + out / 2
        batch = min(self.dep.decode.batch_per_die * pm.dies_per_npu,
                    pm.max_batch_for_slo(kv_len=kv)["batch_per_npu"] or 1)
        dec = pm.decode_step(batch, kv).tokens_per_s_per_npu * sum(d.npus for d in self.decode)
        dec_rps = dec / max(out - (0 if sc.pipeline == "decode_only" else 1), 1)
        if sc.pipeline == "decode_only":
            return dec_rps
        pre = pm.prefill_batch(min(inp, CAPACITY_PROMPT_CAP), reuse=min(sc.reuse_rate, MAX_REUSE))
        pre_rps = pre.tokens_per_s_per_npu * sum(p.npus for p in self.prefill) / inp
        return min(pre_rps, dec_rps)

    # ---- logging and commands ------------------------------------------------------------------
    def log(self, kind: str, message: str, /, **args) -> None:
        """An event line in English. Lines the dashboard translates (`twin.ui.eventtext`) are catalog
        msgids marked with N_; with `args` the msgid is a template (`%(name)s`) and the event keeps
        it and its values next to the formatted text."""
        ev = {"t": round(self.env.now, 3), "kind": kind, "message": message % args if args else message}
        if args:
            ev["template"], ev["args"] = message, args
        self.events.append(ev)
        del self.events[:-MAX_EVENTS]

    def submit(self, cmd: Command, ticket: Ticket | None = None) -> Ticket:
        """Thread-safe: queue a command (validated when it was built); it lands at the sim time of the
        next advance() or apply_commands(), and the returned ticket says whether it was accepted."""
        if not isinstance(cmd, Command):
            raise TypeError("submit() takes a twin.engine.commands.Command")
        ticket = ticket if ticket is not None else Ticket(cmd.name)
        ticket.command = cmd
        self.commands.put((cmd, ticket))
        return ticket

    def _apply(self, cmd: Command, ticket: Ticket) -> None:
        try:
            cmd.apply(self)
        except (ValueError, KeyError, TypeError, CatalogError) as exc:
            msg = str(exc.args[0] if exc.args else repr(exc))
            self.log("error", N_("%(cmd)s refused: %(msg)s"), cmd=cmd.name, msg=msg)
            ticket.refuse(msg, self.env.now)
            return
        except Exception as exc:          # a fault in the engine itself: the sender hears it too
            ticket.refuse(f"{type(exc).__name__}: {exc}", self.env.now)
            raise
        self.command_log.append((self.env.now, cmd))
        ticket.accept(self.env.now)

    def _queued(self):
        """The queued (command, ticket) pairs, each taken off the one queue as it is reached."""
        while True:
            try:
                yield self.commands.get_nowait()
            except queue.Empty:
                return

    def _apply_queued(self) -> int:
        n = 0
        for cmd, ticket in self._queued():
            self._apply(cmd, ticket)
            n += 1
        return n

    def apply_commands(self) -> int:
        """Apply the queued commands now, without advancing (a paused twin answers them at once);
        returns how many there were. A change is a new version for whoever reads snapshots."""
        self.catch_up()
        n = self._apply_queued()
        if n:
            self.version += 1
        return n

    def refuse_queued(self, reason: str) -> int:
        """Answer every queued command as refused (the engine is being replaced); returns how many."""
        n = 0
        for _cmd, ticket in self._queued():
            ticket.refuse(reason, self.env.now)
            n += 1
        return n

    def set_rate(self, rate: float) -> None:
        self.incoming.set_rate(self.env.now, rate)
        if self._arrivals_live:
            self.restart_arrivals()

    def restart_arrivals(self) -> None:
        """The next arrival moved (a rate change, a request injected from outside): a new arrival
        chain from now."""
        self._arrival_gen += 1
        self._arrivals_live = True
        self._arrivals_now(URGENT)

    def network_changed(self) -> None:
        """The topology changed (a fault struck or recovered): instances and flows follow."""
        network.network_changed(self)

    def live(self) -> tuple[list, list]:
        """The prefill and the decode instances no hold keeps down (pools.py), recomputed only
        when a hold changes (`health`): the scheduler asks at every tick and KV send."""
        if self._live[0] != self.health:
            self._live = (self.health, [p for p in self.prefill if not p.down],
                          [d for d in self.decode if not d.down])
        return self._live[1], self._live[2]

    def bring_online(self, inst, key: str) -> None:
        """Release the hold `key` (a fault's, or handover.hand_over's when the co-pool scheduler
        lends a group): the instance serves again unless another hold remains."""
        inst.release(key)
        inst.wake()

    # ---- the simulation ------------------------------------------------------------------------
    def advance(self, sim_seconds: float) -> None:
        """Apply queued commands at the current sim time, then run `sim_seconds` forward. It builds
        no snapshot: a caller that shows one asks `snapshot()`."""
        if not sim_seconds >= 0 or math.isinf(sim_seconds):
            raise ValueError(f"advance: sim_seconds = {sim_seconds}: must be a finite number >= 0")
        self.catch_up()
        self._apply_queued()
        if sim_seconds > 0:
            self.env.run(until=self.env.now + sim_seconds)
        else:                       # process what is due now (e.g. a fault injected "now")
            while self.env.peek() <= self.env.now:
                self.env.step()
        self.catch_up()             # the request table is exact for whoever reads it next
        self.version += 1

    def run(self, until: float, step: float = 60.0) -> None:
        """Advance to `until` simulated seconds in slices of at most `step` (commands land at slice
        edges, so the slice is part of a run's identity: keep it fixed for a fingerprint)."""
        if not step > 0 or math.isinf(step):
            raise ValueError(f"run: step = {step}: must be a finite number > 0")
        while self.sim_time < until - 1e-9:
            self.advance(min(step, until - self.sim_time))

    @classmethod
    def replay(cls, scenario: Scenario, command_log: list, until: float, **kw) -> "Engine":
        """Re-run a scenario applying each logged command at the sim time it landed."""
        eng = cls(scenario, **kw)
        for t, cmd in command_log:
            eng.advance(max(0.0, t - eng.sim_time))
            eng.submit(cmd)
        eng.advance(max(0.0, until - eng.sim_time))
        return eng

    @property
    def sim_time(self) -> float:
        return self.env.now

    def _monitor(self):
        dt = self.scenario.interval_s
        while True:
            yield self.env.timeout(dt)
            self.acct.flush()
            self.deadlines.tick()
            self.metrics.close(self.env.now, self.req, report.interval_context(self))
            self.faults.tick(self.env.now)
            self.interval_end = self.env.now + dt
            self.req.compact(self.keep_rows)

    # ---- arrivals and scheduling ---------------------------------------------------------------
    def _arrivals_now(self, priority: int) -> None:
        """Run the arrival chain's next step at the current time, with `priority` (an event)."""
        gen = self._arrival_gen
        ev = simpy.Event(self.env)
        ev._ok, ev._value = True, None
        ev.callbacks.append(lambda _: self._arrivals(gen))
        self.env.schedule(ev, priority)

    def _arrivals(self, gen: int) -> None:
        """Every ARRIVAL_TICK_S (tick k at k * ARRIVAL_TICK_S) the scheduler admits the requests
        that arrived since the last tick; ticks with no arrival are skipped, not simulated. A
        chain of callbacks, one event per tick (a process's resume cost more than the tick's own
        work when it holds one request); a step of an older generation (before a rate change
        moved the next arrival) does nothing."""
        if gen != self._arrival_gen:
            return
        lazy = self.lazy_decode
        busy = lazy is not None and lazy.stepping
        if not busy:
            self.take_ticks(self.env.now)
        if self.incoming.exhausted or not self.arrivals_on:
            self._arrivals_live = False
            return
        if busy:                       # it takes the arrivals at its step boundaries
            lazy.until_idle().callbacks.append(lambda _: self._arrivals(gen))
        else:
            tick = ARRIVAL_TICK_S
            k = max(self._tick_k, math.ceil((self.incoming.next_arrival() - ARRIVAL_EPS) / tick))
            self.env.call_later(max(0.0, k * tick - self.env.now), self._tick, gen)

    def _tick(self, ev) -> None:
        self._arrivals(ev._value)          # (the generation rides in the event: no closure per tick)

    def take_ticks(self, upto: float, inclusive: bool = True) -> None:
        """Run every arrival tick not yet run at or before `upto` (before it, if not inclusive):
        its requests join the request table and go to the scheduler."""
        tick = ARRIVAL_TICK_S
        k = math.floor(upto / tick + TICK_EPS) if inclusive else math.ceil(upto / tick - TICK_EPS) - 1
        if k < self._tick_k or not self.arrivals_on:
            return
        self._tick_k = k + 1
        req = self.req
        dropped = req.dropped
        ids = self.incoming.take(k * tick + ARRIVAL_EPS, MAX_WINDOW_ROWS - (req.n - req.base))
        if req.dropped > dropped:
            self._overloaded(req.dropped - dropped)
        if ids is not None:
            self._admit_new(ids)
        if self.external is not None:
            self.external.admitted(ids)

    def catch_up(self) -> None:
        """Before anything outside the decode instances looks at requests: run the ticks a lazy
        decode-only run has not yet taken (those before now; one at now has not happened yet)
        and write the decoding sequences' generated counts to the request table."""
        if self.lazy_decode is not None:
            self.take_ticks(self.env.now, inclusive=False)
        for d in self.decode:
            d.sync()

    def _admit_new(self, ids: np.ndarray) -> None:
        """New requests (the tick's ids, consecutive): reject those that can never fit a die's
        KV and, past the admission limit, the newest as overloaded; place the rest on prefill
        instances, then start the instances that got work."""
        req = self.req
        if self.incoming.took_long:       # flagged when staged
            too_long = req.input[ids] + req.output[ids] > self.kv_capacity_tokens
            bad = req.reject(ids[too_long], "kv_too_long")
            self.log("reject", N_("%(n)s request(s) need more KV than a die holds (> %(cap)s tokens); rejected"),
                     n=len(bad), cap=f"{self.kv_capacity_tokens:,.0f}")
            ids = ids[~too_long]
        over = req.in_flight - self.scenario.max_in_flight
        if over > 0:                      # the newest go
            cut = max(len(ids) - over, 0)
            req.reject(ids[cut:], "overloaded")
            self._overloaded(len(ids) - cut)
            ids = ids[:cut]
        elif self.shed and req.in_flight < 0.9 * self.scenario.max_in_flight \
                and req.n - req.base < 0.9 * MAX_WINDOW_ROWS:
            self.log("reject", N_("Accepting arrivals again, after refusing %(n)s as overloaded"),
                     n=f"{self.shed:,}")
            self.shed = 0
        if self.decode_only:
            if len(ids):
                self.to_decode(ids)
            return
        live, rids = self.live()[0] or self.prefill, ids.tolist()
        placement = self.policies.placement
        if len(rids) == 1:                # (most ticks) place() of one is choose(), without the closure
            inst = placement.choose(live)
            inst.enqueue(rids[0], False)
            inst.start()
            return
        touched: dict = {}
        if len(rids) < FEW_ARRIVALS:      # place() makes choose()'s choices one by one: so, without a closure
            for rid in rids:
                inst = placement.choose(live)
                inst.enqueue(rid, False)
                touched.setdefault(inst.idx, inst)
        else:
            def enqueue(inst, rid):        # schedule_prefill() of each, in arrival order (already QUEUED)
                inst.enqueue(rid, False)
                touched.setdefault(inst.idx, inst)
            placement.place(live, rids, enqueue)
        for inst in touched.values():      # in the order they got work, as their wake-ups were
            inst.start()

    def _overloaded(self, n: int) -> None:
        """`n` arrivals were refused as overloaded: the event log says when shedding starts (and
        `_admit_new` when it has stopped, in flight and rows back under 90% of their limits), not
        at every tick of a twin hovering at its limit."""
        if n and not self.shed:
            req = self.req
            self.log("reject", N_("Overloaded: %(n)s requests in flight (limit %(limit)s), %(rows)s request "
                                  "rows held (limit %(cap)s); refusing new arrivals"),
                     n=f"{req.in_flight:,}", limit=f"{self.scenario.max_in_flight:,}",
                     rows=f"{req.n - req.base:,}", cap=f"{MAX_WINDOW_ROWS:,}")
        self.shed += n

    def schedule_prefill(self, rid: int, wake: bool = True, live: list | None = None) -> PrefillInstance:
        """Place a request on a live prefill instance (any, if none is live) by the placement
        policy. `live`: the live instances, when the caller already has them."""
        live = live if live is not None else self.live()[0]
        inst = self.policies.placement.choose(live or self.prefill)
        inst.enqueue(rid, wake)
        self.req.state[rid] = QUEUED
        return inst

    def to_decode(self, ids: np.ndarray) -> None:
        """Requests whose KV comes from outside the run (decode-only) go straight to decode."""
        live = self.live()[1]
        self.policies.kv_placement.choose(live or self.decode).enqueue(ids)

    def requeue(self, ids: np.ndarray) -> tuple[int, int]:
        """Send requests back through the scheduler; (requeued, recomputed) counts."""
        req = self.req
        ids = ids[req.state[ids] < DONE]     # in flight only
        req.requeued[ids] += 1
        if self.scenario.pipeline == "decode_only" or not self.prefill:
            self.to_decode(ids)     # KV comes back from outside the run: nothing recomputed
            return len(ids), 0
        recomputed = ids[req.generated[ids] > 1]
        req.recomputed[recomputed] += 1
        for rid in ids:
            self.schedule_prefill(int(rid))
        return len(ids), len(recomputed)

    def finish(self, ids: np.ndarray) -> None:
        """The one way a request completes (the table counts it once and refuses a second)."""
        self.metrics.cur.finished.append(self.req.complete(ids, self.env.now))

    # ---- reports (report.py) ------------------------------------------------------------------
    def reports(self) -> dict:
        """Snapshot fields of the run itself: identity, clock, version, placement and the event log."""
        return {"version": lambda: self.version, "sim_time": lambda: self.env.now,
                "scenario": lambda: self.scenario.name, "deployment": lambda: self.scenario.deployment,
                "seed": lambda: self.seed, "die_pool": lambda: tuple(self.die_pool),
                "events": lambda: tuple(dict(e) for e in self.events)}

    def snapshot(self) -> Snapshot:
        """Every declared figure, read after the request table has caught up."""
        self.catch_up()
        return self.reporters.assemble()

    def kpis(self) -> dict:
        return report.kpis(self)

    def summary(self) -> dict:
        return report.summary(self)

    def audit(self) -> dict:
        return report.audit(self)

    def lost_ids(self) -> np.ndarray:
        return report.lost_ids(self)

    def fault_report(self, limit: int | None = None) -> list[dict]:
        return self.faults.report(limit)

    def drain(self, cap_s: float = report.DRAIN_CAP_S, step_s: float = 1.0) -> dict:
        return report.drain(self, cap_s, step_s)
