"""Builds the twin's tokenizer (twin.serve.tokens) into twin/serve/tokenizer/: `python -m
twin.serve.tokenizer_build` from the repository's root files. Trained on README.md, docs/**/*.md and
the filler output; every filler word must come out as one token.
"""
from __future__ import annotations

import json
import pathlib

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from twin.serve.prompt import FILLER, filler
from twin.serve.tokens import DIR

VOCAB_SIZE = 4096        # assumption: small (a ~250 KB file), ~3.6 bytes a token on the README
EOS = "<|endoftext|>"
CHAT_TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"   # prompt.chat_text


def build(root: pathlib.Path) -> Tokenizer:
    """Train the tokenizer on `root`'s README.md and docs/**/*.md and the filler text, and write it
    (with tokenizer_config.json, for transformers' AutoTokenizer) to DIR."""
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
