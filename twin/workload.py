"""Request workloads for the engine: real traces and synthetic generators, as numpy arrays.

A run may replay a million requests, so a `Workload` holds one array per field (no per-request
objects) and every loader and generator is vectorised. Prompt prefixes are lists of KV-block ids in
CSR form (`block_ptr`, `block_ids`): the ids are prefix hashes, so the same id means the same reusable
KV block, which is what the EMS context cache keys on.

Hit-ratio definition (checked on the Mooncake conversation trace, whose README quotes 0.366): a block
counts as a hit when its id appeared in an earlier request. Counting only the contiguous leading run
of such blocks (what a prefix cache can use, and what `EMS.lookup` returns) gives the same number,
0.3664, because Mooncake ids are prefix hashes: a seen id implies its whole prefix was seen. The
synthetic generator keeps that property. `ideal_hit_ratio(..., prefix=False)` computes the other one.
"""
from __future__ import annotations

import csv
import json
import math
import os
import re
import stat
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

FORMATS = ("mooncake", "azure", "burstgpt")
_FORMAT_HELP = ("mooncake (JSONL: timestamp, input_length, output_length, hash_ids), "
                "azure (CSV header TIMESTAMP,ContextTokens,GeneratedTokens), "
                "burstgpt (CSV header Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type)")
_AZURE_HEADER = ("timestamp", "contexttokens", "generatedtokens")
_BURST_HEADER = ("timestamp", "model", "request tokens", "response tokens", "total tokens", "log type")
_MAX_REASONS = 5
_INT64 = (-(1 << 63), (1 << 63) - 1)
_INT32_MAX = (1 << 31) - 1
MOONCAKE_BLOCK_SIZE = 512  # traces/README.md: each hash id names one 512-token block
# Input bounds (assumptions, not model constants): what one trace may cost to load.
MAX_TRACE_BYTES = 64 << 20    # 21x the shipped Mooncake trace; parsing peaks at about 7x the file size
MAX_LINE_CHARS = 1 << 20      # a Mooncake row this long holds ~50,000 hash ids (25M prompt tokens)
MAX_TRACE_LINES = 4_000_000   # 16 bytes per line at the size limit; keeps the line list under 32 MB
MAX_TRACE_SPAN_S = 1e9        # timestamps (after conversion to seconds) within about 31 years

# Short names for the shared traces (traces/README.md); any relative path under a trace root also works.
TRACES = {
    "mooncake_conversation": "mooncake/conversation_trace.jsonl",
    "azure_conv": "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
}


