"""KV placement: a prefill batch's KV (or a decode-only request) goes to the decode instance
holding the fewest sequences, running and queued (the first such in index order)."""
from __future__ import annotations

from .base import KV_PLACEMENT, KvPlacement, register


@register(KV_PLACEMENT, "least-loaded")
class LeastLoaded(KvPlacement):
    def choose(self, instances):
        return min(instances, key=lambda d: (d.load(), d.idx))
