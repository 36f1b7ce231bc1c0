"""Traces a dashboard viewer may pick: names only, never a path from the browser.

A viewer chooses among (1) the traces the twin ships (`twin.workload.TRACES`), (2) traces the
server operator registers in the environment, read here and never shown to viewers:
``TWIN_DASHBOARD_TRACES="azure_code=/data/AzureCode.csv,burst=/data/burstgpt.csv"``, and
(3) trace files uploaded through the page: at most UPLOAD_MAX_BYTES, parsed in memory by the same
validating parsers as trace files (`twin.workload.parse_trace_text`) within UPLOAD_LIMITS, kept by
content hash. All kept uploads together cost at most UPLOAD_STORE_BYTES; the least recently used is
dropped first, but never one a live twin replays: a twin `pin`s the upload it runs (and a sandbox
copying it pins it again), so no twin points at a trace it cannot re-open. The engine gets a
shipped name, an operator's path that this module resolved, or an upload key that `workload()`
looks up (registered with `twin.workload.resolve`, which the engine asks). A viewer is shown an upload's `label`, never its key (the key re-opens the upload).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import re
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Hashable

from twin.workload import TRACES, UPLOAD_LIMITS, Workload, parse_trace_text
from twin.workload.resolve import add_store

log = logging.getLogger(__name__)

ENV = "TWIN_DASHBOARD_TRACES"
UPLOAD_PREFIX = "upload:"
UPLOAD_MAX_BYTES = 2 * 1024 * 1024     # a decoded upload; about 10,000 Mooncake rows
# Assumptions: the worst upload UPLOAD_LIMITS allows holds about 7 MiB of arrays (4 MiB of block ids,
# 3 MiB for 2**17 rows), so all uploads together, across all browsers, hold at most about 9 of those;
# each kept upload is also charged UPLOAD_ENTRY_BYTES for its objects, so tiny ones cannot pile up.
UPLOAD_STORE_BYTES = 64 << 20
UPLOAD_ENTRY_BYTES = 4096
GONE = "that upload is no longer kept (upload it again)"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass
class _Kept:
    """One kept upload, and the twins that replay it (holder -> pins) and so keep it."""
    label: str
    workload: Workload
    cost: int
    holders: Counter = field(default_factory=Counter)


_lock = threading.Lock()
_uploads: OrderedDict[str, _Kept] = OrderedDict()     # least recently used first


class TraceChoiceError(ValueError):
    """A trace the dashboard does not offer; the message names the allowed ones."""


def registered() -> dict[str, str]:
    """Operator-registered traces, name -> path (malformed entries are logged and skipped)."""
    out: dict[str, str] = {}
    for item in filter(None, (x.strip() for x in os.environ.get(ENV, "").split(","))):
        name, sep, path = item.partition("=")
        name = name.strip()
        if not sep or not _NAME.match(name) or not path.strip() or name in TRACES:
            log.warning("%s: entry %r ignored (expected name=path, name of letters, digits, _ . -)",
                        ENV, item[:80])
            continue
        out[name] = path.strip()
    return out


def names() -> list[str]:
    """Every trace name a viewer may pick (uploads not included)."""
    return [*TRACES, *registered()]


def allowed_text() -> str:
    return (f"allowed: {', '.join(names())}, empty for the scenario's own workload, or upload a "
            f"trace file of at most {UPLOAD_MAX_BYTES // (1024 * 1024)} MB")


def check(choice) -> str | None:
    """The viewer's trace choice if the dashboard offers it (None = the scenario's own workload)."""
    if choice is None or choice == "":
        return None
    if isinstance(choice, str) and (choice in names() or workload(choice) is not None):
        return choice
    shown = repr(choice)[:48] if isinstance(choice, str) else f"a {type(choice).__name__}"
    if isinstance(choice, str) and choice.startswith(UPLOAD_PREFIX):
        raise TraceChoiceError(f"trace: {GONE}")
    raise TraceChoiceError(f"trace = {shown}: not a trace this dashboard offers ({allowed_text()})")


def resolve(choice: str | None) -> str | None:
    """What the engine is given for a checked choice: the operator's path for a registered name,
    else the name or upload key itself."""
    if choice is None:
        return None
    return registered().get(choice, choice)


def label(choice: str | None) -> str | None:
    """How a choice is shown: an upload by its file name (never by its key, even once dropped)."""
    if not _is_upload(choice):
        return choice
    with _lock:
        hit = _uploads.get(choice)
    return f"{hit.label} (uploaded)" if hit else "an upload no longer kept"


def workload(key) -> Workload | None:
    """The parsed upload under `key`, or None."""
    if not _is_upload(key):
        return None
    with _lock:
        hit = _uploads.get(key)
        if hit is not None:
            _uploads.move_to_end(key)
    return hit.workload if hit else None


add_store(workload)     # the engine opens an upload key through twin.workload.resolve


def cost(w: Workload) -> int:
    """Bytes a kept upload is charged: its arrays, plus UPLOAD_ENTRY_BYTES for the objects."""
    arrays = (w.arrival_s, w.input_tokens, w.output_tokens, w.block_ptr, w.block_ids)
    return UPLOAD_ENTRY_BYTES + sum(a.nbytes for a in arrays)


def held_bytes() -> int:
    """What all kept uploads are charged together (at most UPLOAD_STORE_BYTES)."""
    with _lock:
        return sum(k.cost for k in _uploads.values())


def pin(key: str | None, holder: Hashable) -> None:
    """Keep upload `key` while `holder` (a twin) replays it; pins count, so a twin reset onto the
    upload it runs holds it twice until the old run is dropped. A name that is not an upload needs
    no pin. TraceChoiceError if the upload is no longer kept."""
    if not _is_upload(key):
        return
    with _lock:
        hit = _uploads.get(key)
        if hit is None:
            raise TraceChoiceError(f"trace: {GONE}")
        hit.holders[holder] += 1


def unpin(key: str | None, holder: Hashable) -> None:
    """Drop one of `holder`'s pins on `key` (nothing if it holds none)."""
    with _lock:
        hit = _uploads.get(key) if _is_upload(key) else None
        if hit is not None and holder in hit.holders:
            hit.holders[holder] -= 1
            if not hit.holders[holder]:
                del hit.holders[holder]


