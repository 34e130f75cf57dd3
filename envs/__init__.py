"""Games as pure Python: rules, text views, legal actions, parsing, payoffs, safety signals, strategies.

Look games and strategies up by name:

    >>> from envs import make_game, make_strategy
    >>> game = make_game("ipd", num_rounds=8)
    >>> tft = make_strategy("ipd", "tit_for_tat")

No torch or transformers anywhere in this package.
"""

from __future__ import annotations

import importlib
from typing import Any

from envs.base import (
    Game,
    GameState,
    IllegalActionError,
    Lambdas,
    MatchResult,
    RoundResult,
    Signals,
    Strategy,
    View,
    play_episode,
)

# game name -> (module, class). Strategies for game G live in envs.strategies.<G> as STRATEGIES.
GAMES: dict[str, tuple[str, str]] = {
    "ipd": ("envs.ipd", "IteratedPrisonersDilemma"),
    "auction": ("envs.auction", "RepeatedSealedBidAuction"),
    "negotiation": ("envs.negotiation", "SingleIssueNegotiation"),
    "negotiation_multi": ("envs.negotiation_multi", "MultiIssueNegotiation"),
    "kuhn": ("envs.kuhn", "KuhnPoker"),
}


class UnknownNameError(KeyError):
    """An unknown game or strategy name; the message lists the valid ones."""

    def __str__(self) -> str:  # KeyError quotes its message; show it plainly
        return str(self.args[0])


def _check_game(name: str) -> None:
    if name not in GAMES:
        raise UnknownNameError(f"unknown game {name!r}; choose one of: {', '.join(GAMES)}")


def make_game(name: str, **params: Any) -> Game:
    """Build game `name` with its parameters overridden by `params`."""
    _check_game(name)
    module, cls = GAMES[name]
    game_cls = getattr(importlib.import_module(module), cls)
    try:
        return game_cls(**params)
    except TypeError as exc:
        raise ValueError(f"bad parameters for game {name!r}: {exc}") from None


def strategy_registry(game: str) -> dict[str, type[Strategy]]:
    """All scripted strategies of `game`, by their stable snake_case name."""
    _check_game(game)
    return dict(importlib.import_module(f"envs.strategies.{game}").STRATEGIES)


def make_strategy(game: str, name: str, **kwargs: Any) -> Strategy:
    """Instantiate scripted strategy `name` of `game`."""
    registry = strategy_registry(game)
    if name not in registry:
        raise UnknownNameError(
            f"unknown strategy {name!r} for game {game!r}; choose one of: {', '.join(sorted(registry))}"
        )
    return registry[name](**kwargs)


__all__ = [
    "GAMES",
    "MatchResult",
    "Game",
    "GameState",
    "IllegalActionError",
    "Lambdas",
    "RoundResult",
    "Signals",
    "Strategy",
    "UnknownNameError",
    "View",
    "make_game",
    "make_strategy",
    "play_episode",
    "strategy_registry",
]
