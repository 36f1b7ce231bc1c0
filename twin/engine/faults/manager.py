"""Fault injection and recovery: break any part during a run; consequences follow from the model.

A fault changes the topology (links and switches lose capacity, dies and CPUs die); the engine
recomputes each instance's network state, so the predictor sees slower dispatch, combine and KV
transfers. Compute faults hang the instances that use the part until detection; recovery then
remaps a redundant expert or restarts the instance, requeueing its requests (prompt KV comes
back from EMS where cached, the rest is recomputed). Nothing is ever dropped, and each report's
`lost` comes from the engine's lifecycle audit. The record keeps every open fault and the last
MAX_RECORDS closed ones; older ones fold into per-kind aggregates (`FaultManager.totals`).
"""
from __future__ import annotations

import numpy as np

from twin.i18n import N_
from twin.topology import parse
from twin.engine.faults import recovery
from twin.engine.faults.aftermath import SERIES, Aftermath
from twin.engine.faults.detect import Detector
from twin.engine.faults.gray import Gray, is_gray
from twin.engine.faults.random import GRAY_STREAM, random_failures
from twin.engine.accounting import BEFORE_S
from twin.engine.ports import FaultHost
from twin.engine.faults.kinds import KINDS
from twin.engine.faults.spec import MAX_RECORDS, Fault, Policy, check_shape, check_spec, make_fault

SNAPSHOT_FAULTS = 20      # fault reports a snapshot carries (the newest, a screenful); the rest as counts


