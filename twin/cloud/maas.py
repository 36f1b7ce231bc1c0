"""Model-as-a-Service: one supernode shared by several models, capacity moving between them over a day.

xDeepServe (arXiv 2508.02520) serves DeepSeek, Kimi, GLM and Qwen models side by side on one
CloudMatrix384. Here each model is served by its own engine (its deployment's groups, its traffic
and SLO, its keys in the shared EMS pool) and the engines advance on one day clock in lockstep,
`control_s` at a time. The NPUs are a ledger of 16-NPU units (a prefill group holds one,
a decode group two); a model's groups that hold no unit are held down in its engine.

Between steps the MaaS policy reads each model's arrival rate, capacity (twin.cloud.copool.Capacity,
the perf model's operating point) and SLO attainment, and moves one group at a time from a model
with room to spare to one that needs it: the donor's group drains (twin.engine.handover: prefill
hands its queue on, decode migrates its sequences' KV to the model's other decode groups), its
units pass to the receiver, whose group loads its weights (twin.engine.ems.pool.ModelCache: ref 3
model caching, from EMS over UB or from object storage) plus a hand-over time (assumption) before it
serves. Times of the day clock (weight loads) are divided by the compression, as the co-pool day does.

The models share the EMS pool (one capacity, keys per model) and the fabric's links, at the control
step's grain (twin.cloud.fabric): one model's KV transfers slow another's where their routes cross.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from twin.model.config import CATALOG_DIR, CatalogError, _validate, _with_bases, catalog
from twin.predict.roofline import PerfModel
from twin.engine import Engine, handover
from twin.engine.ems.pool import ModelCache
from twin.engine.scenario import Length, load_scenario
from twin.cloud.copool import DAY_S, Capacity
from twin.cloud.fabric import Fabric, block_tokens, shared_ems
from twin.i18n import N_, said

UNIT_NPUS = 16            # a ledger unit: one paper-sized prefill group (ref 3: 16 NPUs, EP32)
HOLD = "maas"             # the engine hold that marks a group without NPUs
KEEP_MOVES = 100_000      # move records kept (the count is always complete)


class ModelDay(BaseModel):
    """One model's share of the day: its groups at the start and its traffic."""
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    deployment: str
    prefill_groups: int = Field(ge=1, le=64, description="prefill groups holding NPUs at the start")
    decode_groups: int = Field(ge=1, le=64, description="decode groups holding NPUs at the start")
    load: float = Field(0.5, gt=0, le=2, description="mean arrival rate, fraction of its starting capacity")
    amplitude: float = Field(0.6, ge=0, le=1, description="diurnal swing around the mean")
    peak_h: float = Field(12, ge=0, lt=24, description="clock hour of its peak")
    input: Length = Length(kind="fixed", value=4096)
    output: Length = Length(kind="fixed", value=256)
    reuse_rate: float = Field(0.0, ge=0, lt=1)
    prefix_pool: int = Field(50, ge=1, le=1_000_000)


class Day(BaseModel):
    """A MaaS day: the models, the policy's knobs (each an assumption, bounded) and the weight source."""
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    name: str = "custom"
    description: str = ""
    system: str = "cloudmatrix384"
    day_s: float = Field(3600, ge=60, le=DAY_S, description="simulated seconds that stand for 24 hours")
    moves: bool = True
    control_s: float = Field(5.0, ge=0.5, le=600, description="simulated seconds between decisions")
    grow_above: float = Field(0.8, gt=0, le=2, description="a model needs a group above this load")
    give_below: float = Field(0.55, gt=0, le=1, description="a donor gives only if its load after stays below")
    slo_target: float = Field(0.95, ge=0, le=1, description="a model below this window SLO attainment needs a group")
    cooldown_s: float = Field(30.0, ge=0, le=3600, description="simulated seconds a model neither gives nor takes after a move (assumption: against flapping)")
    weights_from: Literal["ems", "obs"] = "ems"
    handover_s: float = Field(30.0, ge=0, le=3600, description="day-clock seconds besides the weight load (assumption: graph build and warm-up)")
    seed: int = Field(0, ge=0, le=2**32 - 1)
    models: dict[str, ModelDay] = Field(min_length=2, max_length=8)


@lru_cache(maxsize=1)
def _named() -> dict[str, dict]:
    path = CATALOG_DIR / "maas.toml"
    return _with_bases(tomllib.loads(path.read_text()), path.name)


def days() -> list[str]:
    """The named MaaS days (twin/catalog/maas.toml)."""
    return list(_named())


