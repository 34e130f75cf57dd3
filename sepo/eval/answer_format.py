"""How a model's own turns end: a strict answer, a turn that ended without one, or a turn cut at the token limit.

The table's "Parse fail" says how often the fallback decode had to choose the action; this says why, which is
what an SFT recipe has to fix: a model that runs to `max_turn_tokens` has not learnt to stop (the end-of-turn
token), and one that stops without a parsable last line has not learnt the answer format. Counted over
decisions from the episode rows `sepo eval` stores, with a few failing texts to read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

EXAMPLES = 3  # failing texts kept per model and game


def answer_format(rows: Iterable[Mapping[str, Any]], max_turn_tokens: int) -> dict[str, Any]:
    """Counts of the LLM seat's decisions in `rows` by how the model's turn ended, and up to `EXAMPLES`
    failing texts. A turn whose model tokens reach `max_turn_tokens` counts as cut at the limit (one that
    ended exactly on the last allowed token is counted there too)."""
    decisions = strict = cut = 0
    examples: list[str] = []
    for row in rows:
        for turn in row["turns"]:
            decisions += 1
            if turn["parsed"]:
                strict += 1
                continue
            cut += turn["n_model_tokens"] >= max_turn_tokens
            if len(examples) < EXAMPLES:
                examples.append(turn["text"])
    return {
        "decisions": decisions,
        "strict": strict,
        "token_limit": cut,
        "ended_unparsed": decisions - strict - cut,
        "strict_rate": strict / decisions if decisions else None,
        "failing_examples": examples,
    }
