"""What the engine offers its parts: a registry of reporters the snapshot is assembled from, and a
registry of extensions added after the engine is built.

Reporters follow Mesa's DataCollector: each part declares the figures it reports as named
functions (`reports()` -> {snapshot field: reporter}), and a snapshot is the reporters read in
turn, so a new figure touches its own part and the Snapshot's field list, not the core. An
extension (the co-pool scheduler, requests from outside the run) registers itself by name; its
reports join the snapshot, and a name the engine's hot path reads as an attribute (a slot, such as
"external": one `is not None` test per call) is set by the registry, not from outside.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Protocol

Reporter = Callable[[], Any]      # a figure a part reports (Mesa's reporter), read when a snapshot is taken


class Reporting(Protocol):
    """A part that declares the snapshot fields it reports."""

    def reports(self) -> dict[str | tuple[str, ...], Reporter]: ...


class Reporters:
    """The snapshot's reporters by field; a key that is a tuple of fields is one reporter that
    returns their values together (in that order)."""

    def __init__(self, snapshot_cls: type):
        self.cls = snapshot_cls
        self.fields = tuple(f.name for f in dataclasses.fields(snapshot_cls))
        self._fns: dict[str | tuple[str, ...], Reporter] = {}
        self.owner: dict[str, str] = {}       # field -> the part that reports it

    def declare(self, owner: str, reports: dict[str | tuple[str, ...], Reporter]) -> None:
        """Add `owner`'s reporters; nothing is added if any of them names an unknown field or one
        that another part reports (or that it names twice)."""
        names = [n for key in reports for n in (key if isinstance(key, tuple) else (key,))]
        for i, name in enumerate(names):
            if name not in self.fields:
                raise ValueError(f"{owner} reports {name!r}: not a field of {self.cls.__name__} "
                                 f"(allowed: {', '.join(self.fields)})")
            if name in self.owner or name in names[:i]:
                raise ValueError(f"{owner} reports {name!r}: already reported by "
                                 f"{self.owner.get(name, owner)}")
        self.owner.update(dict.fromkeys(names, owner))
        self._fns.update(reports)

    def collect(self) -> dict[str, Any]:
        """Every declared figure, read now in declaration order."""
        out: dict[str, Any] = {}
        for key, fn in self._fns.items():
            if isinstance(key, tuple):
                out.update(zip(key, fn()))
            else:
                out[key] = fn()
        return out

    def assemble(self):
        """A snapshot of the declared figures (fields nobody reports keep their defaults)."""
        return self.cls(**self.collect())


class Extensions:
    """Parts registered on an engine by name after it is built."""

    def __init__(self, host: Any, reporters: Reporters, slots: tuple[str, ...] = ()):
        self._host, self._reporters, self._slots = host, reporters, slots
        self._parts: dict[str, Any] = {}

    def add(self, name: str, part: Reporting | Any) -> Any:
        """Register `part` as `name`: its reports (if it has any) join the snapshot; a slot name is
        also set on the engine for its hot path. Returns the part."""
        if name in self._parts:
            raise ValueError(f"extension {name!r}: already registered on this engine "
                             f"(registered: {', '.join(self._parts)})")
        if hasattr(part, "reports"):
            self._reporters.declare(name, part.reports())
        self._parts[name] = part
        if name in self._slots:
            setattr(self._host, name, part)
        return part

    def get(self, name: str) -> Any:
        """The part registered as `name`, or None."""
        return self._parts.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._parts