def load_day(name: str, **overrides) -> Day:
    """A named day with overrides (None = keep), checked against the catalog: deployments on the
    day's system, groups that exist, whole ledger units, and a start that fits the system's NPUs."""
    if name not in _named():
        raise CatalogError(f"maas day = {name!r}: unknown (allowed: {', '.join(_named())})")
    raw = {k: v for k, v in _named()[name].items() if k != "base"}
    day = _validate(Day, {**raw, "name": name, **{k: v for k, v in overrides.items() if v is not None}},
                    f"maas.toml [{name}]")
    cat = catalog()
    sysm = cat.system(day.system)
    units = 0
    for model, m in day.models.items():
        where = f"maas.toml [{name}.models.{model}]"
        dep = cat.deployment(m.deployment)
        if dep.system != day.system:
            raise CatalogError(f"{where}.deployment = {m.deployment!r}: runs on {dep.system}, not the day's "
                               f"{day.system} (allowed: a deployment on {day.system})")
        dpn = cat.chip(sysm.accelerator).dies_per_package
        for kind, n in (("prefill", m.prefill_groups), ("decode", m.decode_groups)):
            pool = getattr(dep, kind)
            npus = pool.dies_per_instance / dpn
            if n > pool.instances:
                raise CatalogError(f"{where}.{kind}_groups = {n}: {m.deployment} has {pool.instances} "
                                   f"(allowed: 1..{pool.instances})")
            if npus % UNIT_NPUS:
                raise CatalogError(f"{where}: a {kind} group of {m.deployment} has {npus:g} NPUs "
                                   f"(allowed: a multiple of {UNIT_NPUS})")
            units += n * int(npus // UNIT_NPUS)
    total = sysm.nodes * sysm.npus_per_node // UNIT_NPUS
    if units > total:
        raise CatalogError(f"maas.toml [{name}]: the models start on {units * UNIT_NPUS} NPUs but "
                           f"{day.system} has {total * UNIT_NPUS} (allowed: at most {total * UNIT_NPUS})")
    return day


@dataclass
class Group:
    model: str
    inst: object
    units: list[int] = field(default_factory=list)    # ledger units it holds
    state: str = "serving"       # serving | draining | idle | waiting (for a donor's units) | loading
    migrated: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def kind(self) -> str:
        return self.inst.kind

    @property
    def size(self) -> int:
        """Ledger units it needs."""
        return int(round(self.inst.npus)) // UNIT_NPUS


class Maas:
    """The engines of one MaaS day, the NPU ledger, the policy and its record."""

    def __init__(self, day: Day):
        self.day = day
        self.compression = DAY_S / day.day_s
        sysm = catalog().system(day.system)
        self.usd_per_npu_s = sysm.usd_per_chip_hour / 3600
        self.owner: list[str | None] = [None] * (sysm.nodes * sysm.npus_per_node // UNIT_NPUS)
        self.engines: dict[str, Engine] = {}
        self.cap: dict[str, Capacity] = {}
        self.groups: list[Group] = []
        self.npu_s = dict.fromkeys(day.models, 0.0)
        self.quiet = dict.fromkeys(day.models, 0.0)   # sim time before which a model takes part in no move
        self.moves: list[dict] = []
        self.move_count, self.npus_moved, self.load_s = 0, 0, 0.0
        self.timeline: list[dict] = []
        self.now = 0.0
        self._arrived = dict.fromkeys(day.models, 0)
        self.node_npus = sysm.npus_per_node
        cat = catalog()
        deps = {name: m.deployment for name, m in day.models.items()}
        kv = {name: PerfModel(cat.deployment(d), cat).kv_bytes_per_token() for name, d in deps.items()}
        blocks = block_tokens(kv)
        self.ems = shared_ems(day.system, deps, kv, blocks)
        planes = {cat.deployment(d).kv_transfer_plane for d in deps.values()}
        if len(planes) != 1:
            raise CatalogError(f"maas [{day.name}]: the models' deployments move KV over {', '.join(sorted(planes))} "
                               f"(allowed: one kv_transfer_plane for the day)")
        self.fabric = Fabric(day.system, planes.pop())
        self.left: dict[str, dict[int, float]] = {}     # model -> instance slot -> share of its bandwidth left
        self._bw: dict[str, dict[int, float]] = {}      # model -> instance slot -> its transfer bandwidth alone
        nxt = 0
        for i, (name, m) in enumerate(day.models.items()):
            eng = Engine(load_scenario(
                None, name=f"{day.name}:{name}", deployment=m.deployment, load=1.0,
                diurnal_amplitude=m.amplitude, diurnal_period_s=day.day_s,
                diurnal_offset_s=day.day_s * ((6 - m.peak_h) / 24 % 1),   # sin peaks a quarter period in
                input=m.input, output=m.output, reuse_rate=m.reuse_rate, prefix_pool=m.prefix_pool,
                block_size=blocks[name], duration_s=day.day_s, seed=day.seed + i), ems=self.ems[name])
            self.engines[name] = eng
            eng.kv.sent = {}                    # its KV bytes per (src, dst), for the shared fabric
            self._bw[name] = {inst.slot: eng.kv.flows.capacity[inst.name] for inst in eng.instances}
            self.cap[name] = Capacity.of(eng)
            for kind, pool, n in (("prefill", eng.prefill, m.prefill_groups), ("decode", eng.decode, m.decode_groups)):
                for j, inst in enumerate(pool):
                    g = Group(name, inst)
                    if j < n:
                        g.units = list(range(nxt, nxt + g.size))
                        nxt += g.size
                        for u in g.units:
                            self.owner[u] = name
                    else:
                        handover.hand_over(eng, inst, HOLD, "holds no NPUs of the MaaS day")
                        g.state = "idle"
                    self.groups.append(g)
            eng.set_rate(m.load * self.capacity(name))

    # ---- signals ---------------------------------------------------------------------------------
    def serving(self, model: str, kind: str, without: Group | None = None) -> list[Group]:
        return [g for g in self.groups if g.model == model and g.kind == kind and g.state == "serving"
                and g is not without]

    def capacity(self, model: str, without: Group | None = None) -> float:
        """Requests/s its serving groups sustain (the bottleneck pool), leaving out `without`."""
        c = self.cap[model]
        pre = sum(g.inst.npus for g in self.serving(model, "prefill", without)) * c.prefill_rps
        dec = sum(g.inst.npus for g in self.serving(model, "decode", without)) * c.decode_rps
        return min(pre, dec)

    def bottleneck(self, model: str) -> str:
        c = self.cap[model]
        pre = sum(g.inst.npus for g in self.serving(model, "prefill")) * c.prefill_rps
        dec = sum(g.inst.npus for g in self.serving(model, "decode")) * c.decode_rps
        return "prefill" if pre <= dec else "decode"

    def clock_h(self) -> float:
        return 24 * self.now / self.day.day_s % 24

    # ---- the day ---------------------------------------------------------------------------------
    def run(self, until: float | None = None) -> None:
        """Advance every engine to `until` (default: the day's end), deciding every control_s."""
        until = self.day.day_s if until is None else until
        while self.now < until - 1e-9:
            t = min(self.now + self.day.control_s, until)
            for eng in self.engines.values():
                eng.run(t, step=self.day.control_s)
            for g in self.groups:
                if g.units and g.state != "idle":
                    self.npu_s[g.model] += len(g.units) * UNIT_NPUS * (t - self.now)
            dt, self.now = t - self.now, t
            self._share_links(dt)
            signals = self._signals(dt)
            self._settle()
            if self.day.moves:
                self.decide(signals)
            self.timeline.append({"t": round(t, 3), "clock_h": round(self.clock_h(), 3),
                                  **{f"{m}_{k}": v for m, s in signals.items() for k, v in s.items()},
                                  **{f"{m}_npus": self.npus(m) for m in self.engines}})

    def drain(self) -> dict:
        """Stop arrivals and let every model finish what it holds (report.drain per engine)."""
        self._settle()
        return {m: eng.drain() for m, eng in self.engines.items()}

    def _share_links(self, dt: float) -> None:
        """The step's KV bytes of every model on the one fabric; each instance's transfer links
        keep, for the next step, the share the other models left (twin.cloud.fabric)."""
        sent = {}
        for m, eng in self.engines.items():
            nodes = {g.inst.slot: self._nodes(g) for g in self.groups if g.model == m}
            sent[m] = [(s, d, nodes[s], nodes[d], b) for (s, d), b in eng.kv.sent.items() if nodes[s] and nodes[d]]
            eng.kv.sent.clear()
        self.left = self.fabric.step(sent, dt)
        for m, eng in self.engines.items():
            flows, left = eng.kv.flows, self.left.get(m, {})
            for inst in eng.instances:
                bw = self._bw[m][inst.slot] * left.get(inst.slot, 1.0)
                if flows.capacity[inst.name] != bw:
                    flows.set_capacity(inst.name, bw)

    def _nodes(self, g: Group) -> list[int]:
        """The physical nodes of the ledger units a group holds."""
        per = UNIT_NPUS // self.node_npus
        return [u * per + j for u in g.units for j in range(per)]

    def npus(self, model: str) -> int:
        return sum(o == model for o in self.owner) * UNIT_NPUS

    def _signals(self, dt: float) -> dict:
        out = {}
        for m, eng in self.engines.items():
            eng.catch_up()
            arrived = eng.req.counts()["arrived"]
            rate, self._arrived[m] = (arrived - self._arrived[m]) / dt, arrived
            slo = eng.metrics.window("slo_attainment", max(1, round(dt / eng.scenario.interval_s)))
            cap = self.capacity(m)
            out[m] = {"rate": round(rate, 4), "load": round(rate / cap, 4) if cap else None,
                      "slo": None if slo != slo else round(slo, 4)}
        return out

    # ---- moves -----------------------------------------------------------------------------------
    def decide(self, signals: dict) -> None:
        """One decision: the neediest model (load above grow_above, or SLO below target while busy)
        gets one group of its bottleneck pool, from free units or from the donor that stays
        furthest below give_below without it."""
        d, now = self.day, self.now
        needy = [m for m, s in signals.items() if s["load"] is not None and now >= self.quiet[m]
                 and (s["load"] > d.grow_above
                      or (s["slo"] is not None and s["slo"] < d.slo_target and s["load"] > d.give_below))]
        for m in sorted(needy, key=lambda m: -signals[m]["load"]):
            kind = self.bottleneck(m)
            g = next((g for g in self.groups if g.model == m and g.kind == kind and g.state == "idle"), None)
            if g is None:
                continue
            s = signals[m]
            why = (said(N_("load %(load)s above %(limit)s"), load=f"{s['load']:.0%}", limit=f"{d.grow_above:.0%}")
                   if s["load"] > d.grow_above else
                   said(N_("SLO attainment %(slo)s below %(target)s"), slo=f"{s['slo']:.1%}", target=f"{d.slo_target:.0%}"))
            free = [u for u, o in enumerate(self.owner) if o is None]
            if len(free) >= g.size:
                self._load(g, free[:g.size], None, why)
                return
            donor = self._donor(m, g.size - len(free), signals)
            if donor is not None:
                self._give(donor, g, why)
                return

    def _donor(self, taker: str, units: int, signals: dict) -> Group | None:
        """The serving group whose model stays furthest below give_below without it (its model
        keeps a prefill and a decode group serving and is past its cooldown)."""
        best, best_load = None, self.day.give_below
        for g in self.groups:
            m = g.model
            if m == taker or g.state != "serving" or len(g.units) < units or self.now < self.quiet[m]:
                continue
            if len(self.serving(m, g.kind)) <= 1 or signals[m]["load"] is None:
                continue
            cap = self.capacity(m, without=g)
            after = signals[m]["rate"] / cap if cap else float("inf")
            if after < best_load:
                best, best_load = g, after
        return best

    def _give(self, donor: Group, taker: Group, why: str) -> None:
        """The donor's group drains; its units pass to `taker` once it holds nothing (_settle)."""
        eng = self.engines[donor.model]
        out = handover.hand_over(eng, donor.inst, HOLD, f"given to {taker.model} ({why})")
        donor.state, donor.migrated = "draining", out["ids"]
        taker.state = "waiting"
        self.quiet[donor.model] = self.quiet[taker.model] = self.now + self.day.cooldown_s
        self._record(donor, taker, why, {k: out[k] for k in ("finishing", "handed_over", "migrated")})

    def _settle(self) -> None:
        """Drained donors pass their units on; idle decode groups pass on KV that reached them late."""
        for donor in [g for g in self.groups if g.state == "draining"]:
            eng = self.engines[donor.model]
            if not handover.drained(eng, donor.inst, donor.migrated):
                continue
            units, donor.units, donor.state = donor.units, [], "idle"
            for u in units:
                self.owner[u] = None
            rec = next(r for r in reversed(self.moves) if r["group_from"] == donor.inst.name
                       and r["from"] == donor.model and r["drain_s"] is None)
            rec["drain_s"] = round(self.now - rec["t"], 3)
            taker = next(g for g in self.groups if g.model == rec["to"] and g.inst.name == rec["group_to"])
            free = [u for u, o in enumerate(self.owner) if o is None and u not in units]
            self._load(taker, (units + free)[:taker.size], rec, None)     # what it does not need stays free
        for g in self.groups:
            if g.state == "idle" and g.kind == "decode" and not g.units:
                left = g.inst.evict(queue=True)
                if len(left):
                    handover.migrate(self.engines[g.model], g.inst, left)

    def _load(self, g: Group, units: list[int], rec: dict | None, why: str | None) -> None:
        """`g` takes `units` and serves after its weight load (day-clock seconds / compression)."""
        for u in units:
            self.owner[u] = g.model
        g.units, g.state = list(units), "loading"
        eng = self.engines[g.model]
        weights = eng.pm.weight_bytes_per_die(g.kind) * len(g.inst.dies)
        load_s = ModelCache(model_bytes=weights).load_time_s(self.day.weights_from) + self.day.handover_s
        if rec is None:                      # from free units: a move with no donor
            self.quiet[g.model] = self.now + self.day.cooldown_s
            rec = self._record(None, g, why, {})
            rec["drain_s"] = 0.0
        rec.update(weight_gb=round(weights / 1e9, 1), weight_load_s=round(load_s, 2))
        self.load_s += load_s
        eng.env.process(self._online(g, load_s / self.compression))

    def _online(self, g: Group, delay: float):
        yield self.engines[g.model].env.timeout(delay)
        self.engines[g.model].bring_online(g.inst, HOLD)
        g.state = "serving"

    def _record(self, donor: Group | None, taker: Group, why: str, held: dict) -> dict:
        npus = taker.size * UNIT_NPUS
        rec = {"t": round(self.now, 3), "clock_h": round(self.clock_h(), 2),
               "from": donor.model if donor else None, "group_from": donor.inst.name if donor else None,
               "npus_from": donor.size * UNIT_NPUS if donor else 0,
               "to": taker.model, "group_to": taker.inst.name, "npus": npus, "reason": why,
               "drain_s": None, **held}
        self.moves.append(rec)
        del self.moves[:-KEEP_MOVES]
        self.move_count += 1
        self.npus_moved += npus
        for m in {taker.model, donor.model if donor else taker.model}:
            self.engines[m].log("maas", N_("%(npus)s NPUs %(src)s -> %(dst)s: %(reason)s"), npus=npus,
                                src=donor.model if donor else "free", dst=taker.model, reason=why)
        return rec

    # ---- report ----------------------------------------------------------------------------------
    def report(self) -> dict:
        """Per model: requests (the engine's audit), SLO attainment, latency, NPUs, utilisation and
        $/M output tokens (its groups' NPU time at the system's usd_per_chip_hour); the moves."""
        models = {}
        for m, eng in self.engines.items():
            s = eng.summary()
            t = eng.metrics.running_totals()
            c = self.cap[m]
            npu_s = self.npu_s[m]
            useful = t["input_tokens"] / c.prefill_tps + t["output_tokens"] / c.decode_tps
            r = s["requests"]
            models[m] = {
                "deployment": self.day.models[m].deployment,
                "model": eng.dep.model, "peak_h": self.day.models[m].peak_h,
                "requests": {k: r[k] for k in ("arrived", "completed", "rejected", "timed_out", "in_flight",
                                               "lost", "conserved")},
                "slo_attainment": s["slo_attainment"], "ttft_ms": s["ttft_ms"], "tpot_ms": s["tpot_ms"],
                "output_tokens": int(t["output_tokens"]),
                "npus": {"start": self._start_npus(m), "end": self.npus(m),
                         "mean": round(npu_s / self.now, 1) if self.now else 0.0},
                "utilisation": round(min(1.0, useful / npu_s), 4) if npu_s else None,
                "usd_per_million_tokens": (round(npu_s * self.usd_per_npu_s / t["output_tokens"] * 1e6, 4)
                                           if t["output_tokens"] else None)}
        tot = {k: sum(v["requests"][k] for v in models.values())
               for k in ("arrived", "completed", "rejected", "timed_out", "in_flight", "lost")}
        return {"scenario": self.day.name, "system": self.day.system, "seed": self.day.seed,
                "sim_seconds": round(self.now, 3), "day_compression": round(self.compression, 3),
                "moves_enabled": self.day.moves, "models": models, "requests": tot,
                "conserved": tot["arrived"] == tot["completed"] + tot["rejected"] + tot["timed_out"] + tot["in_flight"]
                and tot["lost"] == 0,
                "moves": {"count": self.move_count, "npus_moved": self.npus_moved,
                          "weight_load_s": round(self.load_s, 2), "weights_from": self.day.weights_from,
                          "log": self.moves[:100]}}

    def _start_npus(self, model: str) -> int:
        m = self.day.models[model]
        eng = self.engines[model]
        return int(m.prefill_groups * eng.prefill[0].npus + m.decode_groups * eng.decode[0].npus)
