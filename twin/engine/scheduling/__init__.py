"""Scheduling policies (see base.py): one module per policy, registered by name on import."""
from twin.engine.scheduling import decode_admission, kv_placement, placement, prefill_batching
from twin.engine.scheduling.base import DEFAULTS, REGISTRY, Policies, make, register

__all__ = ["DEFAULTS", "REGISTRY", "Policies", "make", "register", "decode_admission",
           "kv_placement", "placement", "prefill_batching"]
