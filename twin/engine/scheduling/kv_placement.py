"""KV placement: a prefill batch's KV (or a decode-only request) goes to the decode instance
holding the fewest sequences, running and queued (the first such in index order)."""
from __future__ import annotations

from twin.engine.scheduling.base import KV_PLACEMENT, KvPlacement, register


@register(KV_PLACEMENT, "least-loaded")
class LeastLoaded(KvPlacement):
    def choose(self, instances):
        if len(instances) == 1:     # no choice: its load (which first queues its landed KV) is not needed
            return instances[0]
        return min(instances, key=lambda d: (d.load(), d.idx))
