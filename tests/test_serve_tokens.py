"""The twin's own tokenizer (twin/serve/tokenizer/) and what the served twin derives from a prompt's
tokens: the filler output is one token a word, any text round-trips, only whole prefix blocks are
shared, and stop strings or stop token ids end the output where the filler first produces them."""
from __future__ import annotations

import json

import pytest

from twin.serve import prompt, tokens


def test_the_filler_is_one_token_a_word_wherever_it_starts_or_is_cut():
    for start in range(9):
        for k in (1, 2, 7, 8, 9, 100):
            assert len(tokens.encode(prompt.filler(start, k))) == k
    assert [len(tokens.encode(w)) for w in prompt.FILLER] == [1] * len(prompt.FILLER)
    assert [prompt.offset(k) for k in (0, 1, 8, 9)] == [0, 4, len(prompt.CYCLE), len(prompt.CYCLE) + 4]


@pytest.mark.parametrize("text", ["", "plain", "héllo wörld — ✓ 世界 🙂\t\r\n", "\x00\x7f", "<|endoftext|>",
                                  "x" * 5000, "a  b   c    "])
def test_any_text_round_trips(text):
    ids = tokens.encode(text)
    assert tokens.decode(ids) == text and all(0 <= i < tokens.vocab_size() for i in ids)


def test_the_shipped_config_is_what_transformers_loads_offline():
    cfg = json.loads((tokens.DIR / "tokenizer_config.json").read_text())
    assert cfg["tokenizer_class"] == "PreTrainedTokenizerFast" and cfg["eos_token"] == "<|endoftext|>"
    assert not cfg["add_bos_token"] and not cfg["clean_up_tokenization_spaces"]
    assert tokens.tokenizer().post_processor is None         # no token added to a prompt: counts agree


def test_only_whole_blocks_get_prefix_ids():
    ids = tokens.encode(prompt.filler(0, 1280))               # 2 whole blocks of 512 and a partial one
    a, b = prompt.block_ids(ids, 512, b"s"), prompt.block_ids(ids, 512, b"s")
    assert len(a) == 3 and list(a[:2]) == list(b[:2]) and a[2] != b[2]
    longer = prompt.block_ids(ids + ids[:300], 512, b"s")
    assert list(longer[:2]) == list(a[:2]) and longer[2] != a[2]
    assert not set(prompt.block_ids(ids, 512, b"other")) & set(a)


def test_a_stop_ends_the_output_where_the_filler_first_produces_it():
    s = prompt.Stop.find(["nowhere", "ms tok"], [])            # " the twin streams tokens": token 4 completes it
    assert (s.tokens, s.reason, s.text(0, 4), s.text(2, 2)) == (4, "ms tok", " the twin strea", " strea")
    assert s.text(4, 1) == ""
    own = tokens.encode(" own")[0]
    t = prompt.Stop.find([" pace"], [own])                     # the stop token (7th) comes before " pace" (8th)
    assert (t.tokens, t.reason, t.text(0, 7)) == (7, own, prompt.filler(0, 6))
    long = prompt.CYCLE * 2 + " the"                             # longer than a cycle: still met
    assert prompt.Stop.find([long], []).tokens == 17
    assert prompt.Stop.find(["zebra"], [0]) is None