class TraceError(ValueError):
    """A trace file cannot be used; the message names the file, line, field and what is allowed."""


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests sorted by arrival, one numpy array per field; block ids of request i are
    `block_ids[block_ptr[i]:block_ptr[i + 1]]`. `skipped`/`skip_reasons` report rows a lenient load
    dropped and `notes` anything else done to the input (e.g. sorting), so nothing changes silently."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    block_ptr: np.ndarray
    block_ids: np.ndarray
    block_size: int
    source: str
    skipped: int = 0
    skip_reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def __post_init__(self):
        for name, dtype in (("arrival_s", np.float64), ("input_tokens", np.int32),
                            ("output_tokens", np.int32), ("block_ptr", np.int64), ("block_ids", np.int64)):
            arr = np.ascontiguousarray(getattr(self, name), dtype=dtype)
            arr.flags.writeable = False  # frozen means frozen: the engine shares these arrays
            object.__setattr__(self, name, arr)
        n = len(self.arrival_s)
        if len(self.input_tokens) != n or len(self.output_tokens) != n or len(self.block_ptr) != n + 1:
            raise ValueError(f"Workload: array lengths disagree (arrival_s {n}, input_tokens "
                             f"{len(self.input_tokens)}, output_tokens {len(self.output_tokens)}, "
                             f"block_ptr {len(self.block_ptr)}; block_ptr must have n + 1 = {n + 1})")
        if self.block_ptr[0] != 0 or self.block_ptr[-1] != len(self.block_ids):
            raise ValueError(f"Workload: block_ptr must start at 0 and end at len(block_ids) = "
                             f"{len(self.block_ids)}")
        if n > 1 and np.any(np.diff(self.arrival_s) < 0):
            raise ValueError("Workload: arrival_s must be sorted (non-decreasing)")

    def __len__(self) -> int:
        return len(self.arrival_s)

    def blocks(self, i: int) -> np.ndarray:
        return self.block_ids[self.block_ptr[i]:self.block_ptr[i + 1]]

    @property
    def num_blocks(self) -> np.ndarray:
        return np.diff(self.block_ptr)

    def slice_time(self, t0: float, t1: float) -> Workload:
        """Requests with t0 <= arrival < t1; times are kept, not shifted to 0."""
        if not t0 <= t1:
            raise ValueError(f"slice_time: t0 = {t0} must be <= t1 = {t1}")
        lo, hi = np.searchsorted(self.arrival_s, [t0, t1], side="left")
        b0, b1 = self.block_ptr[lo], self.block_ptr[hi]
        return replace(self, arrival_s=self.arrival_s[lo:hi], input_tokens=self.input_tokens[lo:hi],
                       output_tokens=self.output_tokens[lo:hi],
                       block_ptr=self.block_ptr[lo:hi + 1] - b0, block_ids=self.block_ids[b0:b1],
                       source=f"{self.source} [{t0:g}, {t1:g}) s")

    def scaled(self, speedup: float) -> Workload:
        """Replay `speedup` times faster (arrivals divided by speedup): the same requests at a higher rate."""
        _check_number("scaled", "speedup", speedup, lo=0, lo_open=True)
        return replace(self, arrival_s=self.arrival_s / speedup, source=f"{self.source} x{speedup:g}")

    def summary(self) -> dict:
        n = len(self)
        span = float(self.arrival_s[-1] - self.arrival_s[0]) if n else 0.0
        out = {"source": self.source, "count": n, "span_s": span,
               "mean_rate_per_s": n / span if span > 0 else float("nan"),
               "block_size": self.block_size, "total_blocks": len(self.block_ids),
               "unique_blocks": int(np.unique(self.block_ids).size),
               "skipped": self.skipped}
        for name, arr in (("input", self.input_tokens), ("output", self.output_tokens)):
            # inverted_cdf: percentiles are observed values (matches traces/README.md figures)
            p50, p99 = np.percentile(arr, [50, 99], method="inverted_cdf") if n else (np.nan, np.nan)
            out.update({f"{name}_mean": float(arr.mean()) if n else float("nan"),
                        f"{name}_p50": float(p50), f"{name}_p99": float(p99)})
        out["ideal_block_hit_ratio"] = ideal_hit_ratio(self)
        out["ideal_token_hit_ratio"] = ideal_hit_ratio(self, tokens=True)
        return out


def ideal_hit_ratio(w: Workload, tokens: bool = False, prefix: bool = True) -> float:
    """Hit ratio of an infinite cache that sees the requests in order and stores each one's blocks.

    prefix=True counts only the leading run of previously seen blocks (what a KV cache can use);
    prefix=False counts every previously seen block. tokens=True weights blocks by their tokens
    (the last block of a prompt may be partial)."""
    total = len(w.block_ids)
    if total == 0:
        return 0.0
    lens = w.num_blocks
    req = np.repeat(np.arange(len(w)), lens)
    _, first, inverse = np.unique(w.block_ids, return_index=True, return_inverse=True)
    seen = req > req[first][inverse]  # id first appeared in an earlier request
    starts = w.block_ptr[:-1]
    if prefix:
        pos = np.arange(total) - np.repeat(starts, lens)
        miss_pos = np.where(seen, np.repeat(lens, lens), pos)
        nonempty = lens > 0
        hit_blocks = np.zeros(len(w), dtype=np.int64)
        hit_blocks[nonempty] = np.minimum.reduceat(miss_pos, starts[nonempty])
        if not tokens:
            return float(hit_blocks.sum() / total)
        hit_tok = np.minimum(hit_blocks * w.block_size, w.input_tokens)
        return float(hit_tok.sum() / w.input_tokens.sum(dtype=np.int64))
    if not tokens:
        return float(seen.sum() / total)
    sizes = np.full(total, w.block_size, dtype=np.int64)
    last = w.block_ptr[1:][lens > 0] - 1
    sizes[last] = (w.input_tokens - w.block_size * (lens - 1))[lens > 0]
    return float(sizes[seen].sum() / w.input_tokens.sum(dtype=np.int64))


# ---------------------------------------------------------------- trace files

