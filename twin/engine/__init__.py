"""SimPy serving engine of the twin: see core.Engine."""
from .core import Command, Engine
from .scenario import Scenario, list_scenarios, load_scenario
from .snapshot import HISTORY_KEYS, Snapshot

__all__ = ["Command", "Engine", "Scenario", "Snapshot", "HISTORY_KEYS", "list_scenarios",
           "load_scenario"]
