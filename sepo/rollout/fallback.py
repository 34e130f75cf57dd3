"""The backend-neutral part of the constrained fallback decode: the cue and the prompt it continues.

When a turn does not parse into a legal action, the model's own text is kept, `FALLBACK_CUE` is appended in
the same assistant turn, and a backend's `generate_choice` decodes one of the legal actions after it (HF: a
token trie, `sepo.backends.hf_decoding`; vLLM: structured `choice` outputs).
"""

from __future__ import annotations

from collections.abc import Sequence

FALLBACK_CUE = "\nFinal action:"


def cue_ids(tokenizer) -> list[int]:
    """Token ids of FALLBACK_CUE (standalone, so decoding the turn plus cue gives the exact text)."""
    return tokenizer.encode(FALLBACK_CUE, add_special_tokens=False)


def fallback_prompt_ids(
    context_ids: Sequence[int], turn_ids: Sequence[int], tokenizer, end_of_turn_id: int,
    cue: Sequence[int] | None = None,
) -> tuple[list[int], list[int]]:
    """The prompt for a constrained fallback decode: context, the model's own turn without its end-of-turn,
    then the cue (`cue_ids(tokenizer)` unless given). Returns (prompt ids, cue ids)."""
    turn = list(turn_ids)
    if turn and turn[-1] == end_of_turn_id:
        turn = turn[:-1]
    cue = cue_ids(tokenizer) if cue is None else list(cue)
    return [*context_ids, *turn, *cue], cue
