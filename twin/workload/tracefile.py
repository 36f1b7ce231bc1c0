"""Trace files: Mooncake (JSONL with prefix hash ids), Azure and BurstGPT (CSV), parsed into a
`Workload` with a one-line error naming the file, line, field and what is allowed for any bad row
(or, lenient, the bad rows counted and skipped).
"""
from __future__ import annotations

import csv
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from twin.workload.model import _INT32_MAX, _INT64, MOONCAKE_BLOCK_SIZE, TraceError, Workload

FORMATS = ("mooncake", "azure", "burstgpt")
_FORMAT_HELP = ("mooncake (JSONL: timestamp, input_length, output_length, hash_ids), "
                "azure (CSV header TIMESTAMP,ContextTokens,GeneratedTokens), "
                "burstgpt (CSV header Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type)")
_AZURE_HEADER = ("timestamp", "contexttokens", "generatedtokens")
_BURST_HEADER = ("timestamp", "model", "request tokens", "response tokens", "total tokens", "log type")
_MAX_REASONS = 5
# Input bounds (assumptions, not model constants): what one trace may cost to load.
MAX_TRACE_BYTES = 64 << 20    # 21x the shipped Mooncake trace; parsing peaks at about 7x the file size
MAX_LINE_CHARS = 1 << 20      # a Mooncake row this long holds ~50,000 hash ids (25M prompt tokens)
MAX_TRACE_LINES = 4_000_000   # 16 bytes per line at the size limit; keeps the line list under 32 MB
MAX_TRACE_SPAN_S = 1e9        # timestamps (after conversion to seconds) within about 31 years


@dataclass(frozen=True)
class TraceLimits:
    """What one trace may cost once parsed, counted row by row before its arrays exist: the byte
    limits above bound the text, these bound what the text expands to (a 40-byte CSV row may ask
    for 2**31 tokens, i.e. 4 million 8-byte block ids)."""
    rows: int          # requests in the trace
    row_tokens: int    # input tokens, and output tokens, of one request
    block_ids: int     # block ids in total: hash_ids, or ceil(input tokens / block size) made up per row
    tokens: int        # input + output tokens in total (what the engine will simulate)


# Assumptions, not model constants. Shipped traces: Mooncake conversation 12,031 rows, largest
# prompt 126,195 tokens, 288,500 hash ids, 148.9M tokens; Azure conv 19,366 rows, 52,913 ids made up.
# A trace file (CLI, operator): int32 tokens per row as stored; 2**25 ids are 256 MiB, 116x Mooncake.
FILE_LIMITS = TraceLimits(rows=MAX_TRACE_LINES, row_tokens=_INT32_MAX, block_ids=1 << 25, tokens=1 << 34)
# An upload (2 MB from a stranger): 2x the largest shipped prompt per row; 2**19 ids are 4 MiB, 2.6x
# the 205,520 in the first 2 MB of Mooncake; 2**29 tokens are 5.1x its 106M; 2**17 rows, 6.8x Azure conv.
UPLOAD_LIMITS = TraceLimits(rows=1 << 17, row_tokens=1 << 18, block_ids=1 << 19, tokens=1 << 29)

# Short names for the shared traces (traces/README.md); any relative path under a trace root also works.
TRACES = {
    "mooncake_conversation": "mooncake/conversation_trace.jsonl",
    "azure_conv": "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
}



class TraceNotFound(TraceError):
    """A trace name with no file under the trace roots. The message lists the roots (for a CLI user);
    `name` alone is what a dashboard viewer may be told."""

    def __init__(self, message: str, name: str):
        super().__init__(message)
        self.name = name


