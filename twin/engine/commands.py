"""Typed commands and their answers: a change requested from outside the engine thread, validated
once when it is built (a ValueError naming the field and what is allowed), queued once
(`Engine.submit`, which returns a `Ticket`) and applied once by the thread that owns the engine,
between advances, at the sim time it lands. The ticket then says accepted (at sim time t) or
refused, with the reason. The live session, the serve API and headless callers all go this way;
the engine's command log replays accepted commands exactly.

A fault's shape (kind, target, numbers) is checked against a topology of the system: at the edge
(`InjectFault.checked`, which the live session and the serve API use) or, for a command built
bare, by the engine when it lands. What depends on the moment (at_s already past, the part already
down) only the engine can decide, when the fault lands; a refusal is the ticket's reason.
"""
from __future__ import annotations

import itertools
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, fields, replace
from typing import Callable, ClassVar

from twin.model import settings
from twin.i18n import N_
from twin.engine.faults import Policy, check_random, check_shape
from twin.engine.ports import CommandTarget

PENDING, ACCEPTED, REFUSED = "pending", "accepted", "refused"


class Ticket:
    """The answer to one command: pending until the engine's thread applies it, then accepted (at
    sim time `t`) or refused with `reason` (English; the dashboard translates it). `id` is unique in
    the process, so a browser can hold it and ask again on its next poll."""

    _ids = itertools.count(1)

    def __init__(self, name: str, said=None):
        self.id = next(Ticket._ids)
        self.name = name            # the command's or action's name
        self.said = said            # what was asked, as the sender worded it (a twin.i18n Said, or text)
        self.command: Command | None = None     # the command it answers (set by Engine.submit)
        self.state = PENDING
        self.reason = ""
        self.t: float | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._hooks: list[Callable[["Ticket"], None]] = []

    def on_done(self, fn: Callable[["Ticket"], None]) -> "Ticket":
        """Call fn(ticket) once it is answered (in the answering thread; at once if it already is)."""
        with self._lock:
            if self.state == PENDING:
                self._hooks.append(fn)
                return self
        fn(self)
        return self

    def accept(self, t: float | None = None) -> "Ticket":
        return self._answer(ACCEPTED, "", t)

    def refuse(self, reason: str, t: float | None = None) -> "Ticket":
        return self._answer(REFUSED, str(reason), t)

    def _answer(self, state: str, reason: str, t: float | None) -> "Ticket":
        with self._lock:
            if self.state != PENDING:        # answered once; later answers are ignored
                return self
            self.state, self.reason, self.t = state, reason, t
            hooks, self._hooks = self._hooks, []
        for fn in hooks:
            fn(self)
        self._done.set()             # after the hooks: a waiter sees what they did (the log line)
        return self

    def wait(self, timeout: float | None = None) -> bool:
        """Block until answered (or `timeout` s); True if answered."""
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self.state != PENDING

    @property
    def accepted(self) -> bool:
        return self.state == ACCEPTED

    @property
    def refused(self) -> bool:
        return self.state == REFUSED

    def as_dict(self) -> dict:
        return {"id": self.id, "name": self.name, "state": self.state, "reason": self.reason,
                "t": None if self.t is None else round(self.t, 3)}

    def __repr__(self) -> str:
        return f"Ticket({self.id}, {self.name}, {self.state}{': ' + self.reason if self.reason else ''})"


class Command(ABC):
    """Base of the engine's commands; `apply(engine)` is called once, by the engine thread.
    `name` is how the command appears in the event log (and in `parse`)."""

    name = "command"

    @abstractmethod
    def apply(self, eng: CommandTarget) -> None:
        """Change the engine (at the sim time the command lands)."""


class _SettingCommand(Command):
    """A command whose one field is a declared setting (twin.model.settings): checked against it when the
    command is built (ValueError "setting = value: allowed <range>") and stored as a float."""

    setting: ClassVar[str]

    def __post_init__(self):
        field = fields(self)[0].name
        object.__setattr__(self, field, settings.get(self.setting).check(getattr(self, field)))


@dataclass(frozen=True)
class SetRate(_SettingCommand):
    """Arrivals per second from now on."""
    name = setting = "rate"

    rate: float

    def apply(self, eng: CommandTarget) -> None:
        eng.set_rate(self.rate)
        eng.log("rate", N_("arrival rate set to %(rate)s req/s"), rate=f"{self.rate:.3g}")


