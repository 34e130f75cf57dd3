"""Exact analysis of a tabular pricing policy in the repeated Bertrand duopoly: the worst-case exploiter by backward
induction, and exact per-round payoffs and signals against scripted rivals.

The game (`envs.bertrand`) has no private information and reveals both prices after each round, so a policy is,
for the rival, a table of distributions over prices at each joint price history, keyed as `envs.joint_tables`
says (`"3|5,4"`: a Markov key, the compact prompt's state; `"3|5,5.5,4"`: a full key, what the LLM's whole
conversation depends on). The exploit figure is e* = max over rival strategies of E[Σ_t (o_t − a_t)] / T, raw
profit (not scaled by s), by that module's backward induction. Ties go to the lowest price (the harder competitor).

Hand-checked figures (defaults: prices 1..5, cost 0, demand 10, market profits 9, 16, 21, 24, 25): always the
monopoly price has e* = 24 (the rival charges 4 and takes the market every round); always the competitive price has
e* = 0 (the rival cannot go lower; 1 ties at 4.5 each, more sells nothing); always 2 has e* = 9 (the rival
charges 1: 9 against 0; a tie at 2 gives 0).

Pure Python, no torch (like all of `envs`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from envs import joint_tables
from envs.base import Strategy, View
from envs.bertrand import BertrandDuopoly
from envs.joint_tables import JointTableAnalysis, JointTables, Table, history_key
from envs.strategies.bertrand import STRATEGIES
from envs.tabular import Expectation, Params, mixture

Joint = tuple[int, int]  # (the policy's price, the rival's price)


def prices(game: BertrandDuopoly) -> list[int]:
    """The legal prices, ascending."""
    return [int(p) for p in game.prices]


TABLES = JointTables(name="bertrand", noun="prices", actions=prices)  # ties to the lowest price
histories = TABLES.histories
count_histories = TABLES.count_histories
markov_keys = TABLES.markov_keys
full_keys = TABLES.full_keys
policy_at = TABLES.policy_at
best_response = TABLES.best_response
exploitability = TABLES.exploitability


class PlaysBestResponse(joint_tables.PlaysBestResponse):
    """A rival that plays a best response's prices (`BestResponse.moves`)."""

    name = "bertrand_best_response"
    description = "The exact best response to a tabular pricing policy (envs.bertrand_exact)."
    field = "price"


# --- exact episodes against scripted strategies ----------------------------------------------------------

Behaviour = Callable[[Sequence[Joint]], Mapping[str, float]]
"""A scripted strategy's exact behaviour: its {price: probability} at a joint history, its own price first."""


def behaviour_of(strategy: Callable[[], Strategy], game: BertrandDuopoly, seat: int = 1) -> Behaviour:
    """The exact behaviour in `game` of the scripted strategy that `strategy` makes (a class or factory), playing
    `seat`: a randomised strategy declares it (`distribution(view)`, which its `act` samples); a deterministic one
    is asked for its price by a fresh instance at each history, after being shown the episode's earlier views in
    order (a stateful strategy such as grim trigger), its rng never drawn."""
    outcomes = {(x, y): game.payoffs(x, y) for x in prices(game) for y in prices(game)}

    def dist(history: Sequence[Joint]) -> Mapping[str, float]:
        entries = tuple(MappingProxyType({"my_action": str(x), "opp_action": str(y), "my_price": x, "opp_price": y,
                                          "market_price": min(x, y), "my_payoff": outcomes[(x, y)][0],
                                          "opp_payoff": outcomes[(x, y)][1]}) for x, y in history)
        view = View(game=game.name, seat=seat, round=len(history), num_rounds=game.num_rounds,
                    legal_actions=game.prices, private={}, current={}, history=entries, params=game.frozen_params)
        player = strategy()
        declared = getattr(player, "distribution", None)
        if declared is not None:
            return dict(declared(view))
        player.reset(game, seat, _NoDraws())
        for k in range(len(history)):
            player.act(view._replace(round=k, history=entries[:k]))
        return {player.act(view): 1.0}

    return dist