def default_trace_path(name: str) -> Path:
    """Find a shared trace by short name (see TRACES) or relative path. Looks in $TWIN_TRACES, then
    ../shared/traces next to the repository, then twin/traces (for vendored copies)."""
    rel = TRACES.get(name, name)
    roots = [Path(os.environ["TWIN_TRACES"])] if os.environ.get("TWIN_TRACES") else []
    here = Path(__file__).resolve().parent
    roots += [here.parent.parent / "shared" / "traces", here / "traces"]
    for root in roots:
        if (root / rel).is_file():
            return root / rel
    raise TraceError(f"trace {name!r} not found as {rel} under any of: {', '.join(map(str, roots))} "
                     f"(known names: {', '.join(TRACES)}; set TWIN_TRACES to the folder holding it)")


class _Rejects:
    """Strict mode raises on the first bad row; lenient mode counts rows and keeps the first reasons."""

    def __init__(self, path: str, lenient: bool):
        self.path, self.lenient, self.count, self.reasons = path, lenient, 0, []

    def __call__(self, lineno: int, msg: str) -> None:
        text = f"{self.path} line {lineno}: {msg}"
        if not self.lenient:
            raise TraceError(text)
        self.count += 1
        if len(self.reasons) < _MAX_REASONS:
            self.reasons.append(text)


def load_trace(path: str | os.PathLike, fmt: str | None = None, lenient: bool = False,
               block_size: int | None = None) -> Workload:
    """Load a Mooncake, Azure or BurstGPT trace; the format is detected from the content unless named.

    Only a regular file of at most MAX_TRACE_BYTES is read (a FIFO, device or directory is refused,
    so no path can make the loader wait or read without end); parsing is `parse_trace_text`'s."""
    data = read_regular_file(path, MAX_TRACE_BYTES, "trace file", TraceError)
    return parse_trace_text(data, str(path), fmt, lenient, block_size)


