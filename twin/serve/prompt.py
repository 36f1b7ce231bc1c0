"""From an HTTP request's text to a twin request, without a tokenizer.

The rule (documented in docs/serve.md): a text of B UTF-8 bytes is ceil(B / BYTES_PER_TOKEN)
tokens, at least one. A chat request's text is each message as "role: content" plus a newline,
in order. The prompt's KV blocks are BLOCK tokens (the scenario's block size) of that text, i.e.
BLOCK * BYTES_PER_TOKEN bytes each, the last one partial; block i's id is a hash of the whole text up
to its end (a prefix hash, as the Mooncake traces' hash_ids are), so two prompts that share their
first k full blocks of text share k block ids and the second one hits the EMS cache, if both
came in the same cache scope: the hash starts from the scope (twin.serve.api._scope: a
`cache_salt`, or an API key and address), so texts from different scopes never share a block.
"""
from __future__ import annotations

import hashlib
import math

import numpy as np

BYTES_PER_TOKEN = 4       # assumption: ~4 bytes of English text per BPE token (OpenAI's rule of thumb)
ID_TAG = 1 << 62          # served block ids have bit 62 set: apart from trace ids and synthetic ids (small)
FILLER = ("the ", "twin ", "streams ", "tokens ", "at ", "its ", "own ", "pace ")   # one word per token


def tokens(text: str) -> int:
    """Tokens of a text by the rule."""
    return max(1, math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN))


def chat_text(messages: list) -> str:
    """The text a chat request's messages stand for ("role: content\\n" each)."""
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages)


def block_ids(text: str, block_tokens: int, scope: bytes = b"") -> np.ndarray:
    """Prefix-hash ids of the text's blocks (ceil(tokens / block_tokens) of them), in `scope`."""
    data = text.encode("utf-8")
    step = block_tokens * BYTES_PER_TOKEN
    n = max(1, math.ceil(tokens(text) / block_tokens))
    h = hashlib.blake2b(digest_size=8)
    if scope:
        h.update(hashlib.blake2b(scope, digest_size=16).digest())
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        h.update(data[i * step:(i + 1) * step])
        out[i] = (int.from_bytes(h.copy().digest(), "little") & (ID_TAG - 1)) | ID_TAG
    return out


def filler(start: int, n: int) -> str:
    """Text for output tokens start .. start + n - 1 (one short word each)."""
    return "".join(FILLER[i % len(FILLER)] for i in range(start, start + n))
