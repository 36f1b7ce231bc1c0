"""SimPy serving engine of the twin: see core.Engine (the clock and the wiring of its components)."""
from twin.engine import commands
from twin.engine.commands import Command, Ticket
from twin.engine.commands import parse as command
from twin.engine.core import Engine
from twin.engine.scenario import Scenario, list_scenarios, load_scenario
from twin.engine.snapshot import HISTORY_KEYS, Snapshot

__all__ = ["Command", "Engine", "Scenario", "Snapshot", "HISTORY_KEYS", "Ticket", "command", "commands",
           "list_scenarios", "load_scenario"]
