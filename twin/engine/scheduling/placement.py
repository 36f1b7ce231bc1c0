"""Placement: the stateless global scheduler of CloudMatrix-Infer sends a request to any prefill
instance; this one picks the least loaded by queued prompt tokens (the first such in index order)."""
from __future__ import annotations

import operator
from heapq import heapify, heapreplace

from twin.engine.scheduling.base import PLACEMENT, Placement, register

_QUEUED_TOKENS = operator.attrgetter("queued_tokens")
HEAP_FROM = 4       # instances from which a tick's arrivals are placed through a heap (speed only;
                    # measured: 2 arrivals over 4 instances 2.8 -> 2.2 us, 6 over 14 14.7 -> 5.7 us)
HEAP_ARRIVALS = 4   # ... and arrivals: fewer go one by one, as choose() mostly stops at the first idle
                    # instance (speed only; the diurnal scenario's ticks bring 1.9 on average over 14
                    # instances, issue 39)


@register(PLACEMENT, "least-queued-tokens")
class LeastQueuedTokens(Placement):
    def choose(self, instances):
        for p in instances:            # none queues fewer than 0 tokens: the first such is min's
            if not p.queued_tokens:    # choice, found without a pass over all (most arrivals)
                return p
        return min(instances, key=_QUEUED_TOKENS)

    def place(self, instances, rids, enqueue):
        """choose()'s choices for a tick's arrivals from a heap of (queued tokens, index): the
        least, the first in index order on a tie, as min() finds it (and as the first with none
        queued, as tokens are never below 0); a pass over the instances per tick, not per request."""
        if len(instances) < HEAP_FROM or len(rids) < HEAP_ARRIVALS:      # (most ticks)
            for rid in rids:
                enqueue(self.choose(instances), rid)
            return
        heap = [(p.queued_tokens, i) for i, p in enumerate(instances)]
        heapify(heap)
        if heap[0][0] < 0:             # (never: choose() would then prefer a 0 to the least)
            return super().place(instances, rids, enqueue)
        for rid in rids:
            i = heap[0][1]
            p = instances[i]
            enqueue(p, rid)
            heapreplace(heap, (p.queued_tokens, i))
