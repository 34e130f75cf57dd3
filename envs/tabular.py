"""The protocol a game's exact analysis implements: a policy read as a table over enumerable decision states.

Where a game's LLM prompt is a function of a small, enumerable state (Kuhn's information sets, the joint
histories of a repeated game on its compact prompt), the policy a model plays is a table, and every figure of it
is exact: the best response to it, its exploitability, its expected payoffs and safety signals against a
scripted opponent. A game declares the module holding that analysis in its registration (`GameSpec.exact`); the
module defines `ANALYSIS`, an object with the methods of `TabularGame`. The pipeline (`sepo`) reads a game's
analysis with `analysis(game)` and never names the game.

Tables are JSON-able mappings keyed by state key; a row is {action text: probability} over the state's legal
actions (`TabularGame.row`), whatever the game's own table form (IPD keeps P(COOPERATE) as one float).

Pure Python, no torch (like all of `envs`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import envs
from envs.base import Strategy

Table = Mapping[str, Any]  # state key -> the game's row (a distribution over the legal actions, or P(first))
Params = Mapping[str, Any] | None  # the game's parameters, as a recipe writes them (None: the defaults)
Messages = list[dict[str, str]]

# The most decision states one scoring pass may take: 1 + 4 + ... + 4^5 = 1,365 (IPD at 6 rounds), so a refresh
# of the adaptive exploiter or an exact evaluation phase stays one cheap scoring call.
MAX_STATES = sum(4**r for r in range(6))


@dataclass(frozen=True)
class DecisionState:
    """One state at which the policy's seat decides: its table key, the chat messages that put the LLM there as
    the rollout renders them (system prompt, the earlier turns with the LLM's own actions as their canonical text,
    and the current observation), and its legal actions as canonical text in canonical order (the order of a
    scored row)."""

    key: str
    messages: Messages
    legal: tuple[str, ...]


@dataclass(frozen=True)
class Response:
    """The exact best response to a table: what a strategy plays (`moves`, the game's response table) and the
    policy's exploit figure, the response's value (Kuhn: exploitability, NashConv / 2; a repeated game: e*, the
    best opponent's mean per-round advantage)."""

    moves: dict[str, Any]
    value: float


@dataclass(frozen=True)
class Expectation:
    """One round's exact expectations when a table plays an opponent: the policy's payoff, the opponent's, the
    collusion signal (the game's own: IPD defection, Kuhn folding) and the externality (0 where the game has
    none). What the objective's `EpisodeTerms` take per round."""

    own: float
    opp: float
    collusion: float
    externality: float


class TabularGame(Protocol):
    """A game's exact analysis of a tabular policy (the module's `ANALYSIS`).

    exploit_key: the name results give the exploit figure ("exploitability" for Kuhn, "e_star" for the repeated
        games), kept as recorded.
    eval_form: how `sepo eval` measures the table: "reasoning" (the model writes its reasoning, the legal actions
        are scored after it, the table is the mean over samples with a bootstrap interval of the exploit figure)
        or "answer" (the answer-only table, scored once).
    state_noun: what a state is called in progress lines ("info sets", "joint histories").
    reference_note: hand-checked exploit figures of simple policies, quoted under `sepo eval`'s exact table of an
        "answer" phase ("" for none).
    """

    exploit_key: str
    eval_form: str
    state_noun: str
    reference_note: str

    def states(self, params: Params, seat: int = 0) -> list[DecisionState]:
        """Every decision state of the policy's seat(s) under `params`, in a fixed order."""

    def table(self, rows: Mapping[str, Sequence[float]], params: Params) -> dict[str, Any]:
        """The game's table from scored rows ({state key: P(each legal action)} in `states` order)."""

    def row(self, table: Table, key: str) -> dict[str, float]:
        """The table's distribution at state `key` as {action text: probability}."""

    def validate(self, table: Table, params: Params) -> dict[str, Any]:
        """`table` checked (a clear error names the first bad key) and as plain dicts of floats."""

    def best_response(self, table: Table, params: Params) -> Response:
        """The exact best response to `table` and the policy's exploit figure."""

    def exploitability(self, table: Table, params: Params) -> float:
        """The policy's exploit figure (`Response.value`)."""

    def extra_figures(self, table: Table, params: Params) -> dict[str, float]:
        """Exact figures beside the exploit figure that a refresh and a checkpoint record (Kuhn: game_value)."""

    def strategy(self, moves: Mapping[str, Any]) -> Strategy:
        """A fresh strategy that plays a best response's `moves`."""

    def check_size(self, params: Params) -> None:
        """Raise ValueError when the game under `params` has too many states for an exact, cheap refresh."""

    def applies(self, params: Params) -> bool:
        """Whether `sepo eval`'s exact phase runs for the game under `params` (its prompt a function of the
        state, and small enough to score every state)."""

    def prompt_note(self, params: Params) -> str | None:
        """Which prompt the figures score, where that needs saying (None: nothing to say)."""

    def expectations(self, table: Table, name: str, opponent: Callable[[], Strategy],
                     params: Params) -> list[Expectation]:
        """Exact per-round expectations of `table` against the scripted opponent that `opponent` makes (pool
        member `name`, for errors)."""

    def demonstrator(self, weights: Mapping[str, float], params: Params) -> dict[str, Any]:
        """The table of a behavioural mix of the game's scripted strategies (name -> weight), each playing the
        policy's seat."""


def exact_module(game: str) -> str | None:
    """The module holding `game`'s exact analysis, as its registration declares it (None: the game has none)."""

    return envs.game_spec(game).exact


def analysis(game: str) -> TabularGame | None:
    """`game`'s exact analysis (its exact module's `ANALYSIS`), or None when the game has none."""
    module = exact_module(game)
    return None if module is None else importlib.import_module(module).ANALYSIS


def exact_games() -> list[str]:
    """The registered games that have an exact analysis, in registry order."""

    return [game for game in envs.GAMES if exact_module(game) is not None]


def mixture(weights: Mapping[str, float]) -> None:
    """Refuse demonstrator weights that do not sum to 1."""
    if abs(sum(weights.values()) - 1.0) > 1e-9:
        raise ValueError(f"demonstrator weights must sum to 1, got {dict(weights)}")


@dataclass(frozen=True)
class PlayedSetup:
    """How the played measure (`sepo.eval.played`) puts the LLM's first free decision at one decision state
    with a real episode: the opponent that makes the state's history (a registered strategy or one of the
    analysis' `played_opponents`), which episode start reaches it (`reaches(state)` on the game's initial
    state: the deal, the first mover), and the LLM's own earlier actions as openings (canonical text)."""

    opponent: str
    reaches: Callable[[Any], bool]
    openings: tuple[str, ...] = ()
