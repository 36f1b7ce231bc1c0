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

from twin.predict.comm import distinct

PATH = Path(__file__).parent.parent / "catalog" / "kernels.toml"
OPS = ("dispatch", "combine")
METRICS = ("us", "gbps_ranks", "gbps_nodes")
RANKS = {"die": 1, "npu": 2, "gpu": 1}



def log_interp(xs: list[float], ys: list[float], x: float) -> float | None:
    """y at x, linear in log2 x between the two points around it (xs ascending); None outside them."""
    for i in range(len(xs) - 1):
        if xs[i] <= x <= xs[i + 1]:
            w = math.log2(x / xs[i]) / math.log2(xs[i + 1] / xs[i])
            return ys[i] + w * (ys[i + 1] - ys[i])
    return ys[0] if len(xs) == 1 and xs[0] == x else None

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
        value = log_interp([r.ep for r in rows], [r.seconds for r in rows], ep)
        if value is not None:
            return value
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


def find(system: str, kernel: str, op: str, top_k: int = 8, gpus_per_node: int = 8,
         ep: int | None = None) -> Table | None:
    """The table of this kernel on this system; of several (intranode, internode), the one whose
    EP range holds `ep`, else the one nearest to it in log2 EP."""
    cands = [t for t in tables(top_k, gpus_per_node) if (t.system, t.kernel, t.op) == (system, kernel, op)]
    if not cands or ep is None:
        return cands[0] if cands else None
    return min(cands, key=lambda t: 0.0 if t.rows[0].ep <= ep <= t.rows[-1].ep else
               min(abs(math.log2(ep / t.rows[0].ep)), abs(math.log2(ep / t.rows[-1].ep))))


def lookup(system: str, kernel: str, op: str, ep: int, tokens: float, rank_dies: int,
           top_k: int = 8, gpus_per_node: int = 8) -> Lookup:
    """The table's time for this shape, or None with the reason the roofline is used instead."""
    t = find(system, kernel, op, top_k, gpus_per_node, ep)
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


# ---- compute kernels by shape (GEMM by M, N, K; prefill attention by sequence length) --------------
LAYOUTS = ("dense", "contiguous", "masked")


@dataclass(frozen=True)
class ShapeRow:
    m: float                  # M per group (GEMM) or sequence length (attention)
    n: int
    k: int
    tflops: float


@dataclass(frozen=True)
class ComputeTable:
    name: str
    kind: str                 # "gemm" or "attention"
    layout: str               # GEMM layout; "prefill" for attention
    chips: tuple[str, ...]
    source: str
    rows: tuple[ShapeRow, ...]

    def series(self, n: int = 0, k: int = 0) -> tuple[ShapeRow, ...]:
        return tuple(sorted((r for r in self.rows if (r.n, r.k) == (n, k)), key=lambda r: r.m))


@dataclass(frozen=True)
class ShapeHit:
    tflops: float | None      # inside the rows: the interpolated rate; else None
    edge: ShapeRow | None     # outside the rows' M: the nearest row (the caller scales its roofline)
    source: str


def interpolate(rows: tuple[ShapeRow, ...], m: float) -> float:
    """Rate at `m`, linear in log2 m between the two rows around it."""
    value = log_interp([r.m for r in rows], [r.tflops for r in rows], m)
    if value is not None:
        return value
    raise ValueError(f"M = {m:g} is outside rows M {rows[0].m:g}-{rows[-1].m:g}")


@lru_cache(maxsize=2)
def compute_tables(path: Path = PATH) -> tuple[ComputeTable, ...]:
    raw = tomllib.loads(path.read_text())
    out = []
    for kind in ("gemm", "attention"):
        for i, t in enumerate(raw.get(kind, [])):
            where = f"kernels.toml [[{kind}]] #{i + 1}"
            layout = t.get("layout", "prefill")
            if kind == "gemm" and layout not in LAYOUTS:
                raise ValueError(f"{where}: layout = {layout!r}: allowed {', '.join(LAYOUTS)}")
            if not t.get("source") or not t.get("rows") or not t.get("chips"):
                raise ValueError(f"{where}: needs a source, chips and at least one row")
            rows = []
            for r in t["rows"]:
                m = r.get("m", r.get("seq", 0))
                if not m > 0 or not r.get("tflops", 0) > 0:
                    raise ValueError(f"{where}: row {r}: needs m (or seq) > 0 and tflops > 0")
                rows.append(ShapeRow(m, r.get("n", 0), r.get("k", 0), r["tflops"]))
            out.append(ComputeTable(t["name"], kind, layout, tuple(t["chips"]), t["source"], tuple(rows)))
    return tuple(out)


