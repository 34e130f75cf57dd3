"""The IPD exact phase: an LLM's policy at every joint history, scored, and its exact exploit figure e*.

IPD has no private information, so the LLM's prompt at a decision is a function of the joint history of the
finished rounds, whatever the prompt style (the conversation carries each earlier observation and the model's
own earlier answers). Scoring COOPERATE and DEFECT at each history's prompt, as the rollout renders it
(`sepo.eval.joint`: the model's earlier turns are the actions' canonical text), gives the answer-only policy
as a full table (`envs.ipd_exact`); its exploit figure e* and its payoff against any scripted opponent are
then exact (`envs.ipd_exact.best_response`, `expected_payoffs`). The table has 1 + 4 + ... + 4^(T−1) entries
(85 at T = 4), which the compact prompt (`prompt_style: compact`) makes cheap to score.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from envs import make_game
from envs.base import Lambdas
from envs.ipd import ACTIONS, IteratedPrisonersDilemma
from envs.ipd_exact import (
    ACTION,
    Joint,
    Payoffs,
    Table,
    behaviour_of,
    histories,
    history_key,
    round_expectations,
)
from sepo.eval.joint import joint_messages, scored_histories
from sepo.objective import EpisodeTerms, Metrics, aggregate, resolve_lambdas, scale
from sepo.pools import POOL_NAMES, Pools, load_pools

MAX_ROUNDS = 6  # 1 + 4 + ... + 4^5 = 1,365 scored prompts: the most rounds the exact phase and exploiter take


def _game(game_params: Mapping[str, Any] | None):
    return make_game("ipd", **dict(game_params or {}))


def history_messages(history: Sequence[Joint], game_params: Mapping[str, Any] | None = None,
                     seat: int = 0) -> list[dict[str, str]]:
    """The chat messages that put the LLM (in `seat`) at joint `history` ((own, opponent) letters per finished
    round), as the rollout renders them (`sepo.eval.joint.joint_messages`)."""
    return joint_messages(_game(game_params), [(ACTION[own], ACTION[opp]) for own, opp in history], seat)


def scored_policy(backend: Any, renderer: Any, game_params: Mapping[str, Any] | None = None,
                  seat: int = 0) -> dict[str, float]:
    """The answer-only policy as a full table, P(COOPERATE | joint history): the teacher-forced probability of
    each action's canonical text and end-of-turn, normalised over the two (one scoring call)."""
    game = _game(game_params)
    keyed = ((history_key(h), [(ACTION[own], ACTION[opp]) for own, opp in h]) for h in histories(game.num_rounds))
    rows = scored_histories(backend, renderer, game, keyed, ACTIONS, seat)
    return {key: row[0] for key, row in rows.items()}


def metrics_against(table: Table, pools: Pools, game: IteratedPrisonersDilemma, lambdas: Lambdas) -> Metrics:
    """The objective's metrics of `table` against every member of `pools`, computed exactly: per member, one
    episode of per-round expectations (payoffs, defection as the collusion signal, externality) through the
    objective's own `aggregate` (so e is clipped per opponent, as in the Kuhn organism's exact figures)."""
    s = scale(game.max_payoff)
    terms = []
    for pool in POOL_NAMES:
        for name in pools.names(pool):
            rounds = round_expectations(table, behaviour_of(lambda n=name: pools.make(n), game), game.num_rounds,
                                        Payoffs.of(game))
            terms.append(EpisodeTerms(pool=pool, opponent=name, scale=s, payoffs=tuple(r.own for r in rounds),
                                      opp_payoffs=tuple(r.opp for r in rounds),
                                      collusion=tuple(r.defect for r in rounds),
                                      externality=tuple(r.externality for r in rounds)))
    return aggregate(terms, lambdas)


def exact_pool_metrics(table: Table, game: IteratedPrisonersDilemma, pools: Pools | None = None,
                       lambdas: Mapping[str, float] | None = None) -> Metrics:
    """The objective's metrics of `table` against `pools` (default: the fixed default IPD pools) under the
    game's evaluation λ (or `lambdas` overrides), computed exactly."""
    return metrics_against(table, pools or load_pools("ipd"), game,
                           resolve_lambdas(game, lambdas, evaluation=True))
