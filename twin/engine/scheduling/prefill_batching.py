"""Prefill batching: first come, first served up to the instance's token budget (ref 3: a prefill
instance batches prompts up to its tokens per die). A prompt longer than the budget runs alone."""
from __future__ import annotations

from twin.engine.scheduling.base import PREFILL_BATCHING, PrefillBatching, register


@register(PREFILL_BATCHING, "fifo-token-budget")
class FifoTokenBudget(PrefillBatching):
    lone_whole = True

    def take(self, queue, tokens_of, budget):
        if len(queue) == 1:                   # the common case at low load: a lone prompt
            rid = queue.popleft()
            return [rid], int(tokens_of(rid))
        batch, tokens = [], 0
        while queue and (not batch or tokens + tokens_of(queue[0]) <= budget):
            rid = queue.popleft()
            batch.append(rid)
            tokens += int(tokens_of(rid))
        return batch, tokens