def roof_rows(rows: tuple[ShapeRow, ...], roof) -> tuple[ShapeRow, ...]:
    """The rows with `tflops` replaced by each row's time over the roofline's (`roof(m)`, seconds of
    one M x N x K GEMM): interpolating that ratio in log2 M follows the roofline's turn from
    weight-bound to compute-bound between rows far apart in M (64 to 4,096)."""
    return tuple(ShapeRow(r.m, r.n, r.k, 2 * r.m * r.n * r.k / (r.tflops * 1e12) / roof(r.m)) for r in rows)


def gemm_rate(rows: tuple[ShapeRow, ...], m: float, roof) -> float:
    """TFLOPS at `m` between GEMM rows: the roofline's time at m times the interpolated ratio."""
    n, k = rows[0].n, rows[0].k
    return 2 * m * n * k / (roof(m) * interpolate(roof_rows(rows, roof), m)) / 1e12


def shape(chip: str, kind: str, layout: str, m: float, n: int = 0, k: int = 0,
          roof=None) -> ShapeHit:
    """A compute kernel's rate at this shape from its table, or why the roofline applies. GEMM rows
    are interpolated through the roofline `roof` when given (gemm_rate), attention rows by rate."""
    what = f"{kind} {layout}" if kind == "gemm" else f"{layout} attention"
    mine = [t for t in compute_tables() if (t.kind, t.layout) == (kind, layout) and chip in t.chips]
    if not mine:
        return ShapeHit(None, None, f"roofline: no {what} table on {chip}")
    t = next((t for t in mine if t.series(n, k)), None)
    if t is None:
        return ShapeHit(None, None, f"roofline: no {what} row of shape {n}x{k}")
    rows = t.series(n, k)
    tag = "M" if kind == "gemm" else "length"
    if rows[0].m <= m <= rows[-1].m:
        exact = any(r.m == m for r in rows)
        rate = gemm_rate(rows, m, roof) if roof and kind == "gemm" else interpolate(rows, m)
        return ShapeHit(rate, None,
                        f"table: {t.name}, {'row' if exact else 'interpolated'} ({tag} {m:.0f})")
    edge = rows[0] if m < rows[0].m else rows[-1]
    return ShapeHit(None, edge, f"roofline scaled to table {t.name} at {tag} {edge.m:g} "
                                f"(outside {tag} {rows[0].m:g}-{rows[-1].m:g})")


# ---- decode attention by regime (FlashMLA) ------------------------------------------------------
@dataclass(frozen=True)
class DecodeAttention:
    name: str
    chips: tuple[str, ...]
    dtype: str
    tflops: float             # compute-bound rate
    gbps: float               # memory-bound rate
    source: str

    def seconds(self, flops: float, kv_bytes: float, share: float = 1.0) -> tuple[float, str]:
        """Time of one call on `share` of the chip, and which published regime bounds it."""
        compute, memory = flops / (self.tflops * 1e12 * share), kv_bytes / (self.gbps * 1e9)
        return max(compute, memory), "compute-bound" if compute >= memory else "memory-bound"


@lru_cache(maxsize=2)
def decode_attention_tables(path: Path = PATH) -> tuple[DecodeAttention, ...]:
    out = []
    for i, t in enumerate(tomllib.loads(path.read_text()).get("decode_attention", [])):
        if not t.get("source") or not t.get("chips") or not t.get("tflops", 0) > 0 or not t.get("gbps", 0) > 0:
            raise ValueError(f"kernels.toml [[decode_attention]] #{i + 1}: needs a source, chips, "
                             f"tflops > 0 and gbps > 0")
        out.append(DecodeAttention(t["name"], tuple(t["chips"]), t.get("dtype", "bf16"), t["tflops"],
                                   t["gbps"], t["source"]))
    return tuple(out)


def decode_attention(chip: str, dtype: str, kv_dtype_bytes: float) -> tuple[DecodeAttention | None, str]:
    """The decode attention table of this chip at this precision, or why the roofline applies."""
    mine = [t for t in decode_attention_tables() if chip in t.chips]
    if not mine:
        return None, f"roofline: no decode attention table on {chip}"
    t = next((t for t in mine if t.dtype == dtype and kv_dtype_bytes == 2), None)
    if t is None:
        return None, (f"roofline: {mine[0].name} is BF16 (attention {dtype}, "
                      f"{kv_dtype_bytes:g}-byte KV)")
    return t, f"table: {t.name}"
