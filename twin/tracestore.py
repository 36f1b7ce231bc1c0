"""Traces a dashboard viewer may pick: names only, never a path from the browser.

A viewer chooses among (1) the traces the twin ships (`twin.workload.TRACES`), (2) traces the
server operator registers in the environment, read here and never shown to viewers:
``TWIN_DASHBOARD_TRACES="azure_code=/data/AzureCode.csv,burst=/data/burstgpt.csv"``, and
(3) trace files uploaded through the page: at most UPLOAD_MAX_BYTES, parsed in memory by the same
validating parsers as trace files (`twin.workload.parse_trace_text`), kept by content hash (the last
UPLOAD_SLOTS, so memory stays bounded). The engine gets a shipped name, an operator's path that
this module resolved, or an upload key that `workload()` looks up.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import re
import threading
from collections import OrderedDict

from .workload import TRACES, Workload, parse_trace_text

log = logging.getLogger(__name__)

ENV = "TWIN_DASHBOARD_TRACES"
UPLOAD_PREFIX = "upload:"
UPLOAD_MAX_BYTES = 2 * 1024 * 1024     # a decoded upload; about 10,000 Mooncake rows
UPLOAD_SLOTS = 16                      # uploads kept in memory (least recently used dropped)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

_lock = threading.Lock()
_uploads: OrderedDict[str, tuple[str, Workload]] = OrderedDict()   # key -> (label, workload)


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
        raise TraceChoiceError(f"trace = {shown}: that upload is no longer kept (upload it again)")
    raise TraceChoiceError(f"trace = {shown}: not a trace this dashboard offers ({allowed_text()})")


def resolve(choice: str | None) -> str | None:
    """What the engine is given for a checked choice: the operator's path for a registered name,
    else the name or upload key itself."""
    if choice is None:
        return None
    return registered().get(choice, choice)


def label(choice: str | None) -> str | None:
    """How a choice is shown: an upload by its file name."""
    with _lock:
        hit = _uploads.get(choice) if choice else None
    return f"{hit[0]} (uploaded)" if hit else choice


def workload(key) -> Workload | None:
    """The parsed upload under `key`, or None."""
    if not isinstance(key, str) or not key.startswith(UPLOAD_PREFIX):
        return None
    with _lock:
        hit = _uploads.get(key)
        if hit is not None:
            _uploads.move_to_end(key)
    return hit[1] if hit else None


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
        w = parse_trace_text(text, name)
    except RecursionError:
        raise TraceChoiceError(f"upload {name}: a JSON line is nested too deeply to be a trace row") from None
    key = UPLOAD_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:16]
    with _lock:
        _uploads[key] = (name, w)
        _uploads.move_to_end(key)
        while len(_uploads) > UPLOAD_SLOTS:
            _uploads.popitem(last=False)
    return key, w


def _safe_name(filename) -> str:
    """A short, printable label for an upload's file name (the name is never used as a path)."""
    base = str(filename or "trace").replace("\\", "/").rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9_.-]", "_", base)[:48] or "trace"

