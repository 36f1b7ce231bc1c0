"""Gray failures: a part that keeps running, slowly. The fault sets the part's health in the
topology (a die's compute or HBM, every die of a node, a CPU behind EMS); the instances' predictors
follow (network.py), so a synchronous group goes at its slowest member's pace. Nothing is known
until the detector (detect.py) notices it in telemetry; then the policy's `gray_action` acts:

- reroute: the slow dies' experts move to redundant copies and the dies leave the decode instance
  (as for a lost die: their sequences are requeued); an EMS server leaves the hash ring;
- shrink: the slow die keeps its experts but carries only its speed's share of the batch;
- replace: drain the instance and restart it with idle dies in place of the slow ones;
- none: nothing (the slowdown lasts until the part is repaired).

A prefill instance has no redundant experts and no batch share to shrink: reroute and shrink
replace it. The part heals at the fault's end (its duration, else `hardware_repair_s` after
detection). Each report carries the TPOT clients saw before, during (onset to mitigation) and after
(`tpot_windows`), from a bounded log of the decode steps."""
from __future__ import annotations

from collections import deque

import numpy as np

from twin.i18n import N_
from twin.engine.accounting import BEFORE_S
from twin.engine.faults import recovery
from twin.engine.faults.kinds import KINDS
from twin.engine.faults.spec import Fault, Policy
from twin.topology import parse

STEP_LOG = 20_000   # decode steps kept for the TPOT windows: ~half an hour of one instance's (assumption;
                    # a report needs a minute before its fault to a minute after its mitigation)


# what a mitigation did (a report's `mitigation`) -> its event line
MITIGATED = {
    N_("experts rerouted to redundant copies"):
        N_("#%(id)s %(kind)s on %(target)s: experts rerouted to redundant copies after %(s)s s"),
    N_("slow die's batch share shrunk"):
        N_("#%(id)s %(kind)s on %(target)s: slow die's batch share shrunk after %(s)s s"),
    N_("instance drained and replaced"):
        N_("#%(id)s %(kind)s on %(target)s: instance drained and replaced after %(s)s s"),
    N_("EMS server taken out of the ring"):
        N_("#%(id)s %(kind)s on %(target)s: EMS server taken out of the ring after %(s)s s"),
}


def is_gray(kind: str) -> bool:
    """A kind that slows a part this module runs (a slow link is the network's: manager.py)."""
    k = KINDS[kind]
    return not k.stops and not k.network


def health(f: Fault) -> dict[str, float]:
    """{health aspect: factor} a gray fault sets: its kind's declaration names, per aspect, the
    fault's field that holds the factor (twin.engine.faults.kinds)."""
    return {a: f.fields[name] for a, name in KINDS[f.kind].health.items()}


