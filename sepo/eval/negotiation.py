"""The single-issue negotiation exact phase: an LLM's policy at every joint history of demands, scored, and its
exact exploit figure e* (`envs.negotiation_exact`).

As in IPD (`sepo.eval.ipd`), the game has no private information and reveals both demands after each round, so
the LLM's prompt is a function of the joint history, and scoring the legal demands at each history's prompt
(`sepo.eval.joint`) gives the answer-only policy as a full table, on which e* is exact. The table has
1 + K² + ... + K^(2(T−1)) entries for K legal demands: 82 for the default 9 demands at T = 2, 820 for 3 demands
(pie 4, demands 1..3) at T = 4. `MAX_HISTORIES` bounds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envs import make_game
from envs.negotiation import SingleIssueNegotiation
from envs.negotiation_exact import count_histories, demands, histories, history_key
from sepo.eval.ipd import MAX_ROUNDS as IPD_MAX_ROUNDS
from sepo.eval.joint import scored_histories

# the IPD exact phase's budget at its bound (1 + 4 + ... + 4^5 = 1,365 prompts): what one refresh may score
MAX_HISTORIES = sum(4**r for r in range(IPD_MAX_ROUNDS))


def game_of(game_params: Mapping[str, Any] | None) -> SingleIssueNegotiation:
    """The single-issue negotiation game of `game_params`."""
    return make_game("negotiation", **dict(game_params or {}))  # type: ignore[return-value]


def check_size(game: SingleIssueNegotiation) -> None:
    """Refuse a game whose full table exceeds `MAX_HISTORIES` joint histories, naming the count and the bound."""
    n = count_histories(game)
    if n > MAX_HISTORIES:
        raise ValueError(f"negotiation's exact policy scores every joint history of demands: {n} at "
                         f"{game.num_rounds} rounds and demands {game.min_demand}..{game.max_demand}, more than "
                         f"{MAX_HISTORIES}; use fewer rounds or a narrower demand range")


def scored_policy(backend: Any, renderer: Any, game_params: Mapping[str, Any] | None = None,
                  seat: int = 0) -> dict[str, dict[str, float]]:
    """The answer-only policy as a full table, {joint history key: {demand: P(demand)}}: the teacher-forced
    probability of each legal demand's text and end-of-turn, normalised over the legal demands (one call)."""
    game = game_of(game_params)
    check_size(game)
    legal = [str(d) for d in demands(game)]
    keyed = ((history_key(h), [(str(x), str(y)) for x, y in h]) for h in histories(game))
    rows = scored_histories(backend, renderer, game, keyed, legal, seat)
    return {key: dict(zip(legal, row)) for key, row in rows.items()}