def default_trace_path(name: str) -> Path:
    """Find a trace by short name (see TRACES) or relative path. Looks in $TWIN_TRACES (the operator's
    folder), then twin/traces (the vendored copies)."""
    rel = TRACES.get(name, name)
    roots = [Path(os.environ["TWIN_TRACES"])] if os.environ.get("TWIN_TRACES") else []
    here = Path(__file__).resolve().parents[1]      # twin/
    roots.append(here / "traces")
    for root in roots:
        if (root / rel).is_file():
            return root / rel
    raise TraceNotFound(f"trace {name!r} not found as {rel} under any of: {', '.join(map(str, roots))} "
                        f"(known names: {', '.join(TRACES)}; set TWIN_TRACES to the folder holding it)", name)


class _Budget:
    """The running totals of a trace's accepted rows: a row that takes one past its limit stops the
    whole trace (a budget is not a bad row to skip), before the row's data is kept."""

    def __init__(self, name: str, limits: TraceLimits, block_size: int):
        self.name, self.limits, self.block_size = name, limits, block_size
        self.rows = self.block_ids = self.tokens = 0

    def take(self, lineno: int, blocks: int, tokens: int, blocks_are: str, tokens_are: str) -> None:
        """Count one row; `blocks_are` and `tokens_are` say which fields the totals come from."""
        self.rows += 1
        self.block_ids += blocks
        self.tokens += tokens
        lim = self.limits
        for what, total, most in (("rows", self.rows, lim.rows), (f"block ids ({blocks_are})", self.block_ids,
                                  lim.block_ids), (f"tokens ({tokens_are})", self.tokens, lim.tokens)):
            if total > most:
                raise TraceError(f"{self.name} line {lineno}: {what} in total reach {total:,} with this row: "
                                 f"allowed at most {most:,} per trace")


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
               block_size: int | None = None, limits: TraceLimits = FILE_LIMITS) -> Workload:
    """Load a Mooncake, Azure or BurstGPT trace; the format is detected from the content unless named.

    Only a regular file of at most MAX_TRACE_BYTES is read (a FIFO, device or directory is refused,
    so no path can make the loader wait or read without end); parsing is `parse_trace_text`'s."""
    data = read_regular_file(path, MAX_TRACE_BYTES, "trace file", TraceError)
    return parse_trace_text(data, str(path), fmt, lenient, block_size, limits)


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
                     block_size: int | None = None, limits: TraceLimits = FILE_LIMITS) -> Workload:
    """Parse a trace held in memory (an upload, or a file `load_trace` read) with the same checks.

    `name` labels messages ("NAME line N: field = value: what is allowed"). Bytes are decoded as
    UTF-8 line by line, so a line of binary garbage is one bad row. Traces without prefix
    information get fresh block ids for every request (no reuse). lenient=True skips bad rows and
    records how many and why on the Workload; rows out of arrival order are sorted and the
    Workload's `notes` say so. `limits` (a dashboard upload gets UPLOAD_LIMITS) stops the trace,
    lenient or not, at the first row that takes it past a total."""
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
    budget = _Budget(name, limits, int(block_size))
    if fmt == "mooncake":
        cols = _parse_mooncake(rows, int(block_size), rejects, budget)
    else:
        cols = _parse_csv(name, rows, fmt, rejects, budget)
    ts, inp, out, ptr, ids = cols
    if len(ts) == 0:
        why = f"; all {rejects.count} rows were bad, first: {rejects.reasons[0]}" if rejects.count else ""
        raise TraceError(f"{name}: no requests in the file{why}")
    if ids is None:  # no prefix info: unique, never-reused blocks per request (counted by `budget`)
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


