"""Piecewise tokenisation (sepo/rollout/tokens.py): ids assembled from cached lines equal whole-text ids."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, normalizers, pre_tokenizers

from sepo.rollout.tokens import PieceTokenizer, splits_exactly
from sepo.tiny_models import ARCHS, build_tokenizer

FRAGMENTS = ["Round", " 3", " of", " 8.", "\n", "\n\n", " ", "  ", "\t", "\r\n", "-", " you", "COOPERATE", "DEFECT",
             "(you 5, opponent 0)", "'s", "don't", "[1, 2, 0]", "é", " ß", "→", "✓", "12345", "?", "<|im_end|>",
             "<|im_start|>", "<turn|>", "<think>", "\u00a0", "\u2028", "\x1c"]


def _tokenizer(name: str):
    if name != "default":
        return build_tokenizer(name)
    from transformers import AutoTokenizer

    from sepo.config.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("default"))  # SmolLM2's byte-level BPE


TOKENIZERS = {name: _tokenizer(name) for name in [*ARCHS, "default"]}


@pytest.mark.parametrize("name", list(TOKENIZERS))
def test_these_tokenizers_are_covered_by_the_proof(name):
    assert splits_exactly(TOKENIZERS[name])


@pytest.mark.parametrize("name", list(TOKENIZERS))
@settings(max_examples=150, deadline=None)
@given(texts=st.lists(st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join), min_size=1, max_size=4))
def test_piecewise_ids_equal_whole_text_ids(name, texts):
    tok = TOKENIZERS[name]
    pieces = PieceTokenizer(tok)
    expected = [tok.encode(t, add_special_tokens=False) for t in texts]
    assert pieces.encode(texts) == expected
    assert pieces.encode(texts[::-1]) == expected[::-1]  # now from the cache
    assert all("".join(pieces.lines(t)) == t for t in texts)


def test_lines_are_cut_only_between_non_space_characters():
    pieces = PieceTokenizer(TOKENIZERS["llama"])
    assert pieces.lines("Round 2.\nHistory:\n- a\n\nb \nc\n d\n") == ["Round 2.\n", "History:\n", "- a\n\nb \nc\n d\n"]


def test_other_tokenizers_are_tokenised_whole():
    """A prefix space, a normaliser or a special token that strips whitespace void the proof: such tokenizers
    get no cuts and no cache, and still the right ids."""
    with_prefix = build_tokenizer("llama")
    with_prefix.backend_tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    lowercase = build_tokenizer("llama")
    lowercase.backend_tokenizer.normalizer = normalizers.Lowercase()
    stripping = build_tokenizer("llama")
    stripping.add_special_tokens({"additional_special_tokens": [AddedToken("<x>", lstrip=True, special=True)]})
    text = "Round 1.\nWhat is your action?"
    for tok in (with_prefix, lowercase, stripping):
        assert not splits_exactly(tok)
        pieces = PieceTokenizer(tok)
        assert pieces.lines(text) == [text]
        assert pieces.encode([text, text]) == [tok.encode(text, add_special_tokens=False)] * 2
        assert pieces.cache == {}
    # why: with a prefix space, line-wise ids differ from whole-text ids
    ids = with_prefix.encode(text, add_special_tokens=False)
    assert ids != sum((with_prefix.encode(t, add_special_tokens=False) for t in text.splitlines(True)), [])
