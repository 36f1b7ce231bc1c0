"""The time-predictor interface: what the engine asks of a model of step times.

A predictor answers two questions for one deployment under one network state: how long a decode
step of a batch takes (`decode_step`) and how long a prefill batch takes (`prefill_batch`), each as
a StepResult. `with_net` gives the same predictor under other plane health (faults), `with_health`
under other health of the instance's slowest member (gray faults: a slow die, HBM, CPU). Everything
else the engine needs (memory geometry, the largest batch within the TPOT SLO) follows from these
and from `twin.model.memory.Geometry`. Implementations: `roofline.PerfModel` (operator-level, calibrated) and
`constant.ConstantPredictor` (fixed times, for exact engine tests); `REGISTRY` names them.
"""
from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from twin.model import rules
from twin.model.config import Catalog, Chip, Deployment, Model, System, catalog, constants
from twin.model.memory import Geometry

DECODE_CURVE_BATCHES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 160, 192, 256)   # batch per NPU


@dataclass(frozen=True)
class NetState:
    """Health of the planes as the perf model sees it: fraction of healthy bandwidth left."""
    ub: float = 1.0
    rdma: float = 1.0
    vpc: float = 1.0
    extra_latency_us: float = 0.0

    @property
    def partitioned(self) -> bool:
        return self.ub <= 0


HEALTHY = NetState()


@dataclass(frozen=True)
class Health:
    """Health of the member that paces an instance's synchronous group, as fractions of a healthy
    part's speed: `compute` (cube and vector throughput of its slowest die), `hbm` (the slowest
    HBM bandwidth of its dies), `cpu` (CPU and DRAM speed of the slowest EMS server its prefill
    loads wait for), and `load` (the slow die's share of a die's batch: below 1 once a mitigation
    shrinks it; the healthy dies take the rest)."""
    compute: float = 1.0
    hbm: float = 1.0
    cpu: float = 1.0
    load: float = 1.0

    @property
    def die_slow(self) -> bool:
        """A die of the group runs below full speed (compute or HBM)."""
        return self.compute < 1.0 or self.hbm < 1.0


FULL_HEALTH = Health()


@dataclass(frozen=True)
class StepResult:
    """Time of one step with its per-operator breakdown (ms, summed over layers)."""
    phase: str
    step_ms: float
    tokens_per_step: float
    tokens_per_s_per_npu: float
    breakdown: dict[str, float]
    tpot_ms: float | None = None
    ttft_ms: float | None = None
    streams_ms: dict[str, float] = field(default_factory=dict)
    microbatches: int = 1
    cube_split: str | None = None     # ascend-two-stream: attention:MoE cube cores chosen
    sources: dict[str, str] = field(default_factory=dict)   # operator -> kernel table or roofline

    def as_dict(self) -> dict:
        out = {"phase": self.phase, "step_time_ms": round(self.step_ms, 4),
               "tokens_per_step": round(self.tokens_per_step, 3),
               "tokens_per_s_per_npu": round(self.tokens_per_s_per_npu, 2),
               "breakdown": {k: round(v, 4) for k, v in self.breakdown.items()},
               "microbatches": self.microbatches}
        if self.cube_split:
            out["cube_split"] = self.cube_split
        if self.tpot_ms is not None:
            out["tpot_ms"] = round(self.tpot_ms, 4)
        if self.ttft_ms is not None:
            out["ttft_ms"] = round(self.ttft_ms, 4)
        if self.streams_ms:
            out["streams_ms"] = {k: round(v, 4) for k, v in self.streams_ms.items()}
        if self.sources:
            out["kernel_sources"] = dict(self.sources)
        return out


class TimePredictor(Geometry, ABC):
    """Step times of one deployment under one network state (`net`)."""

    def __init__(self, deployment: str | Deployment, cat: Catalog | None = None,
                 net: NetState = HEALTHY, k: dict | None = None):
        self.cat = cat or catalog()
        dep = self.cat.deployment(deployment) if isinstance(deployment, str) else deployment
        self.system: System = self.cat.system(dep.system)
        chip: Chip = self.cat.chip(self.system.accelerator)
        model: Model = self.cat.model(dep.model)
        super().__init__(dep, model, chip, k or constants())
        self.net = net
        self.health = FULL_HEALTH

    @abstractmethod
    def decode_step(self, batch_per_npu: float | None = None, kv_len: float = 4096, **kw) -> StepResult:
        """One decode step of every sequence in the batch (batch per NPU, KV length per sequence)."""

    @abstractmethod
    def prefill_batch(self, prompt_len: float = 4096, tokens_per_npu: float | None = None,
                      reuse: float = 0.0, **kw) -> StepResult:
        """One prefill batch: `tokens_per_npu` prompt tokens per NPU, a fraction `reuse` from EMS."""

    def with_net(self, net: NetState) -> "TimePredictor":
        """The same predictor under another network state."""
        out = copy.copy(self)
        out.net = net
        return out

    def with_health(self, health: Health) -> "TimePredictor":
        """The same predictor with the instance's slowest member at `health`."""
        out = copy.copy(self)
        out.health = health
        return out

    def alone(self) -> "TimePredictor":
        """The instance's slowest member running by itself, not waiting for the group: what its own
        busy time per step shows (telemetry). Here the group itself; a predictor that models the
        member apart (roofline) says otherwise."""
        return self

    def decode_curve(self, kv_len: float = 4096, batches=None, **kw) -> list[dict]:
        batches = batches or DECODE_CURVE_BATCHES
        cap = self.max_batch_per_die(kv_len) * self.dies_per_npu
        out = []
        for b in batches:
            r = self.decode_step(b, kv_len, **kw)
            out.append({"batch_per_npu": b, "tpot_ms": r.tpot_ms,
                        "tokens_per_s_per_npu": r.tokens_per_s_per_npu, "fits_kv": b <= cap})
        return out

    def max_batch_for_slo(self, slo_ms: float | None = None, kv_len: float = 4096, **kw) -> dict:
        """Largest batch per NPU meeting the TPOT SLO and fitting the KV cache (bisection)."""
        slo = self.dep.tpot_slo_ms if slo_ms is None else slo_ms
        if not slo > 0:
            raise ValueError(f"TPOT SLO = {slo} ms: must be > 0")
        cap = self.max_batch_per_die(kv_len) * self.dies_per_npu
        lo, hi = 0, max(cap, 0)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if rules.tpot_within(self.decode_step(mid, kv_len, **kw).tpot_ms, slo):
                lo = mid
            else:
                hi = mid - 1
        best = self.decode_step(lo, kv_len, **kw) if lo else None
        return {"slo_ms": slo, "batch_per_npu": lo, "kv_limit_batch_per_npu": cap,
                "tpot_ms": best.tpot_ms if best else None,
                "tokens_per_s_per_npu": best.tokens_per_s_per_npu if best else 0.0}


REGISTRY: dict[str, type] = {}


def register(name: str):
    """Class decorator: make a predictor available by name (`make`)."""
    def deco(cls: type) -> type:
        REGISTRY[name] = cls
        return cls
    return deco


def make(name: str, deployment: str | Deployment, cat: Catalog | None = None, **kw) -> TimePredictor:
    if name not in REGISTRY:
        raise ValueError(f"predictor = {name!r}: unknown (allowed: {', '.join(REGISTRY)})")
    return REGISTRY[name](deployment, cat, **kw)