def _parse_mooncake(rows, block_size: int, bad: _Rejects, budget: _Budget):
    ts, inp, out, lens, ids = [], [], [], [], []
    fields = ("timestamp", "input_length", "output_length", "hash_ids")
    max_ms = MAX_TRACE_SPAN_S * 1000
    most = budget.limits.row_tokens
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
        elif not _is_int(i) or not 1 <= i <= most:
            bad(lineno, f"input_length = {brief(i)}: must be an integer >= 1 (and <= {most})")
        elif not _is_int(o) or not 1 <= o <= most:
            bad(lineno, f"output_length = {brief(o)}: must be an integer >= 1 (and <= {most})")
        elif type(h) is not list or not all(type(x) is int for x in h):
            bad(lineno, f"hash_ids = {brief(h)}: must be a list of integers")
        elif len(h) != -(-i // block_size):
            bad(lineno, f"hash_ids has {len(h)} ids but input_length = {i} needs "
                        f"ceil({i} / {block_size}) = {-(-i // block_size)} (one per {block_size}-token block)")
        elif min(h) < _INT64[0] or max(h) > _INT64[1]:
            bad(lineno, "hash_ids: every id must fit in a signed 64-bit integer")
        else:
            budget.take(lineno, len(h), i + o, "hash_ids", "input_length + output_length")
            ts.append(t)
            inp.append(i)
            out.append(o)
            lens.append(len(h))
            ids.extend(h)
    ptr = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    return (np.asarray(ts, dtype=np.float64) / 1000.0, np.asarray(inp, dtype=np.int32),
            np.asarray(out, dtype=np.int32), ptr, np.asarray(ids, dtype=np.int64))


def _parse_csv(name: str, rows, fmt: str, bad: _Rejects, budget: _Budget):
    """One CSV record per line (trace fields never hold a newline), so every error has its line.
    A row is counted in `budget` before its timestamp is checked (an Azure one is parsed after the
    loop), so a lenient load may count a row it later skips: the budget errs on the safe side."""
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
    most, bs = budget.limits.row_tokens, budget.block_size
    for lineno, line in rows:
        row = _csv_row(line)
        if row is None:
            bad(lineno, "not valid CSV (a field is too long or badly quoted)")
            continue
        if len(row) != len(expected):
            bad(lineno, f"has {len(row)} fields, expected {len(expected)} ({','.join(expected)})")
            continue
        t, i, o = (row[c].strip() for c in cols)
        i, o = _positive_int(i, most), _positive_int(o, most)
        if i is None:
            bad(lineno, f"{i_field} = {brief(row[cols[1]])}: must be an integer >= 1 (and <= {most})")
            continue
        if o is None:
            bad(lineno, f"{o_field} = {brief(row[cols[2]])}: must be an integer >= 1 (and <= {most})")
            continue
        if fmt == "burstgpt":
            try:
                t = float(t)
            except ValueError:
                t = -1.0
            if not 0 <= t <= MAX_TRACE_SPAN_S:
                bad(lineno, f"{t_field} = {brief(row[0])}: must be a number of seconds 0..{MAX_TRACE_SPAN_S:.0e}")
                continue
        budget.take(lineno, -(-i // bs), i + o, f"{i_field} / {bs}, rounded up", f"{i_field} + {o_field}")
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


def _positive_int(text: str, most: int) -> int | None:
    """An integer 1..most (most <= 2**31 - 1), else None; long text is refused before int() reads it."""
    if not 0 < len(text) <= 10:       # > 10 digits cannot be <= 2**31 - 1
        return None
    try:
        v = int(text)
    except ValueError:
        return None
    return v if 1 <= v <= most else None


# strict: numpy alone also takes 'today', 'now', time zones, and wraps years past 2262. Assumption:
# years 1970..2100, so any two stamps differ by less than 2**63 ns (292 years) and the span check
# after it sees the true span (1700 and 2199 wrapped to a negative arrival).
_WALLCLOCK = re.compile(r"(19[7-9]\d|20\d\d|2100)-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d{1,9})?")


def _parse_wallclock(texts: list[str], where: list[int], field_name: str, bad: _Rejects) -> np.ndarray:
    """Parse 'YYYY-MM-DD HH:MM:SS.fffffff' (years 1970-2100); bad lines are reported by number."""
    allowed = "must be a date-time like 2023-11-16 18:15:46.6805900 (years 1970-2100)"
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
