"""Placement: the stateless global scheduler of CloudMatrix-Infer sends a request to any prefill
instance; this one picks the least loaded by queued prompt tokens (the first such in index order)."""
from __future__ import annotations

import operator

from .base import PLACEMENT, Placement, register

_QUEUED_TOKENS = operator.attrgetter("queued_tokens")


@register(PLACEMENT, "least-queued-tokens")
class LeastQueuedTokens(Placement):
    def choose(self, instances):
        return min(instances, key=_QUEUED_TOKENS)
