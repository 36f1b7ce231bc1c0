"""The twin's own tokenizer: one Hugging Face `tokenizer.json` shipped in twin/serve/tokenizer/, that
counts the twin's prompt tokens and names its output tokens, so that a benchmark client given the
same directory (`--tokenizer twin/serve/tokenizer`, offline) counts exactly what the twin reports in
`usage`.

It is a byte-level BPE (GPT-2's pre-tokenizer and byte alphabet, so every text, any Unicode,
encodes and decodes back unchanged; no normalizer, no special token added to a prompt) of
VOCAB_SIZE tokens trained on the project's own English (README and docs/) and on the twin's
synthetic output (twin.serve.prompt.FILLER), whose every word is one token: the output of k tokens
tokenizes to exactly k. `python -m twin.serve.tokens` rebuilds it.
"""
from __future__ import annotations

import json
import pathlib
from functools import lru_cache

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

DIR = pathlib.Path(__file__).with_name("tokenizer")
VOCAB_SIZE = 4096        # assumption: small (a ~250 KB file), ~4 bytes a token on English prose
EOS = "<|endoftext|>"
CHAT_TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"   # prompt.chat_text


@lru_cache(maxsize=1)
def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(DIR / "tokenizer.json"))


def encode(text: str) -> list[int]:
    return tokenizer().encode(text, add_special_tokens=False).ids


def decode(ids: list[int]) -> str:
    return tokenizer().decode(ids, skip_special_tokens=False)


def vocab_size() -> int:
    return tokenizer().get_vocab_size()


def build(root: pathlib.Path) -> Tokenizer:
    """Train the tokenizer on `root`'s README.md and docs/**/*.md and the filler text, and write it
    (with tokenizer_config.json, for transformers' AutoTokenizer) to DIR."""
    from twin.serve.prompt import FILLER, filler
    texts = [(root / "README.md").read_text("utf-8")]
    texts += [p.read_text("utf-8") for p in sorted((root / "docs").rglob("*.md"))]
    texts += [filler(0, 64 * len(FILLER))] * 64
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    word_ids = [tok.encode(w, add_special_tokens=False).ids for w in FILLER]
    if any(len(ids) != 1 for ids in word_ids):
        raise RuntimeError(f"a filler word is not one token: {dict(zip(FILLER, word_ids))}")
    DIR.mkdir(exist_ok=True)
    tok.save(str(DIR / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1 << 20, "eos_token": EOS,
              "bos_token": None, "unk_token": None, "pad_token": EOS, "add_bos_token": False,
              "add_eos_token": False, "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE}
    (DIR / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", "utf-8")
    return tok


if __name__ == "__main__":
    t = build(pathlib.Path(__file__).resolve().parents[2])
    print(f"{DIR}: {t.get_vocab_size()} tokens")
