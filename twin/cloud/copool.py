"""Co-pool scheduler: serving groups (engine instances) move between inference and a training job.

A SimPy process beside the engine. Every `control_s` it reads the arrival rate and the SLO
attainment of the last window and, under the named policy, lends one group to training or takes one
back. A move holds the group out of both pools for the switch time: weights reloaded as a fault
restart reloads them (faults.Policy.restart_s, from EMS or object storage) plus a hand-over
(assumption), checked against ref 6's "under 5 minutes". A lent group first drains
(twin.engine.handover: prefill finishes its running batch and passes its queue on; decode migrates
its sequences' KV to the other decode groups), still counted in its serving pool; the switch time
starts when it holds nothing. It returns with Engine.bring_online.

The day is compressed as the diurnal scenario is: the workload's period (`diurnal_period_s`) stands
for 24 hours, so one simulated second is `compression` seconds of the day clock. Serving runs in
simulated time; switch times and training progress run on the day clock (divided by / multiplied by
`compression`), and tokens per day are the run's tokens times `compression`.

Policies: "copool" (time-of-day window, load thresholds, SLO headroom), "dedicated" (a fixed split
from the start: the separate-cluster baseline), "inference-only" (no training).

An extension of the engine: it registers itself as "copool" (`eng.extensions`), so its `view` is
the snapshot's `cloud` field, and it reads the engine through the `ExtensionHost` port.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from twin.model.config import CatalogError, _validate
from twin.engine import handover
from twin.engine.faults import Policy as FaultPolicy
from twin.engine.ports import ExtensionHost
from twin.i18n import N_, said
from twin.cloud.training import TrainingJob

POLICIES = ("copool", "dedicated", "inference-only")
HOLD = "copool"               # the key of the engine hold that marks a lent group
EXTENSION = "copool"          # the name it registers under on its engine
ACCOUNTS = ("prefill", "decode", "training", "switching")
REF6_SWITCH_S = 300.0         # ref 6: nodes switch between training and inference in under 5 minutes
DAY_S = 86400.0
VIEW_SWITCHES = 60           # switch records a snapshot carries (the page marks them on the timeline)
HELD = ("finishing", "handed_over", "migrated", "migrated_gb")   # what a lent group held, and where it went


class Params(BaseModel):
    """Every knob of a co-pool day, typed and bounded (the CLI and the page validate through it)."""
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    policy: Literal["copool", "dedicated", "inference-only"] = "copool"
    control_s: float = Field(2.0, ge=0.5, le=60, description="simulated seconds between decisions")
    train_from_h: float = Field(0.0, ge=0, le=24, description="training window opens (clock hour; 0 to 24 = always, load decides)")
    train_to_h: float = Field(24.0, ge=0, le=24, description="training window closes (clock hour; e.g. 20 to 8 trains only at night)")
    lend_below: float = Field(0.6, gt=0, le=1, description="lend while load after lending stays below this share of serving capacity")
    reclaim_above: float = Field(0.8, gt=0, le=1.5, description="take a group back above this share of serving capacity")
    slo_target: float = Field(0.99, ge=0, le=1, description="take a group back when window SLO attainment falls below; lend only at or above")
    cooldown_h: float = Field(2.0, ge=0, le=24, description="day-clock hours without lending after a take-back (assumption: hysteresis against flapping)")
    min_prefill_groups: int = Field(2, ge=1, le=64, description="prefill groups that always serve")
    min_decode_groups: int = Field(1, ge=1, le=64, description="decode groups that always serve")
    dedicated_prefill_groups: int = Field(6, ge=0, le=64, description="dedicated split: prefill groups in training all day")
    dedicated_decode_groups: int = Field(1, ge=0, le=64, description="dedicated split: decode groups in training all day")
    weights_from: Literal["ems", "obs"] = "ems"
    handover_s: float = Field(60.0, ge=0, le=3600, description="day-clock seconds besides the weight load (assumption: drain, graph build, checkpoint hand-over)")
    day_start_h: float = Field(6.0, ge=0, lt=24, description="clock hour at t = 0 (the diurnal sine rises from its mean, so the peak falls at noon)")


def load_params(**overrides) -> Params:
    """Params with overrides (None = keep); a bad value raises CatalogError naming the field."""
    p = _validate(Params, {k: v for k, v in overrides.items() if v is not None}, "copool")
    if p.policy != "inference-only" and p.train_from_h == p.train_to_h:
        raise CatalogError(f"copool.train_to_h = {p.train_to_h}: must differ from train_from_h "
                           f"(an empty training window; use policy inference-only)")
    return p


@dataclass
class Group:
    inst: object
    state: str = "serving"        # serving | draining | to_training | training | to_serving
    since: float = 0.0            # sim time it entered the state
    gen: int = 0                  # bumps on every move decided (a superseded switch stops)

    @property
    def kind(self) -> str:
        return self.inst.kind

    @property
    def account(self) -> str:
        """Where its NPU time is counted: its serving pool, training, or switching."""
        if self.state in ("serving", "draining"):       # a draining group still does its pool's work
            return self.kind
        return "switching" if self.state.startswith("to_") else "training"

    @property
    def npus(self) -> float:
        return self.inst.npus


@dataclass
class Capacity:
    """Requests/s one NPU of each pool sustains on the scenario's mean shape (perf model), the
    same operating point Engine.capacity_rps uses for the whole deployment."""
    prefill_rps: float
    decode_rps: float
    prefill_tps: float
    decode_tps: float

    @classmethod
    def of(cls, eng: ExtensionHost) -> "Capacity":
        sc, pm = eng.scenario, eng.pm
        inp, out = sc.input.mean_value(), sc.output.mean_value()
        batch = min(eng.dep.decode.batch_per_die * pm.dies_per_npu,
                    pm.max_batch_for_slo(kv_len=inp + out / 2)["batch_per_npu"] or 1)
        dec = pm.decode_step(batch, inp + out / 2).tokens_per_s_per_npu
        pre = pm.prefill_batch(min(inp, 131072), reuse=min(sc.reuse_rate, 0.99)).tokens_per_s_per_npu
        return cls(pre / inp, dec / max(out - 1, 1), pre, dec)


@dataclass
class CoPool:
    eng: ExtensionHost
    params: Params
    job: TrainingJob = field(default_factory=TrainingJob)
    timeline: list[dict] = field(default_factory=list)
    switches: list[dict] = field(default_factory=list)
    steps: float = 0.0
    keep_rows: int | None = None        # timeline rows kept (None: all; the live twin bounds it)
    keep_switches: int = 100_000        # switch records kept (`moves` counts them all)
    moves: int = 0
    policy_moves: int = 0               # of `moves`, those made at once by a change of policy (configure)

    def __post_init__(self):
        eng, p = self.eng, self.params
        if eng.scenario.diurnal_amplitude <= 0:
            raise ValueError(f"scenario {eng.scenario.name}: the co-pool day needs a diurnal workload "
                             f"(diurnal_amplitude > 0)")
        self.compression = DAY_S / eng.scenario.diurnal_period_s
        self.switch_day_s = FaultPolicy.load(weights_from=p.weights_from).restart_s() + p.handover_s
        self.cap = Capacity.of(eng)
        self.groups = [Group(i) for i in eng.prefill + eng.decode]
        self.min_npus = self.job.min_npus()
        self._arrived = 0
        self._tokens = (0.0, 0.0)
        self._quiet_until = 0.0          # sim time before which the policy does not lend (cooldown)
        self._npu_s = dict.fromkeys(ACCOUNTS, 0.0)   # NPU-seconds of groups that left each account
        self._view_params = p.model_dump()
        if p.policy == "dedicated":
            self._place_dedicated()
        eng.env.process(self._account())
        eng.env.process(self._control())
        eng.extensions.add(EXTENSION, self)

    def reports(self) -> dict:
        """Snapshot field: the day so far (`view`)."""
        return {"cloud": self.view}

    # ---- clock and signals -------------------------------------------------------------------
    def clock_h(self) -> float:
        return (self.params.day_start_h + 24 * self.eng.env.now / self.eng.scenario.diurnal_period_s) % 24

    def in_window(self) -> bool:
        h, a, b = self.clock_h(), self.params.train_from_h, self.params.train_to_h
        return a <= h < b if a < b else (h >= a or h < b)

    def serving(self, kind: str) -> list[Group]:
        return [g for g in self.groups if g.kind == kind and g.state == "serving"]

    def lent(self) -> list[Group]:
        return [g for g in self.groups if g.state != "serving"]

    def capacity_rps(self, without: tuple = ()) -> float:
        """Serving capacity (req/s) of the serving groups, leaving out the groups `without`."""
        return min(self._spare(without))

    def training_npus(self) -> float:
        return sum(g.npus for g in self.groups if g.state == "training")

    # ---- moves -----------------------------------------------------------------------------------
    def _place_dedicated(self) -> None:
        for g in self._dedicated():               # the split exists before the day starts
            handover.hand_over(self.eng, g.inst, HOLD, "dedicated to training")
            self._move(g, "training")

    def _dedicated(self, p: Params | None = None) -> list[Group]:
        """The groups a dedicated split trains on (the last of each pool); ValueError if too many."""
        p, out = p or self.params, []
        for kind, n, keep in (("prefill", p.dedicated_prefill_groups, p.min_prefill_groups),
                              ("decode", p.dedicated_decode_groups, p.min_decode_groups)):
            pool = [g for g in self.groups if g.kind == kind]
            if n > len(pool) - keep:
                raise ValueError(f"copool.dedicated_{kind}_groups = {n}: allowed 0..{len(pool) - keep} "
                                 f"(the deployment has {len(pool)} {kind} groups, "
                                 f"min_{kind}_groups = {keep} must serve)")
            out += pool[len(pool) - n:]
        return out

    def configure(self, params: Params) -> None:
        """New knobs while the day runs (the live twin's command; ValueError before any change):
        a change to dedicated or inference-only moves groups at once, each move paying its drain
        and switch time; under copool the policy takes it from the current split."""
        keep = self._dedicated(params) if params.policy == "dedicated" else []
        self.params = params
        self._view_params = params.model_dump()
        if params.policy == "copool":
            return
        before = self.moves
        for g in self.lent():
            if g not in keep and g.state != "to_serving":
                self.reclaim(g, said(N_("policy %(policy)s"), policy=params.policy))
        for g in keep:
            if g.state in ("serving", "to_serving"):
                self.lend(g, said(N_("policy %(policy)s"), policy=params.policy))
        self.policy_moves += self.moves - before
        self._quiet_until = 0.0

    def view(self) -> dict:
        """What a snapshot carries of the day (read-only copies; rows are never changed once kept)."""
        npus = dict.fromkeys(("prefill", "decode", "draining", "switching", "training"), 0.0)
        for g in self.groups:
            npus["draining" if g.state == "draining" else g.account] += g.npus
        return {"params": self._view_params, "timeline": tuple(self.timeline),
                "switches": tuple(self.switches[-VIEW_SWITCHES:]), "moves": self.moves,
                "policy_moves": self.policy_moves,
                "steps": round(self.steps, 1), "clock_h": round(self.clock_h(), 2), "npus": npus,
                "groups": {k: sum(g.kind == k for g in self.groups) for k in ("prefill", "decode")},
                "period_s": self.eng.scenario.diurnal_period_s, "compression": self.compression,
                "switch_s": round(self.switch_day_s, 1), "min_npus": self.min_npus}

    def lend(self, g: Group, reason: str) -> None:
        out = handover.hand_over(self.eng, g.inst, HOLD, f"lent to training ({reason})")
        self._move(g, "draining")
        self._log(g, "training", reason, out)
        self.eng.env.process(self._to_training(g, out["ids"], self.switches[-1]))

    def reclaim(self, g: Group, reason: str) -> None:
        if g.state == "draining":             # its weights never left: it serves again at once
            self._move(g, "serving")
            self.eng.bring_online(g.inst, HOLD)
            self._log(g, "serving", reason, {})
            return
        self._move(g, "to_serving")
        self._log(g, "serving", reason, {})
        self.eng.env.process(self._to_serving(g))

    def _to_training(self, g: Group, migrated, record: dict):
        env, gen, t0 = self.eng.env, g.gen, self.eng.env.now
        while not handover.drained(self.eng, g.inst, migrated):
            yield env.timeout(handover.DRAIN_POLL_S)
            if g.gen != gen:
                return
        record["drain_s"] = round(env.now - t0, 4)
        self._move(g, "to_training")
        yield env.timeout(self.switch_day_s / self.compression)
        if g.gen != gen + 1:
            return
        if g.kind == "decode":   # KV already on its way to it when it was lent: pass it on too
            record["migrated"] += handover.migrate(self.eng, g.inst, g.inst.evict(queue=True))["migrated"]
        self._move(g, "training")

    def _to_serving(self, g: Group):
        gen = g.gen
        yield self.eng.env.timeout(self.switch_day_s / self.compression)
        if g.gen == gen:
            self.eng.bring_online(g.inst, HOLD)
            self._move(g, "serving")

    def _move(self, g: Group, state: str) -> None:
        now = self.eng.env.now
        self._npu_s[g.account] += g.npus * (now - g.since)
        g.state, g.since, g.gen = state, now, g.gen + 1

    def npu_seconds(self) -> dict[str, float]:
        """Simulated NPU-seconds each account has had since the start (exact, to this instant)."""
        out, now = dict(self._npu_s), self.eng.env.now
        for g in self.groups:
            out[g.account] += g.npus * (now - g.since)
        return out

    def _log(self, g: Group, to: str, reason: str, held: dict) -> None:
        """A move in the switch log; a lend says what the group held and where it went."""
        self.switches.append({"t": round(self.eng.env.now, 3), "clock_h": round(self.clock_h(), 2),
                              "group": g.inst.name, "npus": g.npus, "to": to, "reason": reason,
                              **{k: held.get(k, 0) for k in HELD}})
        del self.switches[:-self.keep_switches]
        self.moves += 1
        self.eng.log("copool", N_("%(group)s (%(npus)s NPUs) -> %(to)s: %(reason)s"), group=g.inst.name,
                     npus=f"{g.npus:g}", to=to, reason=reason)

    # ---- the policy ----------------------------------------------------------------------------
    def decide(self, rate: float, slo: float | None) -> None:
        """One decision of the co-pool policy. Groups are lent in whole training units: the first
        lend waits until enough groups can go at once to hold the model states (min_npus), and a
        take-back that would leave training below that returns the whole job."""
        p = self.params
        cap = self.capacity_rps()
        load = rate / cap if cap else float("inf")
        slo_ok = slo is None or slo >= p.slo_target
        back = [g for g in self.groups if g.state == "training"]
        if back and (not self.in_window() or load > p.reclaim_above or not slo_ok):
            why = (said(N_("outside the training window")) if not self.in_window() else
                   said(N_("load %(load)s above %(limit)s"), load=f"{load:.0%}", limit=f"{p.reclaim_above:.0%}")
                   if load > p.reclaim_above else
                   said(N_("SLO attainment %(slo)s below %(target)s"), slo=f"{slo:.1%}", target=f"{p.slo_target:.1%}"))
            g = self._bottleneck(back)
            whole = self.training_npus() - g.npus < self.min_npus
            for x in (back if whole else [g]):
                self.reclaim(x, said(N_("%(why)s; the job stops below its minimum"), why=why) if whole else why)
            self._quiet_until = self.eng.env.now + p.cooldown_h / 24 * self.eng.scenario.diurnal_period_s
            return
        if not (self.in_window() and slo_ok) or self.eng.env.now < self._quiet_until:
            return
        plan = self._lendable(rate)
        lent = sum(g.npus for g in self.lent())
        if lent >= self.min_npus:
            plan = plan[:1]                              # the job runs: grow one group at a time
        else:
            need = self.min_npus - lent
            total = 0.0
            for i, g in enumerate(plan):
                total += g.npus
                if total >= need:
                    plan = plan[:i + 1]
                    break
            else:
                plan = []                                # not enough to start the job: lend nothing
        for g in plan:
            self.lend(g, said(N_("load %(load)s of capacity after lending"),
                              load=f"{rate / self.capacity_rps(tuple(plan)):.0%}"))

    def _lendable(self, rate: float) -> list[Group]:
        """Groups that could go now, in order, keeping load below lend_below and the minimum pools."""
        p, out = self.params, []
        while True:
            for kind in self._lend_order(out):
                keep = p.min_prefill_groups if kind == "prefill" else p.min_decode_groups
                pool = [g for g in self.serving(kind) if g not in out]
                if len(pool) <= keep:
                    continue
                after = self.capacity_rps(tuple(out) + (pool[-1],))
                if after and rate / after < p.lend_below:
                    out.append(pool[-1])
                    break
            else:
                return out

    def _spare(self, without: tuple = ()) -> tuple[float, float]:
        """Serving capacity (req/s) of each pool, leaving out the groups `without`."""
        pre = sum(g.npus for g in self.serving("prefill") if g not in without) * self.cap.prefill_rps
        dec = sum(g.npus for g in self.serving("decode") if g not in without) * self.cap.decode_rps
        return pre, dec

    def _lend_order(self, without: tuple | list = ()) -> list[str]:
        """The pool with more spare capacity first."""
        pre, dec = self._spare(tuple(without))
        return ["prefill", "decode"] if pre >= dec else ["decode", "prefill"]

    def _bottleneck(self, back: list[Group]) -> Group:
        """Take back a group of the pool that limits serving capacity, if one is lent."""
        pre, dec = self._spare()
        want = "prefill" if pre <= dec else "decode"
        return next((g for g in back if g.kind == want), back[0])

    def _control(self):
        """Every control_s: the policy's decision on the last window (only under "copool"; the
        first window after a change to it only measures)."""
        eng, arrived = self.eng, 0
        while True:
            dt = self.params.control_s
            yield eng.env.timeout(dt)
            if self.params.policy != "copool":
                arrived = None
                continue
            eng.catch_up()
            now = eng.req.counts()["arrived"]
            if arrived is not None:
                n = max(1, round(dt / eng.scenario.interval_s))
                slo = eng.metrics.window("slo_attainment", n)
                self.decide((now - arrived) / dt, None if slo != slo else slo)
            arrived = now

    # ---- accounting ----------------------------------------------------------------------------
    def _account(self):
        """Each interval: mean NPUs per account (integrated over the moves), useful work per pool,
        training progress on the day clock at the interval's closing training size."""
        eng, dt = self.eng, self.eng.scenario.interval_s
        last = self.npu_seconds()
        while True:
            yield eng.env.timeout(dt)
            now = self.npu_seconds()
            npus = {k: (now[k] - last[k]) / dt for k in ACCOUNTS}
            last = now
            t = eng.metrics.running_totals()
            d_in, d_out = t["input_tokens"] - self._tokens[0], t["output_tokens"] - self._tokens[1]
            self._tokens = (t["input_tokens"], t["output_tokens"])
            train = self.training_npus()
            step = self.job.step(int(train)) if train else None
            if step:       # the interval's training NPU time at its closing size
                self.steps += npus["training"] / train * dt * self.compression / step["step_s"]
            arrived = eng.req.counts()["arrived"]
            h = eng.metrics.history
            self.timeline.append({
                "t": round(eng.env.now, 3), "clock_h": round(self.clock_h(), 3),
                "arrival_rps": (arrived - self._arrived) / dt,
                **{f"{k}_npus": v for k, v in npus.items()},
                "serving_capacity_rps": min(npus["prefill"] * self.cap.prefill_rps,
                                            npus["decode"] * self.cap.decode_rps),
                "training_running": bool(step),
                "useful_prefill_npus": min(npus["prefill"], d_in / dt / self.cap.prefill_tps),
                "useful_decode_npus": min(npus["decode"], d_out / dt / self.cap.decode_tps),
                "output_tokens": d_out,
                "slo_attainment": h["slo_attainment"][-1] if h["slo_attainment"] else float("nan"),
                "steps": round(self.steps, 3)})
            if self.keep_rows is not None:
                del self.timeline[:-self.keep_rows]
            self._arrived = arrived