def release(holder: Hashable) -> None:
    """Drop every pin `holder` has (a twin that stops, whatever resets it had under way)."""
    with _lock:
        for hit in _uploads.values():
            hit.holders.pop(holder, None)


def pinned(key: str) -> bool:
    with _lock:
        hit = _uploads.get(key)
        return bool(hit and hit.holders)


def _is_upload(key) -> bool:
    return isinstance(key, str) and key.startswith(UPLOAD_PREFIX)


def upload(contents, filename) -> tuple[str, Workload]:
    """Check and keep an upload (a dcc.Upload data URL); returns its key and workload.

    The size is checked on the encoded text before anything is decoded, and nothing is written
    to disk. Raises TraceChoiceError (or TraceError from the parsers) with a one-line reason."""
    name = _safe_name(filename)
    if not isinstance(contents, str) or "," not in contents:
        raise TraceChoiceError(f"upload {name}: expected a file's contents (a data URL)")
    b64 = contents.split(",", 1)[1]
    if len(b64) * 3 // 4 > UPLOAD_MAX_BYTES + 2:
        raise TraceChoiceError(f"upload {name}: larger than the {UPLOAD_MAX_BYTES // (1024 * 1024)} MB "
                               "allowed for a trace upload")
    try:
        text = base64.b64decode(b64, validate=True).decode("utf-8-sig")
    except (binascii.Error, ValueError):
        raise TraceChoiceError(f"upload {name}: not a UTF-8 text file (allowed: a Mooncake JSONL, "
                               "Azure CSV or BurstGPT CSV trace)") from None
    try:
        w = parse_trace_text(text, name, limits=UPLOAD_LIMITS)
    except RecursionError:
        raise TraceChoiceError(f"upload {name}: a JSON line is nested too deeply to be a trace row") from None
    key = UPLOAD_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:16]
    with _lock:
        hit = _uploads.get(key)
        if hit is None:
            hit = _Kept(name, w, cost(w))
            _make_room(name, hit.cost)
            _uploads[key] = hit
        hit.label = name
        _uploads.move_to_end(key)
    return key, hit.workload


def _make_room(name: str, need: int) -> None:
    """Drop least recently used unpinned uploads until `need` more bytes fit; refuse (dropping
    nothing) if they cannot. The caller holds _lock."""
    most = UPLOAD_STORE_BYTES
    if need > most:
        raise TraceChoiceError(f"upload {name}: needs {need:,} bytes in memory, more than the {most:,} "
                               "all uploads may hold")
    held = sum(k.cost for k in _uploads.values())
    pinned_bytes = sum(k.cost for k in _uploads.values() if k.holders)
    if pinned_bytes + need > most:
        raise TraceChoiceError(f"upload {name}: the server's memory for uploads ({most:,} bytes) is held by "
                               "traces that running twins replay; try again when a sandbox closes or a twin is reset")
    for key in [k for k, v in _uploads.items() if not v.holders]:     # least recently used first
        if held + need <= most:
            break
        held -= _uploads.pop(key).cost


def _safe_name(filename) -> str:
    """A short, printable label for an upload's file name (the name is never used as a path)."""
    base = str(filename or "trace").replace("\\", "/").rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9_.-]", "_", base)[:48] or "trace"

