"""The region's global router: which supernode takes each arriving request.

Policies register by name (`@register("least-load")`), as the engine's scheduling policies do.
Each sees a `View`: per supernode its load as of the last window edge plus what the router has
sent it since (so one window's arrivals do not all pile onto the supernode that looked idlest at
its start), whether it is up, and the router's own prefix index. Load is counted in requests
(in flight or on their way) per request/s of capacity: seconds of work, comparable across
unequal supernodes.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

AFFINITY_SLACK = 0.25      # assumption: affinity keeps a supernode while its load is within 25% of the least loaded
INDEX_BLOCKS = 200_000     # assumption: prefix blocks the router remembers per supernode (newest kept)

REGISTRY: dict[str, type["Router"]] = {}


def register(name: str):
    def deco(cls):
        cls.name = name
        REGISTRY[name] = cls
        return cls
    return deco


def make(name: str) -> "Router":
    if name not in REGISTRY:
        raise ValueError(f"router policy {name!r}: unknown (allowed: {', '.join(REGISTRY)})")
    return REGISTRY[name]()


class PrefixIndex:
    """The router's view of which prompt blocks each supernode has served (the newest
    INDEX_BLOCKS each): it does not see evictions inside a supernode's EMS."""

    def __init__(self, members: int):
        self.held: list[dict[int, None]] = [{} for _ in range(members)]

    def lead(self, s: int, blocks: list[int]) -> int:
        """How many of the prompt's leading blocks supernode `s` holds."""
        held, k = self.held[s], 0
        while k < len(blocks) and blocks[k] in held:
            k += 1
        return k

    def add(self, s: int, blocks: list[int]) -> None:
        held = self.held[s]
        for b in blocks:
            held.pop(b, None)
            held[b] = None
        over = len(held) - INDEX_BLOCKS
        if over > 0:
            for b in list(held)[:over]:
                del held[b]


class View:
    """What a policy may read: loads, health, capacities, the prefix index, session homes."""

    def __init__(self, capacity: np.ndarray):
        self.capacity = capacity                  # requests/s each supernode sustains (its perf model)
        self.base = np.zeros(len(capacity))       # requests in flight or on their way, at the last edge
        self.sent = np.zeros(len(capacity))       # sent since that edge
        self.up = np.ones(len(capacity), dtype=bool)
        self.index = PrefixIndex(len(capacity))
        self.sessions: dict[int, int] = {}

    def edge(self, load: np.ndarray) -> None:
        self.base, self.sent = np.asarray(load, dtype=float), np.zeros(len(self.capacity))

    def load(self) -> np.ndarray:
        """Seconds of work per supernode; a supernode that is down is infinitely loaded."""
        return np.where(self.up, (self.base + self.sent) / self.capacity, np.inf)

    def least(self) -> int:
        return int(np.argmin(self.load()))        # ties: the lowest index

    def near_least(self, s: int, load: np.ndarray | None = None) -> bool:
        """Whether `s` is up and within AFFINITY_SLACK of the least loaded."""
        load = self.load() if load is None else load
        return bool(self.up[s]) and load[s] <= load.min() * (1 + AFFINITY_SLACK) + 1e-12


class Router(ABC):
    name = ""

    @abstractmethod
    def choose(self, view: View, blocks: list[int], session: int) -> int:
        """The supernode for a request with prompt blocks `blocks` from `session`."""


@register("least-load")
class LeastLoad(Router):
    """The supernode with the least work per unit of capacity."""

    def choose(self, view, blocks, session):
        return view.least()

    def assign(self, view, n: int) -> np.ndarray:
        """The supernodes of the next `n` requests at once: exactly what `n` calls of `choose`
        would give (with `sent` counted after each), without a Python step per request. Request
        m to supernode i would see load (base_i + sent_i + m) / capacity_i; the n choices are the n
        smallest of those levels over all i, in order (ties: the lower index), found from the
        water level that n requests fill (bisection) and one sort."""
        up = np.flatnonzero(view.up)
        start, cap = (view.base + view.sent)[up], view.capacity[up]
        count = lambda level: np.clip(np.ceil(level * cap - start), 0, n).sum()
        lo, hi = 0.0, float(((start + n) / cap).max())
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if count(mid) < n else (lo, mid)
        take = np.minimum(np.clip(np.ceil(hi * cap - start), 0, n).astype(np.int64) + 2, n)
        who = np.repeat(np.arange(len(up)), take)
        m = np.arange(len(who)) - np.repeat(np.cumsum(take) - take, take)
        level = (view.base[up][who] + (view.sent[up][who] + m)) / cap[who]
        return up[who[np.lexsort((who, level))[:n]]]


@register("prefix-affinity")
class PrefixAffinity(Router):
    """Of the supernodes within the slack of the least loaded, the one holding the longest prefix of
    the prompt (ties: the lowest index); the least loaded when none holds any: cache hits without
    hot spots."""

    def choose(self, view, blocks, session):
        if blocks:
            load = view.load()
            best, most = -1, 0
            for s in range(len(load)):
                if view.near_least(s, load):
                    n = view.index.lead(s, blocks)
                    if n > most:
                        best, most = s, n
            if best >= 0:
                return best
        return view.least()


@register("session-affinity")
class SessionAffinity(Router):
    """A session stays where its first request went (its conversation's KV is there), unless that
    supernode is down or loaded past the slack."""

    def choose(self, view, blocks, session):
        home = view.sessions.get(session)
        if home is None or not view.near_least(home):
            home = view.sessions[session] = view.least()
        return home