class FaultManager:
    """Validates, schedules and applies faults for one engine; keeps a record of each."""

    def __init__(self, eng: FaultHost, policy: Policy | None = None):
        self.eng = eng
        self.policy = policy or Policy.load()
        self.faults: list[Fault] = []
        self.injected = 0             # faults ever injected (ids are 1..injected)
        self.totals: dict[str, dict] = {}   # kind -> aggregates of faults dropped from `faults`
        self.random_gen = 0           # bumping it stops the running random-failure process
        self._final: dict[int, dict] = {}   # fault id -> its final report (`archive`), made once
        self.gray = Gray(self)            # gray faults: slow parts, their mitigation, the decode steps' log
        self.detector = Detector(eng, self.gray)   # notices slow parts in telemetry (each metrics interval)

    def check(self, spec: dict) -> Fault:
        """Validate a fault for this engine's topology at the current sim time."""
        return check_spec(spec, self.eng.topo, self.eng.env.now, self.injected + 1)

    # ---- scheduling ----------------------------------------------------------------------------
    def inject(self, spec: dict) -> Fault:
        """A fault from a file or the random-failure process: checked here, then scheduled."""
        return self._schedule(self.check(spec))

    def land(self, spec: dict, checked: bool = False) -> Fault:
        """A fault command at the sim time it lands. Its shape is checked once: at the edge
        (`checked`, the canonical spec `check_shape` returned) or here; then what only the engine
        knows now: whether at_s has passed and whether the part is already down."""
        f = make_fault(spec if checked else check_shape(spec, self.eng.topo), self.eng.env.now, self.injected + 1)
        if f.at_s <= self.eng.env.now + 1e-9:
            down = self.down(f.target)
            if down is not None:
                raise ValueError(f"fault target = {f.target!r} is already down: fault #{down.id} ({down.kind}) "
                                 f"struck it at t = {down.at_s:.1f} s and it is not repaired yet")
        return self._schedule(f)

    def down(self, target: str) -> Fault | None:
        """The unrepaired fault that keeps `target` down now (struck, or landed to strike at this
        instant) on the part itself, a part that holds it, or for a link either end; a degraded or
        flapping link is not down."""
        ends = target.split("--") if "--" in target else [target]
        now = self.eng.env.now + 1e-9
        for g in self.faults:
            if (g.active or g.recover_s is None and g.at_s <= now) and KINDS[g.kind].stops \
                    and (g.target == target or any(e == g.target or e.startswith(g.target + "/") for e in ends)):
                return g
        return None

    def _schedule(self, f: Fault) -> Fault:
        self.injected += 1
        self.faults.append(f)
        self._prune()
        self.eng.env.process(self._run(f))
        if f.at_s <= self.eng.env.now + 1e-9:
            self.eng.log("schedule", N_("#%(id)s %(kind)s on %(target)s scheduled now"), **_who(f))
        else:
            self.eng.log("schedule", N_("#%(id)s %(kind)s on %(target)s scheduled at %(at)s s"), **_who(f),
                         at=f"{f.at_s:g}")
        return f

    def _prune(self) -> None:
        """Fold the oldest closed faults beyond MAX_RECORDS into the per-kind totals."""
        closed = [f for f in self.faults if f.recover_s is not None and not f.active]
        old = {id(f) for f in closed[:max(0, len(closed) - MAX_RECORDS)]}
        if not old:
            return
        for f in self.faults:
            if id(f) in old:
                t = self.totals.setdefault(f.kind, {"faults": 0, "requests_affected": 0,
                                                    "requeued": 0, "recomputed": 0})
                t["faults"] += 1
                t["requests_affected"] += len(f.affected)
                t["requeued"] += f.requeued
                t["recomputed"] += f.recomputed
        self.faults = [f for f in self.faults if id(f) not in old]
        self._final = {f.id: self._final[f.id] for f in self.faults if f.id in self._final}

    def _run(self, f: Fault):
        eng, pol = self.eng, self.policy
        yield eng.env.timeout(max(0.0, f.at_s - eng.env.now))
        f.at_s, f.active = eng.env.now, True
        f.aftermath = Aftermath(f.at_s, BEFORE_S, eng.metrics.history)
        eng.log("fault", N_("#%(id)s %(kind)s on %(target)s"), **_who(f))
        k = KINDS[f.kind]
        if k.network:
            yield from self._network(f, pol)
        elif k.stops:
            yield from self._compute(f, pol)
        else:
            yield from self.gray.run(f, pol)
        f.active = False

    def _network(self, f: Fault, pol: Policy):
        """Capacity drops at once; retransmissions until the fabric reroutes; detection (if the
        fault lasts that long) schedules the repair; the part comes back at the end."""
        eng, topo = self.eng, self.eng.topo
        f.nodes = nodes_of(f, self.eng.system.nodes)
        f.affected = recovery.in_flight_on_nodes(eng, f.nodes)
        end = f.duration_s if f.duration_s is not None else pol.detect_s + pol.network_repair_s
        link = (KINDS[f.kind].health or {}).get("link")    # "factor": a slow link; "flap": down and up
        if link == "factor":
            topo.degrade(f.target, f.factor)
            f.rerouted = True       # a slow link still carries traffic: no retransmissions
        else:
            topo.fail(f.target)
        eng.network_changed()
        if link == "flap":
            yield from self._flap(f, pol, end)
        else:
            yield from self._until(f, min(pol.reroute_s, end))
            f.rerouted = True
            if link != "factor":              # a slow link stays slow until it is repaired
                f.served_s = eng.env.now - f.at_s
                if pol.reroute_s < end:       # else the part came back before the reroute
                    eng.log("recover", N_("#%(id)s %(kind)s on %(target)s: traffic rerouted after %(s)s s"),
                            **_who(f), s=f"{f.served_s:.1f}")
            eng.network_changed()
            if end >= pol.detect_s:
                yield from self._until(f, pol.detect_s)
                self._detected(f, pol, N_("#%(id)s %(kind)s on %(target)s detected; repair scheduled"))
        yield from self._until(f, end)
        topo.restore(f.target)
        f.recover_s = eng.env.now - f.at_s
        eng.env.process(self.restored(f))
        eng.network_changed()
        eng.log("repair", N_("#%(id)s %(kind)s on %(target)s: back up after %(s)s s"), **_who(f),
                s=f"{f.recover_s:.1f}")

    def _until(self, f: Fault, t: float):
        """Wait until `t` seconds after the fault."""
        yield self.eng.env.timeout(max(0.0, f.at_s + t - self.eng.env.now))

    def _detected(self, f: Fault, pol: Policy, template: str) -> None:
        f.detect_s, f.detected_by = pol.detect_s, "policy"
        self.eng.log("detect", template, **_who(f))

    def _flap(self, f: Fault, pol: Policy, end: float):
        """Down and up every half period, each down edge paying retransmissions until rerouted;
        detection isolates the link (kept down) until the end of the fault."""
        eng, topo = self.eng, self.eng.topo
        half = f.period_s / 2
        stop = min(pol.detect_s, end)
        t = 0.0                              # the link went down at t (seconds after the fault)
        while True:
            yield from self._until(f, min(t + pol.reroute_s, t + half, stop))
            f.rerouted = True
            eng.network_changed()
            if t + half >= stop:
                break
            yield from self._until(f, t + half)
            topo.restore(f.target)
            eng.network_changed()
            if t + 2 * half >= stop:
                break
            yield from self._until(f, t + 2 * half)
            t += 2 * half
            topo.fail(f.target)
            f.rerouted = False
            eng.network_changed()
        if end >= pol.detect_s:
            yield from self._until(f, pol.detect_s)
            topo.fail(f.target)
            f.rerouted = True
            eng.network_changed()
            self._detected(f, pol, N_("#%(id)s %(kind)s on %(target)s detected; flapping link isolated until "
                                      "repaired"))
            f.served_s = f.detect_s

    def _remaining(self, f: Fault, repair_s: float) -> float:
        elapsed = self.eng.env.now - f.at_s
        total = f.duration_s if f.duration_s is not None else elapsed + repair_s
        return max(0.0, total - elapsed)

    def _compute(self, f: Fault, pol: Policy):
        eng = self.eng
        dies = recovery.dies_of(eng, f.target)
        servers = recovery.servers_of(eng, f.target)
        f.nodes = nodes_of(f, self.eng.system.nodes)
        eng.topo.fail(f.target)
        hit = recovery.instances_with(eng, dies)
        f.affected = recovery.in_flight_on(eng, hit)
        for inst in hit:                   # the work in progress is lost; hung until recovery
            inst.fail(f.id, f"#{f.id} {f.kind} {f.target}")
        lost_blocks = sum(eng.ems.fail_server(s) for s in servers) if eng.ems else 0
        if servers:
            f.note = f"EMS lost {lost_blocks} blocks on {len(servers)} server(s)"
        eng.network_changed()
        yield eng.env.timeout(pol.detect_s)
        self._detected(f, pol, N_("#%(id)s %(kind)s on %(target)s detected; recovering"))
        waits = []
        for inst in hit:
            dead = np.intersect1d(inst.dies, dies)
            spare = recovery.spare_redundant(eng, inst)
            if inst.kind == "decode" and pol.redundant_experts and len(dead) <= spare \
                    and len(dead) < len(inst.dies):
                n, r = recovery.shrink_decode(eng, inst, dead)
                f.requeued += n
                f.recomputed += r
                waits.append((inst, pol.expert_reload_s, N_("%(inst)s: redundant expert took over (%(s)s s)"),
                              {}))
            else:
                n, r = recovery.restart(eng, inst)
                f.requeued += n
                f.recomputed += r
                waits.append((inst, pol.restart_s(), N_("%(inst)s: restart, weights from %(src)s (%(s)s s)"),
                              {"src": pol.weights_from}))
        for inst, secs, how, more in waits:
            eng.log("recover", how, inst=inst.name, s=f"{secs:.0f}", **more)
        yield eng.env.timeout(max((w[1] for w in waits), default=0.0))
        for inst, *_rest in waits:
            inst.release(f.id)             # up again unless another open fault holds it
            inst.wake()
        f.recover_s = eng.env.now - f.at_s
        eng.env.process(self.restored(f))
        eng.log("recover", N_("#%(id)s %(kind)s on %(target)s: service recovered after %(s)s s"), **_who(f),
                s=f"{f.recover_s:.1f}")
        # the hardware itself (and the EMS servers) come back after repair: minutes, not the
        # seconds of detection and restart above, so it is an event of its own
        yield eng.env.timeout(self._remaining(f, pol.hardware_repair_s))
        eng.topo.restore(f.target)
        for s in servers:
            eng.ems.restore_server(s)
        eng.network_changed()
        eng.log("repair", N_("#%(id)s %(kind)s on %(target)s: hardware repaired after %(s)s s, back in service"),
                **_who(f), s=f"{eng.env.now - f.at_s:.1f}")

    # ---- random failures -----------------------------------------------------------------------
    def set_random(self, hours_per_sim_s: float, rng=None, gray: bool = False) -> None:
        """Run random failures at this failure-clock speed from now on (0 stops them). `rng`: their
        own generator (default the engine's), so two runs that differ in policy meet the same faults.
        `gray`: gray failures too, from a generator of their own (`random.GRAY_STREAM`)."""
        self.random_gen += 1
        if hours_per_sim_s > 0:
            self.eng.env.process(random_failures(self, hours_per_sim_s, self.random_gen, rng))
            if gray:
                own = np.random.default_rng([self.eng.scenario.seed, GRAY_STREAM])
                self.eng.env.process(random_failures(self, hours_per_sim_s, self.random_gen, own, table="gray"))

    # ---- reports -------------------------------------------------------------------------------
    def report(self, limit: int | None = None) -> list[dict]:
        """Reports of the recorded faults (the newest `limit` of them, if given)."""
        faults = self.faults[-limit:] if limit else self.faults
        return self._reports(faults) if faults else []

    def _reports(self, faults: list) -> list[dict]:
        eng = self.eng
        h = eng.metrics.history
        hist = {k: np.array(h[k], dtype=float) for k in ("t", "goodput_tps", "slo_attainment")}
        lost = eng.lost_ids()
        now = eng.env.now
        struck = sorted(f.at_s for f in self.faults if f.at_s <= now + 1e-9)
        later = lambda at: next((x for x in struck if x > at + 1e-9), None)   # noqa: E731
        out = [f.report(now, eng.scenario.interval_s, lost, hist, later(f.at_s)) for f in faults]
        for f, r in zip(faults, out):
            if is_gray(f.kind):
                r.update(self.gray.tpot_windows(f, now))
        return out

    def snapshot_reports(self, newest: int) -> tuple[tuple, tuple]:
        """(reports of the newest `newest` faults, reports of the older ones), oldest first: what a
        snapshot carries (`Snapshot.faults`, `Snapshot.fault_archive`), so that every report the run
        keeps (at most MAX_RECORDS closed faults and the open ones) can be opened and exported. One
        pass (the lifecycle audit behind `lost` is most of a report's cost); a final report (the fault
        over, its "after" frozen) is made once and kept, so a long run pays only for those still moving."""
        old, new = self.faults[:-newest], self.faults[-newest:]
        moving = [f for f in old if f.id not in self._final]
        made = self._reports(new + moving) if new else []
        for f, r in zip(moving, made[len(new):]):
            if r["final"]:
                self._final[f.id] = r
        fresh = {f.id: r for f, r in zip(moving, made[len(new):])}
        return tuple(made[:len(new)]), tuple(self._final.get(f.id) or fresh[f.id] for f in old)

    def freeze(self, f: Fault) -> None:
        """Freeze a fault's numbers measured so far (`Fault.freeze`): called when service is
        restored (before and during), and once the "after" window has passed."""
        f.freeze(self._reports([f])[0])

    def restored(self, f: Fault):
        """The part is repaired: freeze the report now, and its "after" once that window has passed
        (a minute, or until service is back: `aftermath`)."""
        self.freeze(f)
        dt = self.eng.scenario.interval_s
        yield self.eng.env.timeout(BEFORE_S + dt)    # "after" >= BEFORE_S
        while f.aftermath is not None and f.aftermath.waiting():
            yield self.eng.env.timeout(dt)
        self.freeze(f)
        f.settled = True

    def tick(self, now: float) -> None:
        """One closed metrics interval: the gray detector reads it, each fault's aftermath keeps it."""
        self.detector.tick(now)
        watching = [f for f in self.faults if f.aftermath is not None and not f.aftermath.done]
        if watching:
            h = self.eng.metrics.history
            row = {k: h[k][-1] for k in SERIES}
            for f in watching:
                f.aftermath.add(row, f.served_s, f.recover_s)

    def incidents(self, newest: int) -> dict:
        """Snapshot field: {fault id: its kept KPI series and window} of the newest `newest` faults."""
        return {f.id: f.aftermath.arrays() for f in self.faults[-newest:] if f.aftermath is not None}

    def reports(self) -> dict:
        """Snapshot fields: the newest fault reports, the older ones, and counts over every fault."""
        return {("faults", "fault_archive"): lambda: self.snapshot_reports(SNAPSHOT_FAULTS),
                "fault_summary": lambda: self.summary() if self.injected else {},
                "incidents": lambda: self.incidents(SNAPSHOT_FAULTS)}

    def summary(self) -> dict:
        """Counts over every fault of the run (records dropped from the history included)."""
        return {"injected": self.injected, "active": sum(f.active for f in self.faults),
                "recorded": len(self.faults), "folded": {k: dict(v) for k, v in self.totals.items()},
                "detector": self.detector.summary()}


def nodes_of(f: Fault, n_nodes: int) -> tuple:
    """Nodes whose UB uplinks or NICs the fault touches (all nodes for L2 and sub-plane)."""
    if KINDS[f.kind].all_nodes:
        return tuple(range(n_nodes))
    ends = f.target.split("--")
    out = {parse(e).get("node") for e in ends}
    return tuple(sorted(n for n in out if n is not None))


def _who(f: Fault) -> dict:
    """The values every fault event line names: its number, kind and target."""
    return {"id": f.id, "kind": f.kind, "target": f.target}
