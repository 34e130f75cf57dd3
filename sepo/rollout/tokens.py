"""Exact piecewise tokenisation: a turn's token ids assembled from the cached ids of its lines.

Tokenising every observation whole costs the rollout more than anything else it does (a byte-level BPE
pre-tokeniser runs a Unicode regex over every character), and most of an observation repeats text seen
before: history lines, the score line, the question. For tokenizers whose merges provably never cross
certain positions, text cut at those positions tokenises to the concatenation of its parts' ids, so only
unseen pieces go to the tokenizer, in one batched call per round, and the ids are identical to tokenising
the whole text.

The proof covers fast BPE tokenizers with GPT-2 byte-level pre-tokenisation (`ByteLevel(use_regex=True,
add_prefix_space=False)`; SmolLM2 and the tiny test models), no normaliser, no BPE dropout, added tokens
without whitespace and special tokens that strip nothing around them. Added tokens are split out first; the
pre-tokeniser regex `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+` then
runs over the text between them; it has no look-behind, so matching resumes identically after any match
boundary, and BPE merges stay inside one match. A line break that follows a non-space character and
precedes one ("...5)\\n- Round 3") is always a match of its own: no alternative matches a non-space
character together with a line break, and the whitespace alternatives stop before the next, non-space,
character. Cutting right after it therefore changes no match, and no added token spans the cut. Other
tokenizers are tokenised whole (one piece per text), still in one batched call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MAX_CACHED_PIECES = 200_000  # the piece cache is emptied when it grows past this


def splits_exactly(tokenizer: Any) -> bool:
    """Whether `tokenizer` is one for which the boundaries in this module's docstring are proven."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or getattr(tokenizer, "split_special_tokens", False):
        return False
    pre, normalizer, model = backend.pre_tokenizer, backend.normalizer, backend.model
    byte_level = (
        type(pre).__name__ == "ByteLevel" and pre.use_regex and not pre.add_prefix_space
    )
    no_normalizer = normalizer is None or (type(normalizer).__name__ == "Sequence" and len(normalizer) == 0)
    bpe = type(model).__name__ == "BPE" and model.dropout is None
    added = getattr(tokenizer, "added_tokens_decoder", {}).values()
    plain_added = all(not any(c.isspace() for c in t.content) for t in added)
    specials_strip_nothing = all(not (t.lstrip or t.rstrip) for t in added if t.special)
    return byte_level and no_normalizer and bpe and plain_added and specials_strip_nothing


class PieceTokenizer:
    """Tokenise many texts in one batched call, reusing the ids of texts and lines seen before.

    A text seen before costs one dictionary lookup. An unseen text is cut into `lines`, and only lines not
    seen before go to the tokenizer. For tokenizers `splits_exactly` does not cover, every text is one piece
    and nothing is kept between calls.
    """

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.exact = splits_exactly(tokenizer)
        backend = getattr(tokenizer, "backend_tokenizer", None)
        # the Rust tokenizer is what the tokenizer's own __call__ runs; use it directly unless __call__ would
        # switch its special-token splitting first
        plain = backend is not None and not backend.encode_special_tokens
        self._backend = backend if plain and not getattr(tokenizer, "split_special_tokens", False) else None
        self.cache: dict[str, list[int]] = {}

    def lines(self, text: str) -> list[str]:
        """`text` cut after every line break that follows and precedes a non-space character ([text] when the
        tokenizer is not covered by the proof)."""
        if not self.exact:
            return [text]
        parts = text.split("\n")
        out, current = [], ""
        for part, following in zip(parts, parts[1:]):
            current += part + "\n"
            if part and following and not part[-1].isspace() and not following[0].isspace():
                out.append(current)
                current = ""
        out.append(current + parts[-1])
        return out

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        if self._backend is not None:
            return [e.ids for e in self._backend.encode_batch_fast(texts, add_special_tokens=False)]
        return [list(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of every text (`tokenizer.encode(text, add_special_tokens=False)`), one tokenizer call at most."""
        cache = self.cache if self.exact else {}
        unseen = {t: self.lines(t) for t in dict.fromkeys(texts) if t not in cache}
        if unseen:
            if len(cache) > MAX_CACHED_PIECES:
                cache.clear()
            missing = [p for p in dict.fromkeys(p for pieces in unseen.values() for p in pieces) if p not in cache]
            if missing:
                cache.update(zip(missing, self._encode_batch(missing)))
            for text, pieces in unseen.items():
                ids: list[int] = []
                for p in pieces:
                    ids += cache[p]
                cache[text] = ids
        return [list(cache[t]) for t in texts]
