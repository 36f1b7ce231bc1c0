"""KV placement: a prefill batch's KV (or a decode-only request) goes to the decode instance
holding the fewest sequences, running and queued (the first such in index order)."""
from __future__ import annotations

from twin.engine.scheduling.base import KV_PLACEMENT, KvPlacement, register


@register(KV_PLACEMENT, "least-loaded")
class LeastLoaded(KvPlacement):
    def choose(self, instances):
        if len(instances) == 1:     # no choice: its load (which first queues its landed KV) is not needed
            return instances[0]
        instances[0].eng.kv.flows.settle()     # the KV landed by now, once for all loads
        best, least = None, None          # min() by (load, idx), without a key call and tuple each
        for d in instances:
            n = d.load()
            if best is None or n < least or (n == least and d.idx < best.idx):
                best, least = d, n
        return best