def read_regular_file(path: str | os.PathLike, limit: int, what: str, error: type = ValueError) -> bytes:
    """At most `limit` bytes of a regular file, else `error` with one line naming the path.

    A FIFO, device, socket or directory is refused before any read (opened with O_NONBLOCK, so
    a FIFO without a writer cannot block), and a larger file is refused, not truncated."""
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise error(f"{name}: {what} not found") from None
    except (OSError, ValueError) as exc:
        raise error(f"{name}: cannot open {what} ({getattr(exc, 'strerror', None) or exc})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
                else "a character device" if stat.S_ISCHR(mode) else "a block device"
                if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file")
        raise error(f"{name}: is {kind}; a {what} must be a regular file")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise error(f"{name}: cannot read {what} ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise error(f"{name}: larger than {limit:,} bytes (the most a {what} may be)")
    return data


def parse_trace_text(text: str | bytes, name: str, fmt: str | None = None, lenient: bool = False,
                     block_size: int | None = None) -> Workload:
    """Parse a trace held in memory (an upload, or a file `load_trace` read) with the same checks.

    `name` labels messages ("NAME line N: field = value: what is allowed"). Bytes are decoded as
    UTF-8 line by line, so a line of binary garbage is one bad row. Traces without prefix
    information get fresh block ids for every request (no reuse). lenient=True skips bad rows and
    records how many and why on the Workload; rows out of arrival order are sorted and the
    Workload's `notes` say so."""
    if fmt is not None and fmt not in FORMATS:
        raise TraceError(f"{name}: fmt = {brief(fmt)}: unknown format (allowed: {_FORMAT_HELP})")
    if block_size is None:
        block_size = MOONCAKE_BLOCK_SIZE
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or \
            not 1 <= block_size <= 1 << 20:
        raise TraceError(f"{name}: block_size = {brief(block_size)}: must be an integer 1..1048576")
    if not isinstance(text, (str, bytes, bytearray)):
        raise TraceError(f"{name}: trace text must be str or bytes, got {type(text).__name__}")
    if len(text) > MAX_TRACE_BYTES:
        raise TraceError(f"{name}: larger than {MAX_TRACE_BYTES:,} bytes (the most a trace may be)")
    if not isinstance(text, str):
        text = bytes(text).decode("utf-8-sig", errors="surrogateescape")
    text = text.removeprefix("\ufeff")
    if text.count("\n") >= MAX_TRACE_LINES:
        raise TraceError(f"{name}: more than {MAX_TRACE_LINES:,} lines (the most a trace may have)")
    lines = text.split("\n")
    first = next((ln.strip() for ln in lines if ln.strip()), None)
    if first is None:
        raise TraceError(f"{name}: file is empty (expected one of: {_FORMAT_HELP})")
    fmt = fmt or _detect(name, first)
    rejects = _Rejects(name, lenient)
    rows = _good_lines(lines, rejects, _UNDECODABLE.search(text) is not None)
    if fmt == "mooncake":
        cols = _parse_mooncake(rows, int(block_size), rejects)
    else:
        cols = _parse_csv(name, rows, fmt, rejects)
    ts, inp, out, ptr, ids = cols
    if len(ts) == 0:
        why = f"; all {rejects.count} rows were bad, first: {rejects.reasons[0]}" if rejects.count else ""
        raise TraceError(f"{name}: no requests in the file{why}")
    if ids is None:  # no prefix info: unique, never-reused blocks per request
        nblk = -(-inp.astype(np.int64) // block_size)
        ptr = np.concatenate(([0], np.cumsum(nblk)))
        ids = np.arange(ptr[-1], dtype=np.int64)
    notes = []
    unsorted = int(np.sum(np.diff(ts) < 0))
    if unsorted:
        order = np.argsort(ts, kind="stable")
        ts, inp, out = ts[order], inp[order], out[order]
        ptr, ids = _reorder_csr(ptr, ids, order)
        notes.append(f"{name}: rows were not in arrival order ({unsorted} step(s) back in time); "
                     f"sorted stably by timestamp")
    return Workload(ts, inp, out, ptr, ids, int(block_size), source=f"{fmt}:{name}",
                    skipped=rejects.count, skip_reasons=tuple(rejects.reasons), notes=tuple(notes))


_UNDECODABLE = re.compile("[\udc80-\udcff]")   # bytes that were not UTF-8 (surrogateescape)


def _good_lines(lines: list[str], bad: "_Rejects", garbage: bool):
    """(line number, text) of each non-blank line that is UTF-8 (checked only if the text has
    undecodable bytes at all) and not over-long."""
    for lineno, line in enumerate(lines, 1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        if len(line) > MAX_LINE_CHARS:
            bad(lineno, f"line is {len(line):,} characters long (at most {MAX_LINE_CHARS:,})")
        elif garbage and _UNDECODABLE.search(line):
            bad(lineno, "not UTF-8 text (binary data?)")
        else:
            yield lineno, line


def brief(value, n: int = 40) -> str:
    """A bad value for a message: its repr, cut to n characters (a message never carries a whole row)."""
    text = repr(value)
    return text if len(text) <= n else text[:n - 3] + "..."


def _detect(name: str, first: str) -> str:
    if first.startswith("{"):
        return "mooncake"
    header = tuple(c.strip().lower() for c in first.split(","))
    if header == _AZURE_HEADER:
        return "azure"
    if header == _BURST_HEADER:
        return "burstgpt"
    raise TraceError(f"{name}: cannot tell the trace format from the first line {brief(first)} "
                     f"(allowed: {_FORMAT_HELP}; or pass fmt=)")


def _is_int(v) -> bool:
    return type(v) is int


def _parse_mooncake(rows, block_size: int, bad: _Rejects):
    ts, inp, out, lens, ids = [], [], [], [], []
    fields = ("timestamp", "input_length", "output_length", "hash_ids")
    max_ms = MAX_TRACE_SPAN_S * 1000
    for lineno, line in rows:
        try:
            r = json.loads(line)
        except json.JSONDecodeError as exc:
            bad(lineno, f"not valid JSON ({exc.msg} at column {exc.colno}); each line must be one "
                        f"JSON object with {', '.join(fields)}")
            continue
        except RecursionError:
            bad(lineno, "JSON nested too deeply; each line must be one flat JSON object with "
                        f"{', '.join(fields)}")
            continue
        except ValueError:      # an integer of more than 4300 digits
            bad(lineno, "a JSON number has too many digits")
            continue
        if type(r) is not dict:
            bad(lineno, f"expected a JSON object with {', '.join(fields)}, got {type(r).__name__}")
            continue
        missing = [f for f in fields if f not in r]
        if missing:
            bad(lineno, f"missing field {missing[0]} (required: {', '.join(fields)})")
            continue
        t, i, o, h = r["timestamp"], r["input_length"], r["output_length"], r["hash_ids"]
        if type(t) not in (int, float) or not 0 <= t <= max_ms:
            bad(lineno, f"timestamp = {brief(t)}: must be a number of milliseconds 0..{max_ms:.0e}")
        elif not _is_int(i) or not 1 <= i <= _INT32_MAX:
            bad(lineno, f"input_length = {brief(i)}: must be an integer >= 1 (and <= {_INT32_MAX})")
        elif not _is_int(o) or not 1 <= o <= _INT32_MAX:
            bad(lineno, f"output_length = {brief(o)}: must be an integer >= 1 (and <= {_INT32_MAX})")
        elif type(h) is not list or not all(type(x) is int for x in h):
            bad(lineno, f"hash_ids = {brief(h)}: must be a list of integers")
        elif len(h) != -(-i // block_size):
            bad(lineno, f"hash_ids has {len(h)} ids but input_length = {i} needs "
                        f"ceil({i} / {block_size}) = {-(-i // block_size)} (one per {block_size}-token block)")
        elif min(h) < _INT64[0] or max(h) > _INT64[1]:
            bad(lineno, "hash_ids: every id must fit in a signed 64-bit integer")
        else:
            ts.append(t)
            inp.append(i)
            out.append(o)
            lens.append(len(h))
            ids.extend(h)
    ptr = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    return (np.asarray(ts, dtype=np.float64) / 1000.0, np.asarray(inp, dtype=np.int32),
            np.asarray(out, dtype=np.int32), ptr, np.asarray(ids, dtype=np.int64))


def _parse_csv(name: str, rows, fmt: str, bad: _Rejects):
    """One CSV record per line (trace fields never hold a newline), so every error has its line."""
    expected = _AZURE_HEADER if fmt == "azure" else _BURST_HEADER
    rows = iter(rows)
    head_line, header = next(rows, (1, ""))
    header = _csv_row(header) or []
    if tuple(c.strip().lower() for c in header) != expected:
        raise TraceError(f"{name} line {head_line}: header {brief(','.join(header))} is not the {fmt} "
                         f"header {','.join(expected)!r} (allowed: {_FORMAT_HELP})")
    if fmt == "azure":
        t_field, i_field, o_field, cols = "TIMESTAMP", "ContextTokens", "GeneratedTokens", (0, 1, 2)
    else:
        t_field, i_field, o_field, cols = "Timestamp", "Request tokens", "Response tokens", (0, 2, 3)
    ts, inp, out, where = [], [], [], []
    for lineno, line in rows:
        row = _csv_row(line)
        if row is None:
            bad(lineno, "not valid CSV (a field is too long or badly quoted)")
            continue
        if len(row) != len(expected):
            bad(lineno, f"has {len(row)} fields, expected {len(expected)} ({','.join(expected)})")
            continue
        t, i, o = (row[c].strip() for c in cols)
        i, o = _positive_int(i), _positive_int(o)
        if i is None:
            bad(lineno, f"{i_field} = {brief(row[cols[1]])}: must be an integer >= 1 (and <= {_INT32_MAX})")
            continue
        if o is None:
            bad(lineno, f"{o_field} = {brief(row[cols[2]])}: must be an integer >= 1 (and <= {_INT32_MAX})")
            continue
        if fmt == "burstgpt":
            try:
                t = float(t)
            except ValueError:
                t = -1.0
            if not 0 <= t <= MAX_TRACE_SPAN_S:
                bad(lineno, f"{t_field} = {brief(row[0])}: must be a number of seconds 0..{MAX_TRACE_SPAN_S:.0e}")
                continue
        ts.append(t)
        inp.append(i)
        out.append(o)
        where.append(lineno)
    inp, out = np.asarray(inp, dtype=np.int32), np.asarray(out, dtype=np.int32)
    if fmt == "burstgpt":
        return np.asarray(ts, dtype=np.float64), inp, out, None, None
    stamps = _parse_wallclock(ts, where, t_field, bad)
    ok = ~np.isnat(stamps)
    stamps, inp, out = stamps[ok], inp[ok], out[ok]
    secs = (stamps - stamps.min()).astype(np.int64) / 1e9 if len(stamps) else np.zeros(0)
    if len(secs) and secs.max() > MAX_TRACE_SPAN_S:
        raise TraceError(f"{name}: {t_field} spans {secs.max():.3g} s: allowed at most "
                         f"{MAX_TRACE_SPAN_S:.0e} s from the first request to the last")
    return secs, inp, out, None, None


def _csv_row(line: str) -> list[str] | None:
    try:
        return next(csv.reader([line]), [])
    except csv.Error:
        return None


def _positive_int(text: str) -> int | None:
    if not 0 < len(text) <= 10:       # > 10 digits cannot be <= 2**31 - 1
        return None
    try:
        v = int(text)
    except ValueError:
        return None
    return v if 1 <= v <= _INT32_MAX else None


# strict: numpy alone also takes 'today', 'now', time zones, and wraps years past 2262
_WALLCLOCK = re.compile(r"(1[7-9]|2[01])\d\d-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d{1,9})?")


def _parse_wallclock(texts: list[str], where: list[int], field_name: str, bad: _Rejects) -> np.ndarray:
    """Parse 'YYYY-MM-DD HH:MM:SS.fffffff' (years 1700-2199); bad lines are reported by number."""
    allowed = "must be a date-time like 2023-11-16 18:15:46.6805900 (years 1700-2199)"
    valid = [bool(_WALLCLOCK.fullmatch(t)) for t in texts]
    try:
        stamps = np.array([t if v else "NaT" for t, v in zip(texts, valid)], dtype="datetime64[ns]")
    except ValueError:   # e.g. month 13: find which
        stamps = np.empty(len(texts), dtype="datetime64[ns]")
        for k, text in enumerate(texts):
            try:
                stamps[k] = np.datetime64(text if valid[k] else "NaT", "ns")
            except ValueError:
                stamps[k] = np.datetime64("NaT")
    for k in np.flatnonzero(np.isnat(stamps)):
        bad(where[k], f"{field_name} = {brief(texts[k])}: {allowed}")
    return stamps


def _reorder_csr(ptr: np.ndarray, ids: np.ndarray, order: np.ndarray):
    lens = np.diff(ptr)[order]
    new_ptr = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lens, out=new_ptr[1:])
    gather = np.repeat(ptr[:-1][order] - new_ptr[:-1], lens) + np.arange(new_ptr[-1])
    return new_ptr, ids[gather]


# ---------------------------------------------------------------- synthetic workloads

def _check_number(where: str, name: str, value, lo=None, hi=None, lo_open=False, integer=False):
    kind = "an integer" if integer else "a number"
    rng = " and ".join(s for s in (
        f"{'>' if lo_open else '>='} {lo}" if lo is not None else "",
        f"<= {hi}" if hi is not None else "") if s)
    ok = isinstance(value, (int, np.integer)) if integer else isinstance(value, (int, float, np.number))
    ok = ok and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (lo is None or (value > lo if lo_open else value >= lo)) and (hi is None or value <= hi)
    if not ok:
        raise ValueError(f"{where}: {name} = {value!r}: must be {kind}{' ' + rng if rng else ''}")


@dataclass(frozen=True)
class LengthDist:
    """Token-length distribution: fixed(n), uniform(lo, hi) (inclusive) or lognormal(mean, sigma, hi).

    lognormal is parameterised by its mean in tokens (so offered load is explicit) and sigma of
    log-length (shape); samples are rounded and clipped to [1, hi]."""

    kind: str
    a: float
    b: float = 0.0
    hi: int = _INT32_MAX

    @staticmethod
    def fixed(n: int) -> LengthDist:
        _check_number("LengthDist.fixed", "n", n, lo=1, hi=_INT32_MAX, integer=True)
        return LengthDist("fixed", n)

    @staticmethod
    def uniform(lo: int, hi: int) -> LengthDist:
        _check_number("LengthDist.uniform", "lo", lo, lo=1, hi=_INT32_MAX, integer=True)
        _check_number("LengthDist.uniform", "hi", hi, lo=lo, hi=_INT32_MAX, integer=True)
        return LengthDist("uniform", lo, hi)

    @staticmethod
    def lognormal(mean: float, sigma: float, hi: int | None = None) -> LengthDist:
        _check_number("LengthDist.lognormal", "mean", mean, lo=1)
        _check_number("LengthDist.lognormal", "sigma", sigma, lo=0, hi=5)
        hi = _INT32_MAX if hi is None else hi
        _check_number("LengthDist.lognormal", "hi", hi, lo=1, hi=_INT32_MAX, integer=True)
        return LengthDist("lognormal", float(mean), float(sigma), int(hi))

    @staticmethod
    def fit_lognormal(values) -> LengthDist:
        """Fit a trace's lengths: keep its mean (offered load), sigma of log-lengths (spread), and
        cap at its maximum so no sample is longer than anything observed."""
        v = np.asarray(values, dtype=np.float64)
        if v.size < 2 or not np.all(v >= 1):
            raise ValueError(f"LengthDist.fit_lognormal: values must be >= 1 and at least 2 of them "
                             f"(got {v.size}, min {v.min() if v.size else 'n/a'})")
        return LengthDist.lognormal(float(v.mean()), float(np.log(v).std()), int(v.max()))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, self.a, dtype=np.int32)
        if self.kind == "uniform":
            return rng.integers(int(self.a), int(self.b), size=n, endpoint=True, dtype=np.int32)
        mu = math.log(self.a) - self.b ** 2 / 2
        return np.clip(np.rint(rng.lognormal(mu, self.b, n)), 1, self.hi).astype(np.int32)

    def __str__(self) -> str:
        if self.kind == "fixed":
            return f"fixed({self.a:g})"
        if self.kind == "uniform":
            return f"uniform({self.a:g}, {self.b:g})"
        return f"lognormal(mean={self.a:g}, sigma={self.b:.3g}, hi={self.hi})"


# Paper calibration setting: 4K prompts, 256 output tokens (cloudmatrix384.md section 4, batch-8 row).
_DEFAULT_INPUT = LengthDist("fixed", 4096)
_DEFAULT_OUTPUT = LengthDist("fixed", 256)
MAX_SYNTHETIC_REQUESTS = 20_000_000  # memory guard: ~2 GB of arrays at 8 blocks per request


PREFIX_DEPTH = 1 << 20   # id space per shared document (blocks); bounds a shared prefix to 512M tokens


def synthetic(rate: float, duration_s: float, seed: int, arrival: str = "poisson", cv: float = 1.0,
              diurnal_amplitude: float = 0.0, diurnal_period_s: float = 86400.0,
              input: LengthDist = _DEFAULT_INPUT, output: LengthDist = _DEFAULT_OUTPUT,
              reuse_rate: float = 0.0, prefix_pool: int = 100, prefix_zipf: float = 0.0,
              block_size: int = MOONCAKE_BLOCK_SIZE, unique_base: int = 0,
              diurnal_phase_s: float = 0.0) -> Workload:
    """Generate requests over [0, duration_s) with mean rate `rate` req/s; one seed decides every draw.

    Arrivals: Poisson, or a gamma renewal process with coefficient of variation `cv` (cv > 1 is
    burstier). A diurnal rate(t) = rate * (1 + A sin(2 pi t / period)) is applied by thinning a process
    at the peak rate (for gamma, thinning also lowers burstiness slightly); `diurnal_phase_s` is where
    t = 0 falls in the cycle (a live run's chunk starting at t0 passes t0, so the sine runs on).

    Shared prefixes: a pool of `prefix_pool` documents (system prompts, shared files), chosen with
    Zipf(`prefix_zipf`) popularity (0 = uniform). Each prompt starts with the first k blocks of its
    document, k = reuse_rate * input / block_size rounded stochastically to a whole block (floor plus
    a Bernoulli of the fraction, so the mean is exact; always-rounding-down would bias a 4K prompt at
    90% reuse to 87.5%), capped at the prompt's full blocks; the rest are unique blocks. Document block
    ids are prefix hashes (document, depth), so once each document has been seen to the depths asked
    for, the infinite-cache token hit ratio converges to reuse_rate. Cold misses cost about
    prefix_pool x the longest prefix drawn per document, so heavy-tailed prompt lengths with a large
    pool converge slowly (lognormal sigma 1, 60k requests: 0.877 with 100 documents, 0.894 with 10).
    `unique_base` offsets the unique block ids, so a live run can generate chunk after chunk
    without two chunks sharing an id by accident."""
    where = "synthetic"
    _check_number(where, "rate", rate, lo=0, lo_open=True)
    _check_number(where, "duration_s", duration_s, lo=0, lo_open=True)
    _check_number(where, "seed", seed, lo=0, integer=True)
    if arrival not in ("poisson", "gamma"):
        raise ValueError(f"{where}: arrival = {arrival!r}: must be 'poisson' or 'gamma'")
    _check_number(where, "cv", cv, lo=0, lo_open=True, hi=100)
    if arrival == "poisson" and cv != 1.0:
        raise ValueError(f"{where}: cv = {cv!r}: only arrival='gamma' takes cv (Poisson has cv = 1)")
    _check_number(where, "diurnal_amplitude", diurnal_amplitude, lo=0, hi=1)
    _check_number(where, "diurnal_period_s", diurnal_period_s, lo=0, lo_open=True)
    for name, dist in (("input", input), ("output", output)):
        if not isinstance(dist, LengthDist):
            raise ValueError(f"{where}: {name} = {dist!r}: must be a LengthDist "
                             f"(LengthDist.fixed, .uniform, .lognormal or .fit_lognormal)")
    _check_number(where, "reuse_rate", reuse_rate, lo=0, hi=1)
    _check_number(where, "prefix_pool", prefix_pool, lo=1, hi=10_000_000, integer=True)
    _check_number(where, "prefix_zipf", prefix_zipf, lo=0, hi=10)
    _check_number(where, "block_size", block_size, lo=1, hi=1 << 20, integer=True)
    peak = rate * (1 + diurnal_amplitude)
    expected = peak * duration_s
    if expected > MAX_SYNTHETIC_REQUESTS:
        raise ValueError(f"{where}: rate * (1 + diurnal_amplitude) * duration_s = {expected:,.0f} requests: "
                         f"must be <= {MAX_SYNTHETIC_REQUESTS:,}")

    rng = np.random.default_rng(seed)
    t = _arrivals(rng, arrival, peak, cv, duration_s, expected)
    if diurnal_amplitude > 0:
        keep = rng.random(len(t)) * (1 + diurnal_amplitude) < \
            1 + diurnal_amplitude * np.sin(2 * np.pi * (t + diurnal_phase_s) / diurnal_period_s)
        t = t[keep]
    n = len(t)
    inp = input.sample(rng, n)
    out = output.sample(rng, n)

    nblk = -(-inp.astype(np.int64) // block_size)
    x = reuse_rate * inp / block_size
    k = np.floor(x).astype(np.int64)
    k += rng.random(n) < (x - k)
    k = np.minimum(k, inp // block_size)
    weights = 1.0 / np.arange(1, prefix_pool + 1) ** prefix_zipf
    doc = rng.choice(prefix_pool, size=n, p=weights / weights.sum())

    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(nblk, out=ptr[1:])
    pos = np.arange(ptr[-1]) - np.repeat(ptr[:-1], nblk)
    shared = pos < np.repeat(k, nblk)
    depth = PREFIX_DEPTH   # fixed, so that ids stay stable across separately generated chunks
    unique_id = prefix_pool * depth + unique_base + np.cumsum(~shared) - 1
    ids = np.where(shared, np.repeat(doc, nblk) * depth + pos, unique_id)
    src = (f"synthetic(rate={rate:g}, duration_s={duration_s:g}, seed={seed}, arrival={arrival}"
           f"{f', cv={cv:g}' if arrival == 'gamma' else ''}"
           f"{f', diurnal_amplitude={diurnal_amplitude:g}, diurnal_period_s={diurnal_period_s:g}' if diurnal_amplitude else ''}"
           f", input={input}, output={output}, reuse_rate={reuse_rate:g}, prefix_pool={prefix_pool}"
           f"{f', prefix_zipf={prefix_zipf:g}' if prefix_zipf else ''}, block_size={block_size})")
    return Workload(t, inp, out, ptr, ids, int(block_size), source=src)


def _arrivals(rng, arrival: str, rate: float, cv: float, duration_s: float, expected: float) -> np.ndarray:
    """Renewal arrivals in [0, duration_s), drawn in a few large chunks."""
    shape = 1.0 if arrival == "poisson" else 1.0 / cv ** 2
    chunks, end = [], 0.0
    size = int(expected + 8 * max(cv, 1.0) * math.sqrt(expected) + 100)
    while end < duration_s:
        gaps = (rng.exponential(1.0 / rate, size) if arrival == "poisson"
                else rng.gamma(shape, 1.0 / (rate * shape), size))
        chunk = end + np.cumsum(gaps)
        chunks.append(chunk)
        end = chunk[-1]
        size = int(max((duration_s - end) * rate * 1.2, 0) + 100)
    t = np.concatenate(chunks)
    return t[:np.searchsorted(t, duration_s, side="left")]
