"""Scheduling policies behind interfaces, chosen by name with their parameters (the Vidur pattern: an
abstract class per decision, a registry from name to class, a config dataclass per implementation).

Four decisions, one interface each:
- PrefillBatching  which queued prompts form an instance's next prefill batch
- Placement        which prefill instance a new or requeued request joins
- DecodeAdmission  how many queued sequences a decode instance takes into its running batch
- KvPlacement      which decode instance receives a batch's KV (or a decode-only request)
A policy is a class in its own module of this package, registered under a name with
`@register(KIND, "name")` (a name taken is refused); its parameters are its `Config`, a frozen
dataclass whose `check()` names a value out of range. A policy is chosen by a spec: its name, or a
table of its name and parameters ({"name": "chunked-fifo", "chunk_tokens": 4096}); `Policies.load(specs)`
builds the set an engine uses (DEFAULTS for the decisions not given). Policies hold no engine state:
they see the instances and return a choice.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, fields
from typing import Callable, ClassVar, Sequence

import numpy as np

PREFILL_BATCHING, PLACEMENT, DECODE_ADMISSION, KV_PLACEMENT = (
    "prefill_batching", "placement", "decode_admission", "kv_placement")


@dataclass(frozen=True)
class NoParams:
    """The config of a policy without parameters."""

    def check(self, where: str) -> None:
        """Raise ValueError naming a parameter out of its range (`where`: the policy's spec name)."""


class Policy:
    """A policy and its parameters (`config`, an instance of the class's `Config`)."""
    Config: ClassVar[type] = NoParams

    def __init__(self, config=None):
        self.config = config if config is not None else self.Config()


class PrefillBatching(Policy, ABC):
    chunk_tokens = 0      # chunked prefill (twin.engine.pools.PrefillInstance): a batch's tokens at most
                          # and a longer prompt split over batches; 0 off
    lone_whole = False    # True: a queue of one prompt is always its whole batch (the instance then
                          # takes it without the call: most batches at low load)

    @abstractmethod
    def take(self, queue: deque, tokens_of: Callable[[int], int], budget: int) -> tuple[list[int], int]:
        """Pop the next batch's request ids from `queue`; returns (ids, their prompt tokens).
        `budget` is the instance's tokens per batch."""


class Placement(Policy, ABC):
    @abstractmethod
    def choose(self, instances: Sequence):
        """The prefill instance (of the non-empty `instances`) a request joins."""

    def place(self, instances: Sequence, rids: list[int], enqueue: Callable) -> None:
        """Place the requests `rids` in order: each joins `choose(instances)` by `enqueue(instance,
        rid)`, which the next choice sees. A policy may override it to make the same choices for
        less work (a tick brings tens of arrivals to hundreds of instances on a large supernode)."""
        for rid in rids:
            enqueue(self.choose(instances), rid)


class DecodeAdmission(Policy, ABC):
    @abstractmethod
    def admit(self, need: np.ndarray, reserved: float, kv_capacity: float, empty: bool, inst) -> int:
        """How many sequences from the head of the queue to admit; `need` holds the KV tokens
        each would reserve (at most the free batch slots of them), `reserved` the KV tokens already
        reserved, `empty` whether the instance `inst` holds no sequence now."""


class KvPlacement(Policy, ABC):
    @abstractmethod
    def choose(self, instances: Sequence):
        """The decode instance (of the non-empty `instances`) that receives a batch."""


_BASES = {PREFILL_BATCHING: PrefillBatching, PLACEMENT: Placement,
          DECODE_ADMISSION: DecodeAdmission, KV_PLACEMENT: KvPlacement}
REGISTRY: dict[str, dict[str, type]] = {kind: {} for kind in _BASES}
DEFAULTS = {PREFILL_BATCHING: "fifo-token-budget", PLACEMENT: "least-queued-tokens",
            DECODE_ADMISSION: "fifo-kv-reserve", KV_PLACEMENT: "least-loaded"}


def register(kind: str, name: str):
    """Class decorator: make a policy class available under `name` for decision `kind` (a name
    already registered for that decision is refused, naming both classes)."""
    def deco(cls: type) -> type:
        if not issubclass(cls, _BASES[kind]):
            raise TypeError(f"{cls.__name__}: a {kind} policy must subclass {_BASES[kind].__name__}")
        held = REGISTRY[kind].get(name)
        if held is not None:
            raise ValueError(f"scheduling.{kind} policy {name!r} is already registered "
                             f"({held.__module__}.{held.__qualname__}); {cls.__qualname__} needs another name")
        REGISTRY[kind][name] = cls
        return cls
    return deco


def spec_name(spec) -> str:
    """The policy name of a spec (a name, or a table with a "name")."""
    return spec.get("name", "") if isinstance(spec, dict) else spec


def make(kind: str, spec):
    """An instance of the policy a spec names, with its parameters (clear errors naming the allowed
    names, the policy's parameters, or the range of a value)."""
    if kind not in REGISTRY:
        raise ValueError(f"scheduling: unknown decision {kind!r} (allowed: {', '.join(REGISTRY)})")
    name = spec_name(spec)
    if not isinstance(name, str) or name not in REGISTRY[kind]:
        raise ValueError(f"scheduling.{kind} = {name!r}: unknown (allowed: {', '.join(REGISTRY[kind])})")
    cls = REGISTRY[kind][name]
    params = {k: v for k, v in spec.items() if k != "name"} if isinstance(spec, dict) else {}
    allowed = {f.name: f.type for f in fields(cls.Config)}
    unknown = set(params) - set(allowed)
    if unknown:
        raise ValueError(f"scheduling.{kind} {name!r}: unknown parameter(s) {', '.join(sorted(unknown))} "
                         f"(allowed: {', '.join(allowed) or 'none'})")
    for k, v in params.items():
        want = int if allowed[k] in (int, "int") else float
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (want is int and not float(v).is_integer()):
            raise ValueError(f"scheduling.{kind} {name!r}: {k} = {v!r} is not a number"
                             f"{' (a whole number)' if want is int else ''}")
        params[k] = want(v)
    config = cls.Config(**params)
    config.check(f"scheduling.{kind} {name!r}")
    return cls(config)


@dataclass(frozen=True)
class Policies:
    """The four policies one engine uses."""
    prefill_batching: PrefillBatching
    placement: Placement
    decode_admission: DecodeAdmission
    kv_placement: KvPlacement

    @classmethod
    def load(cls, specs: dict | None = None) -> "Policies":
        """The policies by decision: a spec (name, or table of name and parameters) per decision
        given, DEFAULTS for the rest."""
        specs = dict(specs or {})
        unknown = set(specs) - set(REGISTRY)
        if unknown:
            raise ValueError(f"scheduling: unknown decision(s) {', '.join(sorted(unknown))} "
                             f"(allowed: {', '.join(REGISTRY)})")
        chosen = {**DEFAULTS, **specs}
        return cls(**{kind: make(kind, chosen[kind]) for kind in REGISTRY})
