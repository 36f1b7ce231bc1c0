"""SimPy serving engine of the twin: see core.Engine (the clock and the wiring of its components)."""
from . import commands
from .commands import Command, Ticket
from .commands import parse as command
from .core import Engine
from .scenario import Scenario, list_scenarios, load_scenario
from .snapshot import HISTORY_KEYS, Snapshot

__all__ = ["Command", "Engine", "Scenario", "Snapshot", "HISTORY_KEYS", "Ticket", "command", "commands",
           "list_scenarios", "load_scenario"]
