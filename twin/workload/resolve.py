"""A scenario's trace, by name, to its parsed workload: first in the stores that hold parsed traces in
memory (the live service registers its uploads here, so the engine, a floor below, never imports it),
then as a file (a path, or a short name under the trace roots)."""
from __future__ import annotations

from typing import Callable, Hashable

from twin.workload.model import Workload
from twin.workload.tracefile import default_trace_path, load_trace

_stores: list[Callable[[Hashable], Workload | None]] = []


def add_store(lookup: Callable[[Hashable], Workload | None]) -> None:
    """Consult `lookup(name)` (a Workload, or None when it holds no such trace) before any file."""
    if lookup not in _stores:
        _stores.append(lookup)


def open_trace(trace: str, fmt: str = "auto", lenient: bool = False) -> Workload:
    """The workload of `trace`: a stored one, else the file it names (format detected unless `fmt`)."""
    for lookup in _stores:
        if (w := lookup(trace)) is not None:
            return w
    path = trace if "/" in trace or trace.endswith((".jsonl", ".csv")) else default_trace_path(trace)
    return load_trace(path, None if fmt == "auto" else fmt, lenient=lenient)