@dataclass(frozen=True)
class SetLoad(_SettingCommand):
    """Arrival rate as a fraction of the deployment's capacity (`Engine.capacity_rps`)."""
    name = setting = "load"

    fraction: float

    def apply(self, eng: CommandTarget) -> None:
        rate = self.fraction * eng.capacity_rps()
        eng.set_rate(rate)
        eng.log("rate", N_("load set to %(pct)s of capacity (%(rate)s req/s)"), pct=f"{self.fraction:.0%}",
                rate=f"{rate:.3g}")


@dataclass(frozen=True)
class InjectFault(Command):
    """A fault table {kind, target, at_s?, duration_s?, factor?, period_s?} (twin.engine.faults).
    `checked`: the table is the canonical spec `check_shape` returned (see `InjectFault.checked_on`)."""
    name = "fault"

    spec: dict
    checked: bool = False

    def __post_init__(self):
        if not isinstance(self.spec, dict):
            raise ValueError("fault: allowed a table {kind, target, at_s?, duration_s?, factor?, period_s?}")
        object.__setattr__(self, "spec", dict(self.spec))

    @classmethod
    def checked_on(cls, spec: dict, topo) -> "InjectFault":
        """The command with its shape checked against `topo` (a topology of the engine's system): the
        one validation of a fault sent from outside; the engine then decides only what the moment does."""
        return cls(check_shape(spec, topo), checked=True)

    def apply(self, eng: CommandTarget) -> None:
        eng.faults.land(self.spec, self.checked)


@dataclass(frozen=True)
class SetPolicy(Command):
    """Fault-recovery policy fields to change (the rest stay as they are)."""
    name = "policy"

    fields: dict

    def __post_init__(self):
        if not isinstance(self.fields, dict) or not self.fields:
            raise ValueError("policy: allowed a table of fields, e.g. {'detect_s': 60, "
                             "'redundant_experts': true, 'weights_from': 'ems' | 'obs'}")
        Policy.load(**self.fields)          # unknown fields and bad values: refused here, once
        object.__setattr__(self, "fields", dict(self.fields))

    def apply(self, eng: CommandTarget) -> None:
        eng.faults.policy = replace(eng.faults.policy, **self.fields)    # each field checked when built
        eng.log("policy", N_("fault policy: %(fields)s"), fields=", ".join(f"{k}={v}" for k, v in self.fields.items()))


@dataclass(frozen=True)
class SetRandom(Command):
    """Random failures at this many failure-clock hours per simulated second (0 = off)."""
    name = "random"

    hours_per_sim_s: float

    def __post_init__(self):
        object.__setattr__(self, "hours_per_sim_s",
                           check_random({"hours_per_sim_s": self.hours_per_sim_s})["hours_per_sim_s"])

    def apply(self, eng: CommandTarget) -> None:
        h = self.hours_per_sim_s
        eng.faults.set_random(h)
        if h:
            eng.log("policy", N_("random failures on (%(h)s failure-clock hours per simulated second)"), h=f"{h:g}")
        else:
            eng.log("policy", N_("random failures off"))


@dataclass(frozen=True)
class Note(Command):
    """A line in the engine's event log (e.g. who did what on the dashboard)."""
    name = "event"

    message: str
    kind: str = "note"

    def apply(self, eng: CommandTarget) -> None:
        eng.log(self.kind, str(self.message))


KINDS: dict[str, type] = {c.name: c for c in (SetRate, SetLoad, InjectFault, SetPolicy, SetRandom, Note)}


def parse(kind: str, args: dict | None = None) -> Command:
    """A command from its name and a table of arguments (e.g. from a file or a form); ValueError
    naming what is allowed."""
    if kind not in KINDS:
        raise ValueError(f"command {kind!r}: unknown (allowed: {', '.join(KINDS)})")
    if kind in ("fault", "policy"):       # their argument is the table itself
        return KINDS[kind](args)
    if not isinstance(args, dict):
        raise ValueError(f"{kind}: allowed a table of {', '.join(KINDS[kind].__dataclass_fields__)}")
    try:
        return KINDS[kind](**args)
    except TypeError:
        fields = ", ".join(KINDS[kind].__dataclass_fields__)
        raise ValueError(f"{kind}: arguments {', '.join(args) or 'none'} (allowed: {fields})") from None