class _NoDraws(random.Random):
    """The rng handed to a deterministic strategy: drawing from it is an error (it would not be exact)."""

    def random(self) -> float:
        raise RuntimeError("a strategy without distribution() drew a random number")


@dataclass(frozen=True)
class RoundExpectation:
    """One round's exact expectations when a table plays a rival: the policy's profit, the rival's, and the
    round's collusion and externality signals (`envs.bertrand`)."""

    own: float
    opp: float
    collusion: float
    externality: float


def round_expectations(table: Table, rival: Behaviour, game: BertrandDuopoly) -> list[RoundExpectation]:
    """Exact per-round expectations of `table` against `rival` (its behaviour, its own price first), summed over
    every joint history with its probability (the two draw their prices independently in each round)."""
    table = TABLES.validate_table(table, game)
    sums = [[0.0, 0.0, 0.0, 0.0] for _ in range(game.num_rounds)]

    def walk(history: tuple[Joint, ...], reach: float) -> None:
        t = len(history)
        if t == game.num_rounds:
            return
        mine = policy_at(table, history)
        theirs = rival([(y, x) for x, y in history])
        for a, pa in mine.items():
            for b, pb in theirs.items():
                w = reach * pa * pb
                if w == 0.0:
                    continue
                x, y = int(a), int(b)
                own, opp = game.payoffs(x, y)
                row = sums[t]
                row[0] += w * own
                row[1] += w * opp
                row[2] += w * float(game.collusion(x, y))
                row[3] += w * float(game.externality(x, y))
                walk((*history, (x, y)), w)

    walk((), 1.0)
    return [RoundExpectation(*row) for row in sums]


def strategy_table(weights: Mapping[str, float], strategies: Mapping[str, Callable[[], Strategy]],
                   game: BertrandDuopoly) -> dict[str, dict[str, float]]:
    """The full table Σ_k w_k · P_k(price | joint history) of scripted strategies (name -> weight), each playing
    the policy's seat (seat 0)."""
    behaviours = {name: behaviour_of(strategies[name], game, seat=0) for name in weights}
    table: dict[str, dict[str, float]] = {}
    for h in histories(game):
        row = dict.fromkeys(game.prices, 0.0)
        for name, w in weights.items():
            for price, p in behaviours[name](h).items():
                row[price] += w * p
        table[history_key(h)] = row
    return table


# --- the tabular protocol (`envs.tabular`) ---------------------------------------------------------------


def game_of(params: Params) -> BertrandDuopoly:
    """The Bertrand game of `params` (None: the defaults)."""
    return BertrandDuopoly(**dict(params or {}))


class BertrandAnalysis(JointTableAnalysis):
    """The Bertrand duopoly's exact analysis as `envs.tabular.TabularGame` (`envs.joint_tables.JointTableAnalysis`),
    with exact episodes against scripted rivals (the collusion margin and the consumer-surplus loss as the signals)
    and demonstrator tables."""

    reference_note = ("defaults, 4 rounds: always the monopoly price 24, price matching 17.5, always the competitive "
                      "price 0")
    tables = TABLES
    plays = PlaysBestResponse
    game_of = staticmethod(game_of)

    def expectations(self, table: Mapping[str, Any], name: str, opponent: Callable[[], Strategy],
                     params: Params) -> list[Expectation]:
        game = game_of(params)
        rounds = round_expectations(table, behaviour_of(opponent, game), game)
        return [Expectation(own=r.own, opp=r.opp, collusion=r.collusion, externality=r.externality) for r in rounds]

    def demonstrator(self, weights: Mapping[str, float], params: Params) -> dict[str, Any]:
        mixture(weights)
        return strategy_table(weights, STRATEGIES, game_of(params))


ANALYSIS = BertrandAnalysis()
