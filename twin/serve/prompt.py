"""From an HTTP request's text to a twin request, and the twin's output text.

Prompt tokens are the twin's own tokenizer's (twin.serve.tokens: what a client given the shipped
tokenizer counts), at least one. A chat request's text is each message as "role: content" plus a
newline, in order (the tokenizer's chat template). The prompt's KV blocks are BLOCK tokens (the
scenario's block size) each, the last one partial; block i's id is a hash of the token ids up to
its end (a prefix hash, as the Mooncake traces' hash_ids are), so two prompts that share their
first k full blocks share k block ids and the second one hits the EMS cache, if both came in the
same cache scope: the hash starts from the scope (twin.serve.api._scope: a `cache_salt`, or an API
key and address), so prompts from different scopes never share a block. As in vLLM, only whole
blocks are cached: a partial last block gets an id of its own, never shared (and the API reports
the hits of the first n - 1 tokens' whole blocks: the last token is always computed).

The output is filler, one word a token (each word is one token of the tokenizer); `stop` strings
and stop token ids end it where the filler would first produce them (`Stop`).
"""
from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass

import numpy as np

from twin.serve import tokens as tok

BYTES_PER_TOKEN = 4       # assumption: ~4 bytes of English text per BPE token (OpenAI's rule of thumb; the
                          # shipped tokenizer: 3.6 on the README); sizes the request body cap only
ID_TAG = 1 << 62          # served block ids have bit 62 set: apart from trace ids and synthetic ids (small)
FILLER = (" the", " twin", " streams", " tokens", " at", " its", " own", " pace")   # one token each
CYCLE = "".join(FILLER)
_STARTS = np.cumsum([0, *map(len, FILLER)]).tolist()     # character offset of each word in the cycle


def ids(text: str) -> list[int]:
    """The text's token ids (the shipped tokenizer's)."""
    return tok.encode(text)


def count(token_ids: list) -> int:
    """A prompt's tokens: its ids, at least one (an empty prompt still takes a prefill slot)."""
    return max(1, len(token_ids))


def chat_text(messages: list) -> str:
    """The text a chat request's messages stand for ("role: content\\n" each)."""
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages)


def block_ids(token_ids: list, block_tokens: int, scope: bytes = b"") -> np.ndarray:
    """Ids of the prompt's blocks (ceil(tokens / block_tokens) of them), in `scope`: prefix hashes for
    its whole blocks, an id never seen before for a partial last one."""
    n = count(token_ids)
    data = np.asarray(token_ids, dtype=np.int64).tobytes()
    step = block_tokens * 8
    whole, total = n // block_tokens, math.ceil(n / block_tokens)
    h = hashlib.blake2b(digest_size=8)
    if scope:
        h.update(hashlib.blake2b(scope, digest_size=16).digest())
    out = np.empty(total, dtype=np.int64)
    for i in range(whole):
        h.update(data[i * step:(i + 1) * step])
        out[i] = int.from_bytes(h.copy().digest(), "little") & (ID_TAG - 1)
    out[whole:] = np.frombuffer(os.urandom(8 * (total - whole)), dtype=np.int64)
    return (out & (ID_TAG - 1)) | ID_TAG


def offset(k: int) -> int:
    """Characters in the first k output tokens."""
    return k // len(FILLER) * len(CYCLE) + _STARTS[k % len(FILLER)]


def filler(start: int, n: int) -> str:
    """Text for output tokens start .. start + n - 1 (one short word each)."""
    return "".join(FILLER[i % len(FILLER)] for i in range(start, start + n))


@dataclass(frozen=True)
class Stop:
    """Where a request's stop condition ends its output: at token `tokens` (the one that completes a
    stop string, or a stop token, counted in usage as vLLM counts it), its visible text cut at
    character `cut` (the stop string or token excluded, as vLLM's default), `reason` its stop_reason."""
    tokens: int
    cut: int
    reason: str | int

    @staticmethod
    def find(strings: list[str], token_ids: list[int]) -> "Stop | None":
        """The first stop the filler meets, or None if it never produces any (it repeats every cycle)."""
        best = None
        for s in strings:
            text = filler(0, len(FILLER) * (len(s) // len(CYCLE) + 3))     # every alignment, twice over
            i = text.find(s)
            if i >= 0:
                k = next(k for k in range(len(text)) if offset(k) >= i + len(s))
                best = min(best, Stop(k, i, s), key=lambda x: x.tokens) if best else Stop(k, i, s)
        word_ids = [tok.encode(w)[0] for w in FILLER]
        for t in token_ids:
            if t in word_ids:
                j = word_ids.index(t)
                if best is None or j + 1 < best.tokens:
                    best = Stop(j + 1, offset(j), t)
        return best

    def text(self, start: int, n: int) -> str:
        """The visible text of output tokens start .. start + n - 1."""
        return filler(start, n)[:max(0, self.cut - offset(start))]
