"""Scheduling policies (see base.py): one module per policy, registered by name on import."""
from . import decode_admission, kv_placement, placement, prefill_batching
from .base import DEFAULTS, REGISTRY, Policies, make, register

__all__ = ["DEFAULTS", "REGISTRY", "Policies", "make", "register", "decode_admission",
           "kv_placement", "placement", "prefill_batching"]
