"""Exact J, u, e and c of a tabular Kuhn policy against the fixed default pools (no sampled episodes).

Every default Kuhn pool member is a behaviour-strategy table (`envs.strategies.kuhn`), so the expected
per-hand payoff and fold rate of a policy against each of them are exact (`envs.kuhn_exact`). A hand puts
the policy first or second with probability 1/2 each (the random first-mover rule, and the alternating rule
over an even number of hands). The expectations go through the objective's own `aggregate` as one-round
`EpisodeTerms` per opponent, so J has the one definition the trainer and `sepo eval` use: J = u − λe·e −
λc·c − λx·x, e clipped per opponent, c the collusion rate (the LLM's fold rate against collusive partners),
x = 0 in Kuhn, under the game's evaluation λ.
"""

from __future__ import annotations

from collections.abc import Mapping

from envs.base import Game, Lambdas
from envs.kuhn_exact import fold_probabilities, game_value
from sepo.objective import EpisodeTerms, Metrics, aggregate, resolve_lambdas, scale
from sepo.pools import POOL_NAMES, Pools, load_pools

Policy = Mapping[str, Mapping[str, float]]


def expected_hand(policy: Policy, opponent: Policy) -> tuple[float, float]:
    """(expected payoff, fold probability) of `policy` per hand against `opponent`, positions equally likely."""
    payoff = 0.5 * (game_value(policy, opponent) - game_value(opponent, policy))
    folds_first = fold_probabilities(policy, opponent)[0]
    folds_second = fold_probabilities(opponent, policy)[1]
    return payoff, 0.5 * (folds_first + folds_second)


def opponent_tables(pools: Pools) -> dict[tuple[str, str], Policy]:
    """{(pool, name): table} of every member (a member that is not a table is an error: no exact figures)."""
    tables = {}
    for pool in POOL_NAMES:
        for name in pools.names(pool):
            strategy = pools.make(name)
            table = getattr(strategy, "table", None)
            if table is None:
                raise ValueError(f"kuhn pool member {name!r} has no behaviour table; its figures cannot be exact")
            tables[(pool, name)] = table
    return tables


def metrics_against(policy: Policy, tables: Mapping[tuple[str, str], Policy], lambdas: Lambdas,
                    max_payoff: float) -> Metrics:
    """The objective's metrics of `policy` against opponents given as {(pool, name): table}, computed exactly."""
    s = scale(max_payoff)
    terms = []
    for (pool, name), table in tables.items():
        payoff, fold = expected_hand(policy, table)
        terms.append(EpisodeTerms(pool=pool, opponent=name, scale=s, payoffs=(payoff,), opp_payoffs=(-payoff,),
                                  collusion=(fold,), externality=(0.0,)))
    return aggregate(terms, lambdas)


def exact_pool_metrics(policy: Policy, game: Game, pools: Pools | None = None,
                       lambdas: Mapping[str, float] | None = None) -> Metrics:
    """The objective's metrics of `policy` against `pools` (default: the fixed default Kuhn pools) with the
    game's evaluation λ (or `lambdas` overrides), computed exactly."""
    return metrics_against(policy, opponent_tables(pools or load_pools("kuhn")),
                           resolve_lambdas(game, lambdas, evaluation=True), game.max_payoff)
