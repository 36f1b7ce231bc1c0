"""Placement: the stateless global scheduler of CloudMatrix-Infer sends a request to any prefill
instance; this one picks the least loaded by queued prompt tokens (the first such in index order)."""
from __future__ import annotations

import operator

from twin.engine.scheduling.base import PLACEMENT, Placement, register

_QUEUED_TOKENS = operator.attrgetter("queued_tokens")


@register(PLACEMENT, "least-queued-tokens")
class LeastQueuedTokens(Placement):
    def choose(self, instances):
        for p in instances:            # none queues fewer than 0 tokens: the first such is min's
            if not p.queued_tokens:    # choice, found without a pass over all (most arrivals)
                return p
        return min(instances, key=_QUEUED_TOKENS)
