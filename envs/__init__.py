"""Games as pure Python: rules, text views, legal actions, parsing, payoffs, safety signals, strategies.

Look games and strategies up by name:

    >>> from envs import make_game, make_strategy
    >>> game = make_game("ipd", num_rounds=8)
    >>> tft = make_strategy("ipd", "tit_for_tat")

No torch or transformers anywhere in this package.
"""

from __future__ import annotations

import functools
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
from envs.registry import GameSpec, check_strategies

# The registration list: game name -> the module whose `SPEC` (an `envs.registry.GameSpec`) declares the game.
# Adding a game: one line here, its game module ending with `SPEC` and its strategies module (`envs.registry`).
GAMES: dict[str, str] = {
    "ipd": "envs.ipd",
    "auction": "envs.auction",
    "negotiation": "envs.negotiation",
    "negotiation_multi": "envs.negotiation_multi",
    "kuhn": "envs.kuhn",
    "bertrand": "envs.bertrand",
}


class UnknownNameError(KeyError):
    """An unknown game or strategy name; the message lists the valid ones."""

    def __str__(self) -> str:  # KeyError quotes its message; show it plainly
        return str(self.args[0])


def _check_game(name: str) -> None:
    if name not in GAMES:
        raise UnknownNameError(f"unknown game {name!r}; choose one of: {', '.join(GAMES)}")


@functools.cache
def game_spec(name: str) -> GameSpec:
    """The registration of game `name` (its module's `SPEC`), checked against its strategies module once: a spec
    that is not the module's game or names a strategy the game lacks fails here, naming the game."""
    _check_game(name)
    spec = importlib.import_module(GAMES[name]).SPEC
    if spec.name != name:
        raise ValueError(f"{name}: {GAMES[name]}.SPEC registers the game {spec.name!r}, not {name!r}")
    check_strategies(spec, importlib.import_module(spec.strategies).STRATEGIES)
    return spec


def make_game(name: str, **params: Any) -> Game:
    """Build game `name` with its parameters overridden by `params`."""
    game_cls = game_spec(name).game
    try:
        return game_cls(**params)
    except TypeError as exc:
        raise ValueError(f"bad parameters for game {name!r}: {exc}") from None


def strategy_registry(game: str) -> dict[str, type[Strategy]]:
    """All scripted strategies of `game`, by their stable snake_case name."""
    return dict(importlib.import_module(game_spec(game).strategies).STRATEGIES)


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
    "GameSpec",
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
    "game_spec",
    "make_game",
    "make_strategy",
    "play_episode",
    "strategy_registry",
]
