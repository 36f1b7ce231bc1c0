"""Typed commands: a change requested from outside the engine thread, validated once when it is
built (a ValueError naming the field and what is allowed) and applied once by the engine, between
advances, at the sim time it lands. The live session and the dashboard build these; the engine's
command log replays them exactly.

A fault's target can only be checked against a topology: the session checks it with the faults
component's `check_spec` on the twin's system before sending; the engine checks it again at the
time it lands (the moment decides whether `at_s` is in the past) and logs a refusal.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from typing import ClassVar

from .. import settings
from ..i18n import N_
from .faults import Policy, check_random


class Command(ABC):
    """Base of the engine's commands; `apply(engine)` is called once, by the engine thread.
    `name` is how the command appears in the event log (and in `parse`)."""

    name = "command"

    @abstractmethod
    def apply(self, eng) -> None:
        """Change the engine (at the sim time the command lands)."""


class _SettingCommand(Command):
    """A command whose one field is a declared setting (twin.settings): checked against it when the
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

    def apply(self, eng) -> None:
        eng.set_rate(self.rate)
        eng.log("rate", N_("arrival rate set to %(rate)s req/s"), rate=f"{self.rate:.3g}")


@dataclass(frozen=True)
class SetLoad(_SettingCommand):
    """Arrival rate as a fraction of the deployment's capacity (`Engine.capacity_rps`)."""
    name = setting = "load"

    fraction: float

    def apply(self, eng) -> None:
        rate = self.fraction * eng.capacity_rps()
        eng.set_rate(rate)
        eng.log("rate", N_("load set to %(pct)s of capacity (%(rate)s req/s)"), pct=f"{self.fraction:.0%}",
                rate=f"{rate:.3g}")


@dataclass(frozen=True)
class InjectFault(Command):
    """A fault table {kind, target, at_s?, duration_s?, factor?, period_s?} (twin.engine.faults)."""
    name = "fault"

    spec: dict

    def __post_init__(self):
        if not isinstance(self.spec, dict):
            raise ValueError("fault: allowed a table {kind, target, at_s?, duration_s?, factor?, period_s?}")
        object.__setattr__(self, "spec", dict(self.spec))

    def apply(self, eng) -> None:
        eng.faults.inject(self.spec)


@dataclass(frozen=True)
class SetPolicy(Command):
    """Fault-recovery policy fields to change (the rest stay as they are)."""
    name = "policy"

    fields: dict

    def __post_init__(self):
        if not isinstance(self.fields, dict) or not self.fields:
            raise ValueError("policy: allowed a table of fields, e.g. {'detect_s': 60, "
                             "'redundant_experts': true, 'weights_from': 'ems' | 'obs'}")
        Policy.load(**self.fields)          # unknown fields and bad values: refused here
        object.__setattr__(self, "fields", dict(self.fields))

    def apply(self, eng) -> None:
        eng.faults.policy = Policy.load(**{**vars(eng.faults.policy), **self.fields})
        eng.log("policy", N_("fault policy: %(fields)s"), fields=", ".join(f"{k}={v}" for k, v in self.fields.items()))


@dataclass(frozen=True)
class SetRandom(Command):
    """Random failures at this many failure-clock hours per simulated second (0 = off)."""
    name = "random"

    hours_per_sim_s: float

    def __post_init__(self):
        object.__setattr__(self, "hours_per_sim_s",
                           check_random({"hours_per_sim_s": self.hours_per_sim_s})["hours_per_sim_s"])

    def apply(self, eng) -> None:
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

    def apply(self, eng) -> None:
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
