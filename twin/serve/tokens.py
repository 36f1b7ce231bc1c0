"""The twin's own tokenizer: one Hugging Face `tokenizer.json` shipped in twin/serve/tokenizer/, that
counts the twin's prompt tokens and names its output tokens, so that a benchmark client given the
same directory (`--tokenizer twin/serve/tokenizer`, offline) counts exactly what the twin reports in
`usage`.

It is a byte-level BPE (GPT-2's pre-tokenizer and byte alphabet, so every text, any Unicode,
encodes and decodes back unchanged; no normalizer, no special token added to a prompt) of
4,096 tokens trained on the project's own English (README and docs/) and on the twin's
synthetic output (twin.serve.prompt.FILLER), whose every word is one token: the output of k tokens
tokenizes to exactly k. `python -m twin.serve.tokenizer_build` rebuilds it.
"""
from __future__ import annotations

import pathlib
from functools import lru_cache

from tokenizers import Tokenizer

DIR = pathlib.Path(__file__).with_name("tokenizer")


@lru_cache(maxsize=1)
def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(DIR / "tokenizer.json"))


def encode(text: str) -> list[int]:
    """The text's ids (through encode_batch, which lets go of the GIL: a long prompt's ~3 s a MB on
    this machine run in a thread beside the event loop)."""
    return tokenizer().encode_batch([text], add_special_tokens=False)[0].ids


def decode(ids: list[int]) -> str:
    return tokenizer().decode(ids, skip_special_tokens=False)


def vocab_size() -> int:
    return tokenizer().get_vocab_size()
