"""Faults as a component the engine notifies: kinds.py (the registry of fault kinds), spec.py (policy,
validation, the record of a fault), manager.py (injection, detection, recovery timelines, reports),
recovery.py (what a fault acts on), random.py (random failures at catalog MTBFs), files.py (fault
scenario files)."""
from twin.engine.faults.files import describe, load_fault_file
from twin.engine.faults.kinds import KINDS, Field, FaultKind, fault_keys, register, unregister
from twin.engine.faults.manager import FaultManager, nodes_of
from twin.engine.faults.random import failure_rates, random_classes
from twin.engine.faults.spec import (MAX_RECORDS, RANDOM_MAX, Fault, Policy, check_random, check_shape, check_spec,
                                     defaults)

__all__ = ["KINDS", "MAX_RECORDS", "RANDOM_MAX", "describe", "Fault", "FaultKind", "FaultManager", "Field",
           "Policy", "check_random", "check_shape", "check_spec", "defaults", "failure_rates", "fault_keys",
           "load_fault_file", "nodes_of", "random_classes", "register", "unregister"]
