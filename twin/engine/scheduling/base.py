"""Scheduling policies behind interfaces, chosen by name (the Vidur pattern: an abstract class per
decision and a registry from name to class).

Four decisions, one interface each:
- PrefillBatching  which queued prompts form an instance's next prefill batch
- Placement        which prefill instance a new or requeued request joins
- DecodeAdmission  how many queued sequences a decode instance takes into its running batch
- KvPlacement      which decode instance receives a batch's KV (or a decode-only request)
A policy is a class in its own module of this package, registered under a name with
`@register(KIND, "name")`; `Policies.load(names)` builds the set an engine uses (DEFAULTS for
the names not given). Policies hold no engine state: they see the instances and return a choice.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

PREFILL_BATCHING, PLACEMENT, DECODE_ADMISSION, KV_PLACEMENT = (
    "prefill_batching", "placement", "decode_admission", "kv_placement")


class PrefillBatching(ABC):
    lone_whole = False      # True: a queue of one prompt is always its whole batch (the instance then
                            # takes it without the call: most batches at low load)

    @abstractmethod
    def take(self, queue: deque, tokens_of: Callable[[int], int], budget: int) -> tuple[list[int], int]:
        """Pop the next batch's request ids from `queue`; returns (ids, their prompt tokens).
        `budget` is the instance's tokens per batch."""


class Placement(ABC):
    @abstractmethod
    def choose(self, instances: Sequence):
        """The prefill instance (of the non-empty `instances`) a request joins."""

    def place(self, instances: Sequence, rids: list[int], enqueue: Callable) -> None:
        """Place the requests `rids` in order: each joins `choose(instances)` by `enqueue(instance,
        rid)`, which the next choice sees. A policy may override it to make the same choices for
        less work (a tick brings tens of arrivals to hundreds of instances on a large supernode)."""
        for rid in rids:
            enqueue(self.choose(instances), rid)


class DecodeAdmission(ABC):
    @abstractmethod
    def admit(self, need: np.ndarray, reserved: float, kv_capacity: float, empty: bool) -> int:
        """How many sequences from the head of the queue to admit; `need` holds the KV tokens
        each would reserve (at most the free batch slots of them), `reserved` the KV tokens already
        reserved, `empty` whether the instance holds no sequence now."""


class KvPlacement(ABC):
    @abstractmethod
    def choose(self, instances: Sequence):
        """The decode instance (of the non-empty `instances`) that receives a batch."""


_BASES = {PREFILL_BATCHING: PrefillBatching, PLACEMENT: Placement,
          DECODE_ADMISSION: DecodeAdmission, KV_PLACEMENT: KvPlacement}
REGISTRY: dict[str, dict[str, type]] = {kind: {} for kind in _BASES}
DEFAULTS = {PREFILL_BATCHING: "fifo-token-budget", PLACEMENT: "least-queued-tokens",
            DECODE_ADMISSION: "fifo-kv-reserve", KV_PLACEMENT: "least-loaded"}


def register(kind: str, name: str):
    """Class decorator: make a policy class available under `name` for decision `kind`."""
    def deco(cls: type) -> type:
        if not issubclass(cls, _BASES[kind]):
            raise TypeError(f"{cls.__name__}: a {kind} policy must subclass {_BASES[kind].__name__}")
        REGISTRY[kind][name] = cls
        return cls
    return deco


def make(kind: str, name: str):
    """An instance of the policy registered as `name` (a clear error naming the allowed ones)."""
    if kind not in REGISTRY:
        raise ValueError(f"scheduling: unknown decision {kind!r} (allowed: {', '.join(REGISTRY)})")
    if name not in REGISTRY[kind]:
        raise ValueError(f"scheduling.{kind} = {name!r}: unknown (allowed: {', '.join(REGISTRY[kind])})")
    return REGISTRY[kind][name]()


@dataclass(frozen=True)
class Policies:
    """The four policies one engine uses."""
    prefill_batching: PrefillBatching
    placement: Placement
    decode_admission: DecodeAdmission
    kv_placement: KvPlacement

    @classmethod
    def load(cls, names: dict | None = None) -> "Policies":
        names = dict(names or {})
        unknown = set(names) - set(REGISTRY)
        if unknown:
            raise ValueError(f"scheduling: unknown decision(s) {', '.join(sorted(unknown))} "
                             f"(allowed: {', '.join(REGISTRY)})")
        chosen = {**DEFAULTS, **names}
        return cls(**{kind: make(kind, chosen[kind]) for kind in REGISTRY})
