"""Kernel tables by shape (twin/catalog/kernels.toml): published kernel times the predictor uses
where a shape falls inside them, interpolated between rows; outside them the caller falls back to
its roofline model and reports that it did (`Lookup.source`).

Between two rows of one table the time is interpolated linearly in log2(EP) (the tables are taken at
EP doubling); a table holds one token count, so a shape at another token count is outside it. A row
given as a bandwidth is turned back into the kernel's time with the byte count its benchmark used.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .comm import distinct

PATH = Path(__file__).parent.parent / "catalog" / "kernels.toml"
OPS = ("dispatch", "combine")
METRICS = ("us", "gbps_ranks", "gbps_nodes")
RANKS = {"die": 1, "npu": 2, "gpu": 1}


@dataclass(frozen=True)
class Row:
    ep: int
    seconds: float
    published: float
    source: str


@dataclass(frozen=True)
class Table:
    name: str
    system: str
    kernel: str
    op: str
    rank: str
    tokens: float
    metric: str
    nbytes: float             # bytes per token copy the benchmark counts (bandwidth metrics)
    rows: tuple[Row, ...]

    def covers(self, ep: int, tokens: float) -> bool:
        return tokens == self.tokens and self.rows[0].ep <= ep <= self.rows[-1].ep

    def seconds(self, ep: int, rows: tuple[Row, ...] | None = None) -> float:
        """Time at `ep`, linear in log2 EP between the two rows around it (of `rows`, default all)."""
        rows = rows or self.rows
        for lo, hi in zip(rows, rows[1:]):
            if lo.ep <= ep <= hi.ep:
                w = math.log2(ep / lo.ep) / math.log2(hi.ep / lo.ep)
                return lo.seconds + w * (hi.seconds - lo.seconds)
        if len(rows) == 1 and rows[0].ep == ep:
            return rows[0].seconds
        raise ValueError(f"EP{ep} is outside table {self.name} {self.op} "
                         f"(EP{rows[0].ep}-{rows[-1].ep})")

    def published(self, ep: int, tokens: float, seconds: float, top_k: int,
                  gpus_per_node: int = 8) -> float:
        """`seconds` of a call at (ep, tokens) in the table's published metric."""
        if self.metric == "us":
            return seconds * 1e6
        return tokens * _copies(self.metric, ep, top_k, gpus_per_node) * self.nbytes / seconds / 1e9


@dataclass(frozen=True)
class Lookup:
    seconds: float | None     # None: outside every table, the caller's roofline applies
    source: str               # "table: ..." or "roofline: ..."
    table: Table | None = None


def _copies(metric: str, ep: int, top_k: int, gpus_per_node: int) -> float:
    """Copies of a token the benchmark counts: distinct ranks (own included), or distinct nodes."""
    if metric == "gbps_ranks":
        return distinct(ep, top_k)
    nodes = math.ceil(ep / gpus_per_node)
    return distinct(min(nodes, 4), top_k)       # DeepSeek-V3 routes a token to at most 4 nodes


def _to_seconds(metric, value, ep, tokens, nbytes, top_k, gpn) -> float:
    if metric == "us":
        return value * 1e-6
    return tokens * _copies(metric, ep, top_k, gpn) * nbytes / (value * 1e9)


def _error(i: int, what: str) -> ValueError:
    return ValueError(f"kernels.toml [[alltoall]] #{i + 1}: {what}")


@lru_cache(maxsize=4)
def tables(top_k: int = 8, gpus_per_node: int = 8, path: Path = PATH) -> tuple[Table, ...]:
    """Every table of kernels.toml, one per (table, op), rows sorted by EP and turned into seconds."""
    raw = tomllib.loads(path.read_text())
    out = []
    for i, t in enumerate(raw.get("alltoall", [])):
        if t.get("metric") not in METRICS:
            raise _error(i, f"metric = {t.get('metric')!r}: allowed {', '.join(METRICS)}")
        if t.get("rank") not in RANKS:
            raise _error(i, f"rank = {t.get('rank')!r}: allowed {', '.join(RANKS)}")
        if not t.get("source") or not t.get("rows"):
            raise _error(i, "needs a source and at least one row")
        for op in OPS:
            nbytes = t.get("bytes_per_token", {}).get(op, 0)
            if t["metric"] != "us" and nbytes <= 0:
                raise _error(i, f"metric {t['metric']} needs bytes_per_token.{op} > 0")
            rows = []
            for r in sorted(t["rows"], key=lambda r: r["ep"]):
                if not r.get("source") or r.get(op, 0) <= 0 or r.get("ep", 0) < 2:
                    raise _error(i, f"row {r}: needs ep >= 2, {op} > 0 and a source")
                rows.append(Row(r["ep"], _to_seconds(t["metric"], r[op], r["ep"], t["tokens"], nbytes,
                                                     top_k, gpus_per_node), r[op], r["source"]))
            out.append(Table(t["name"], t["system"], t["kernel"], op, t["rank"], float(t["tokens"]),
                             t["metric"], nbytes, tuple(rows)))
    return tuple(out)


def find(system: str, kernel: str, op: str, top_k: int = 8, gpus_per_node: int = 8) -> Table | None:
    return next((t for t in tables(top_k, gpus_per_node)
                 if (t.system, t.kernel, t.op) == (system, kernel, op)), None)


def lookup(system: str, kernel: str, op: str, ep: int, tokens: float, rank_dies: int,
           top_k: int = 8, gpus_per_node: int = 8) -> Lookup:
    """The table's time for this shape, or None with the reason the roofline is used instead."""
    t = find(system, kernel, op, top_k, gpus_per_node)
    if t is None:
        return Lookup(None, f"roofline: no kernel table for {kernel} {op} on {system}")
    if RANKS[t.rank] != rank_dies:
        return Lookup(None, f"roofline: table {t.name} is per {t.rank}", t)
    if not t.covers(ep, tokens):
        return Lookup(None, f"roofline: outside table {t.name} ({t.tokens:g} tokens per rank, "
                            f"EP{t.rows[0].ep}-{t.rows[-1].ep})", t)
    exact = any(r.ep == ep for r in t.rows)
    return Lookup(t.seconds(ep), f"table: {t.name}, {'row' if exact else 'interpolated'} "
                                 f"(EP{ep}, {tokens:g} tokens per rank)", t)