class Gray:
    """The gray faults of one engine: their timelines, the mitigations, the decode steps' log."""

    def __init__(self, mgr):
        self.mgr, self.eng = mgr, mgr.eng
        self.open: dict[int, Fault] = {}       # struck and not yet healed
        self.dies: dict[int, np.ndarray] = {}  # fault id -> topology die indices it slows
        self.found: dict[int, object] = {}     # fault id -> the detector's event, fired when it notices
        # t, seconds per token, tokens of each decode step, flat: numbers, not a tuple per step (tuples
        # are objects the cyclic GC counts: while the log filled, a collection ran every 700 steps)
        self.steps: deque = deque(maxlen=3 * STEP_LOG)
        self.final: dict[int, dict] = {}       # fault id -> its TPOT windows once all have passed

    def run(self, f: Fault, pol: Policy):
        """The timeline of one gray fault (a SimPy process body)."""
        mgr, eng = self.mgr, self.eng
        for what, factor in health(f).items():
            eng.topo.set_health(f.target, what, factor)
        self.dies[f.id] = recovery.dies_of(eng, f.target)
        f.nodes = (parse(f.target)["node"],)
        self.open[f.id] = f
        hit = recovery.instances_with(eng, self.dies[f.id])
        f.affected = recovery.in_flight_on(eng, hit)
        eng.network_changed()
        found = self.found[f.id] = eng.env.event()
        end = eng.env.timeout(f.duration_s) if f.duration_s is not None else None
        yield found | end if end is not None else found
        undo = None
        if found.triggered:
            f.detect_s, f.detected_by = eng.env.now - f.at_s, "telemetry"
            eng.log("detect", N_("#%(id)s %(kind)s on %(target)s noticed in telemetry after %(s)s s"),
                    **_who(f), s=f"{f.detect_s:.1f}")
            if pol.mitigate_gray and pol.gray_action != "none":
                undo = yield from self._mitigate(f, pol)
            if f.duration_s is None:
                end = eng.env.timeout(pol.hardware_repair_s)
            if end is not None:
                yield end
        self._heal(f, undo)

    def _heal(self, f: Fault, undo) -> None:
        eng = self.eng
        eng.topo.restore(f.target)
        if undo:
            undo()
        del self.open[f.id]
        self.dies.pop(f.id, None)
        self.found.pop(f.id, None)
        if f.recover_s is None:
            f.recover_s = eng.env.now - f.at_s
            eng.env.process(self.mgr.restored(f))
        f.active = False
        eng.network_changed()
        eng.log("repair", N_("#%(id)s %(kind)s on %(target)s: back at full speed after %(s)s s"), **_who(f),
                s=f"{eng.env.now - f.at_s:.1f}")

    # ---- mitigation ------------------------------------------------------------------------------
    def _mitigate(self, f: Fault, pol: Policy):
        """Act on a noticed gray fault; returns what undoes the action when the part heals (or None)."""
        eng = self.eng
        if "cpu" in health(f):
            undo = self._server_out(f)
            secs = 0.0
        else:
            undo, secs = None, 0.0
            for inst in recovery.instances_with(eng, self.dies[f.id]):
                slow = np.intersect1d(inst.dies, self.dies[f.id])
                action = pol.gray_action
                if inst.kind == "prefill" or (action == "reroute" and not self._can_drop(inst, slow, pol)):
                    action = "replace"
                if action == "reroute":
                    secs = max(secs, pol.expert_reload_s)
                    yield eng.env.timeout(pol.expert_reload_s)    # the redundant copies take over
                    self._count(f, recovery.shrink_decode(eng, inst, slow))
                    f.mitigation = N_("experts rerouted to redundant copies")
                elif action == "shrink":
                    inst.slow_load = min(health(f).values())      # its speed's share of the batch
                    undo = _reset_load(inst)
                    f.mitigation = N_("slow die's batch share shrunk")
                else:
                    yield from self._replace(f, inst, slow, pol)
                    f.mitigation = N_("instance drained and replaced")
        f.mitigated_s = f.served_s = f.recover_s = eng.env.now - f.at_s
        eng.network_changed()
        eng.env.process(self.mgr.restored(f))
        eng.log("recover", MITIGATED[f.mitigation], **_who(f), s=f"{f.mitigated_s:.1f}")
        return undo

    def _can_drop(self, inst, slow: np.ndarray, pol: Policy) -> bool:
        return (pol.redundant_experts and len(slow) <= recovery.spare_redundant(self.eng, inst)
                and len(slow) < len(inst.dies))

    def _count(self, f: Fault, moved: tuple[int, int]) -> None:
        f.requeued += moved[0]
        f.recomputed += moved[1]

    def _replace(self, f: Fault, inst, slow: np.ndarray, pol: Policy):
        """Drain and restart the instance (its requests requeued) with idle dies in place of the
        slow ones where there are any (else without them), after a restart's weight load."""
        eng = self.eng
        idle = [d for d, pool in enumerate(eng.die_pool) if not pool and eng.topo.die_health("compute")[d] == 1.0
                and eng.topo.die_health("hbm")[d] == 1.0][:len(slow)]
        inst.hold(("gray", f.id), f"#{f.id} {f.kind} {f.target}: replacing")
        inst.interrupt("replace")
        self._count(f, recovery.restart(eng, inst))
        for d in slow:
            eng.die_pool[d] = ""
        keep = np.setdiff1d(inst.dies, slow)
        inst.dies = np.sort(np.concatenate([keep, np.array(idle, dtype=keep.dtype)]))
        for d in idle:
            eng.die_pool[d] = inst.kind
        inst.npus = len(inst.dies) / eng.pm.dies_per_npu
        inst.cap = None
        yield eng.env.timeout(pol.restart_s())
        inst.release(("gray", f.id))
        inst.wake()

    def _server_out(self, f: Fault):
        """A slow EMS server leaves the hash ring (its blocks are refetched or recomputed elsewhere)
        until it heals."""
        eng = self.eng
        servers = recovery.servers_of(eng, f.target)
        lost = sum(eng.ems.fail_server(s) for s in servers)
        f.note = f"EMS server out of the ring, {lost} blocks to refetch"
        f.mitigation = N_("EMS server taken out of the ring")

        def undo():
            for s in servers:
                eng.ems.restore_server(s)
        return undo

    # ---- detection hooks -------------------------------------------------------------------------
    def noticed_die(self, die: int) -> bool:
        """The detector flagged a die: the open gray faults that slow it are noticed. False: none."""
        hits = [fid for fid, dies in self.dies.items() if fid in self.open and die in dies]
        return self._notice(hits)

    def noticed_server(self, server: str) -> bool:
        hits = [fid for fid, f in self.open.items() if "cpu" in health(f) and f.target == server]
        return self._notice(hits)

    def _notice(self, ids: list[int]) -> bool:
        for fid in ids:
            ev = self.found.get(fid)
            if ev is not None and not ev.triggered:
                ev.succeed()
        return bool(ids)

    # ---- measurements --------------------------------------------------------------------------------
    def step_array(self) -> np.ndarray:
        return np.array(self.steps, dtype=float).reshape(-1, 3)

    def tpot_windows(self, f: Fault, now: float) -> dict:
        """p50 TPOT (ms, over the tokens made by decode steps) before the fault (the minute before),
        during it (onset to mitigation, or to the end of the slowdown or now) and after the
        mitigation (a minute, or what has passed of it)."""
        if f.id in self.final:
            return self.final[f.id]
        if not self.steps:
            return {}
        during_end = f.at_s + (f.mitigated_s if f.mitigated_s is not None else
                               f.recover_s if f.recover_s is not None else max(now - f.at_s, 0.0))
        windows = {"tpot_before_ms": (f.at_s - BEFORE_S, f.at_s), "tpot_during_ms": (f.at_s, during_end),
                   "tpot_after_ms": ((during_end, min(during_end + BEFORE_S, now))
                                     if f.mitigated_s is not None else None)}
        out, arr = {}, self.step_array()
        for key, w in windows.items():
            out[key] = tpot_p50(arr, w) if w is not None and now >= w[0] else None
        settled_at = during_end + (BEFORE_S if f.mitigated_s is not None else 0.0)
        if (f.mitigated_s is not None or not f.active) and now >= settled_at:
            self.final[f.id] = out
        return out


def tpot_p50(arr: np.ndarray, window: tuple[float, float]) -> float | None:
    """p50 TPOT (ms) of the tokens the decode steps in `arr` (rows of `Gray.steps` as an array: t,
    seconds per token, tokens, in time order) made in `window` (lo, hi]: each step's time per token,
    counted once per token."""
    lo, hi = np.searchsorted(arr[:, 0], window, side="right")
    v, w = arr[lo:hi, 1], arr[lo:hi, 2]
    if not len(v):
        return None
    order = np.argsort(v)
    c = np.cumsum(w[order])
    return round(float(v[order][np.searchsorted(c, c[-1] / 2)]) * 1e3, 3)


def _reset_load(inst):
    def undo():
        inst.slow_load = 1.0
    return undo


def _who(f: Fault) -> dict:
    return {"id": f.id, "kind": f.kind, "target": f.target}
