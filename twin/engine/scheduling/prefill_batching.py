"""Prefill batching: first come, first served up to the instance's token budget (ref 3: a prefill
instance batches prompts up to its tokens per die). A prompt longer than the budget runs alone.
Chunked, a batch holds at most `chunk_tokens` and a longer prompt is prefilled over several batches
(twin.engine.pools.PrefillInstance does the splitting; the policy says how big a chunk is)."""
from __future__ import annotations

from dataclasses import dataclass

from twin.engine.scheduling.base import PREFILL_BATCHING, PrefillBatching, register

MAX_CHUNK_TOKENS = 1 << 20     # a bound on the parameter (assumption: far past any model's context)


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


@dataclass(frozen=True)
class ChunkedConfig:
    # vLLM's max_num_batched_tokens (its API server's default below 70 GB of memory is 2,048)
    chunk_tokens: int = 2048

    def check(self, where: str) -> None:
        if not 1 <= self.chunk_tokens <= MAX_CHUNK_TOKENS:
            raise ValueError(f"{where}: chunk_tokens = {self.chunk_tokens}: allowed 1 to {MAX_CHUNK_TOKENS}")


@register(PREFILL_BATCHING, "chunked-fifo")
class ChunkedFifo(FifoTokenBudget):
    """Chunked prefill (as vLLM's): first come, first served in chunks of at most `chunk_tokens`;
    a prompt not yet started goes before the rest of a long one, so it waits for one chunk, not a
    whole long prompt."""
    Config = ChunkedConfig

    @property
    def chunk_tokens(self) -> int:
        return self.config.chunk_tokens
