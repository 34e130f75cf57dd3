"""Kuhn poker's exact analysis as the tabular protocol (`envs.tabular`): the module its registration names.

The figures are `envs.kuhn_exact`'s (best response, exploitability, game value, exact hands); this module adds
what the protocol needs beside them: the 12 information sets' prompts as training renders them
(`infoset_messages`), the table from scored rows, a strategy playing a response and the demonstrator (both from
`envs.strategies.kuhn`, which itself imports `envs.kuhn_exact`: hence a module of its own).

Pure Python, no torch (like all of `envs`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from envs import make_game
from envs.base import Strategy
from envs.kuhn import CARDS, INFO_STATES, KuhnPoker, KuhnState, actions_at
from envs.kuhn_exact import (
    NASH_RATES,
    both_responses,
    expected_hand,
    exploitability,
    game_value,
    nash_policy,
    validate_policy,
)
from envs.strategies.kuhn import STRATEGIES, PlaysTable
from envs.tabular import DecisionState, Expectation, Messages, Params, PlayedSetup, Response, mixture

PLAYED_PASSIVE = "kuhn_played_passive"  # the opponent that makes "p" histories and ends hands the LLM opens
PLAYED_AGGRESSIVE = "always_bet"  # the scripted strategy that makes "b" and "pb" histories


def passive_opponent() -> PlaysTable:
    """The opponent that always plays the passive action (PASS with no bet pending, FOLD facing one)."""
    return PlaysTable({info: {actions_at(info[1:])[0]: 1.0, actions_at(info[1:])[1]: 0.0} for info in INFO_STATES})


def _game(params: Params) -> KuhnPoker:

    return make_game("kuhn", **dict(params or {}))  # type: ignore[return-value]


def infoset_messages(info: str, game_params: Params = None, seat: int = 0) -> Messages:
    """The chat messages that put the LLM at information set `info` ("K", "Qp", "Jb", "Qpb", ...) in the first
    hand of an episode of the training game (`game_params`, LLM in `seat`), as the rollout renders them.

    The position is the info set's (player 0 acts first): under the random first-mover rule the hand's first
    mover is drawn so, under the alternating rule the LLM's seat is the position (hand 0 starts with seat 0).
    Earlier decisions of the LLM in the hand appear as user turn + assistant turn (the action's text)."""
    game = _game(game_params)
    card, history = info[0], info[1:]
    position = len(history) % 2
    if game.first_mover_rule == "alternate":
        seat = position
    first = seat if position == 0 else 1 - seat
    other = next(c for c in CARDS if c != card)
    deal = (card, other) if seat == 0 else (other, card)
    state = KuhnState(deals=[deal] * game.num_rounds,
                      first_movers=[first] * game.num_rounds if game.first_mover_rule == "random" else [])
    messages = [{"role": "system", "content": game.system_prompt(seat)}]
    letters = {"p": ("PASS", "FOLD"), "b": ("BET", "CALL")}
    for k, letter in enumerate(history):
        action = letters[letter][1 if history[:k].endswith("b") else 0]
        actor = game.current_players(state)[0]
        if actor == seat:
            messages += [{"role": "user", "content": game.observation(state, seat)},
                         {"role": "assistant", "content": action}]
        game.step(state, {actor: action})
    return [*messages, {"role": "user", "content": game.observation(state, seat)}]


class KuhnAnalysis:
    """Kuhn poker's exact analysis as `envs.tabular.TabularGame`: the 12 information sets of the classic hand
    (the first hand of an episode), the best response in both positions, exploitability and game value, and
    exact hands against behaviour-table opponents. The figures do not depend on the game's parameters (one
    classic hand); the prompts do."""

    exploit_key = "exploitability"
    eval_form = "reasoning"
    state_noun = "info sets"
    reference_note = ""  # the exploitability is reported beside the card-conditioned rates and the Nash row
    card_nash_rates = NASH_RATES  # the Nash row of `sepo eval`'s card-conditioned table (`sepo.eval.report`)

    def states(self, params: Params, seat: int = 0) -> list[DecisionState]:
        return [DecisionState(info, infoset_messages(info, params, seat), actions_at(info[1:]))
                for info in INFO_STATES]

    def table(self, rows: Mapping[str, Sequence[float]], params: Params) -> dict[str, Any]:
        return {info: dict(zip(actions_at(info[1:]), rows[info])) for info in INFO_STATES}

    def row(self, table: Mapping[str, Any], key: str) -> dict[str, float]:
        return dict(table[key])

    def validate(self, table: Mapping[str, Any], params: Params) -> dict[str, Any]:
        return validate_policy(table)

    def best_response(self, table: Mapping[str, Any], params: Params) -> Response:
        return both_responses(table)

    def exploitability(self, table: Mapping[str, Any], params: Params) -> float:
        return exploitability(table)

    def extra_figures(self, table: Mapping[str, Any], params: Params) -> dict[str, float]:
        return {"game_value": game_value(table, table)}

    def strategy(self, moves: Mapping[str, Any]) -> Strategy:
        return PlaysTable(moves)

    def check_size(self, params: Params) -> None:
        """Every Kuhn game has 12 information sets: nothing to bound."""

    def applies(self, params: Params) -> bool:
        return True

    def prompt_note(self, params: Params) -> str | None:
        """Which prompt the exact figures score: the only one training shows (one hand per episode), or the
        first hand's of a multi-hand episode (exact for that prompt only)."""
        game = _game(params)
        if game.num_rounds == 1:
            return "training prompt (one hand per episode: the policy is a function of the information set)"
        return (f"first hand of a {game.num_rounds}-hand episode: exact for that prompt only (later hands' prompts "
                "carry earlier hands and chips)")

    def expectations(self, table: Mapping[str, Any], name: str, opponent: Callable[[], Strategy],
                     params: Params) -> list[Expectation]:
        """One hand against a behaviour-table opponent: payoff, the opponent's (zero-sum), the fold rate as the
        collusion signal, no externality."""
        opponent_table = getattr(opponent(), "table", None)
        if opponent_table is None:
            raise ValueError(f"kuhn pool member {name!r} has no behaviour table; its figures cannot be exact")
        payoff, fold = expected_hand(table, opponent_table)
        return [Expectation(own=payoff, opp=-payoff, collusion=fold, externality=0.0)]

    def played_setup(self, key: str, params: Params, seat: int = 0) -> PlayedSetup:
        """The played measure's episode for information set `key` (one-hand Kuhn with a random first mover):
        the deal gives the LLM the set's card and the position its history implies; an opponent that always
        plays the passive action puts the LLM at "Xp" as second mover and ends the hand after the LLM acts
        first; `always_bet` puts it at "Xb" and, after the LLM's PASS (an opening), at "Xpb"."""
        game = _game(params)
        if game.num_rounds != 1 or game.first_mover_rule != "random":
            raise ValueError("the played policy needs one-hand Kuhn with a random first mover (num_hands: 1, "
                             f"first_mover: random); got {game.params}")
        card, history = key[0], key[1:]
        first_mover = seat if len(history) % 2 == 0 else 1 - seat
        return PlayedSetup(
            opponent=PLAYED_PASSIVE if history in ("", "p") else PLAYED_AGGRESSIVE,
            reaches=lambda state: state.deals[0][seat] == card and game.first_mover(0, state) == first_mover,
            openings=("PASS",) if history == "pb" else ())

    def played_opponents(self) -> dict[str, Callable[[], Strategy]]:
        """The played measure's opponents beside the registered strategies."""
        return {PLAYED_PASSIVE: passive_opponent}

    def equilibria(self, params: Params) -> list[dict[str, dict[str, float]]]:
        """Members of the classic hand's Nash family (alpha 0, 1/6, 1/3; the last the default `nash_policy`):
        the starts of `sepo.eval.optimum`'s ascent and its Nash reference line."""
        return [nash_policy(alpha) for alpha in (0.0, 1 / 6, 1 / 3)]

    def demonstrator(self, weights: Mapping[str, float], params: Params) -> dict[str, Any]:
        """sum_k w_k * table_k of scripted Kuhn strategies, per information set."""
        mixture(weights)
        tables = {name: STRATEGIES[name]().table for name in weights}
        first = next(iter(tables.values()))
        return {info: {a: sum(w * tables[n][info][a] for n, w in weights.items()) for a in first[info]}
                for info in first}


ANALYSIS = KuhnAnalysis()
