"""Faults as a component the engine notifies: spec.py (kinds, policy, validation), manager.py
(injection, detection, recovery timelines, reports), recovery.py (what a fault acts on),
random.py (random failures at catalog MTBFs), files.py (fault scenario files)."""
from twin.engine.faults.files import describe, load_fault_file
from twin.engine.faults.manager import FaultManager, nodes_of
from twin.engine.faults.random import failure_rates, random_classes
from twin.engine.faults.spec import (EXAMPLES, FAULT_KEYS, KINDS, MAX_RECORDS, NETWORK, RANDOM_MAX, UB_KINDS, Fault,
                   Policy, check_random, check_shape, check_spec, defaults)

__all__ = ["EXAMPLES", "FAULT_KEYS", "KINDS", "MAX_RECORDS", "NETWORK", "RANDOM_MAX", "UB_KINDS", "describe",
           "Fault", "FaultManager", "Policy", "check_random", "check_shape", "check_spec", "defaults",
           "failure_rates", "load_fault_file", "nodes_of", "random_classes"]
