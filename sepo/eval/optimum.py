"""Exact optima of the organism arms' objectives over a game's tabular policies: the reference lines of the study.

The game is any with an exact analysis (`envs.tabular`) whose decision states each have two legal actions: a tabular
policy then has one free probability per state (its second legal action's, the aggressive one in a betting game).
Each objective below is evaluated exactly (the analysis' exploitability and expectations, the objective's
`aggregate`) and maximised by enumerating the 2^states pure policies and then refining the best few by coordinate
ascent on a grid of each probability (the objectives are not linear: exploitability is a maximum over best responses
and e a clip, so an optimum can be mixed). What is reported is the exploitability (and u_train) of the maximiser.

- reward_only: u_train, the mean payoff per round against the training pool. Its maximisers are best responses
  to the training mix, a tie set: the band is the exploitability over the tied pure maximisers.
- per_pool: J under the training λ against the fixed default pools (u − λe·e − λc·c, e clipped).
- the frontier: for a weight w, u_train − w·exploitability, both in the game's payoff units. The adaptive arm's
  objective is close to a point of it, but its pool weight is not exactly this w (group normalisation
  rescales each group), so the frontier shows what SEPO could reach, not a prediction.
- exploitability descent: 0, the Nash family (the analysis' `equilibria`, where it declares them, also start
  the frontier's ascent).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envs import make_game
from envs.base import Strategy
from envs.tabular import DecisionState, Params, TabularGame, analysis
from sepo.objective import EpisodeTerms, Lambdas, aggregate, scale
from sepo.pools import POOL_NAMES, Pools, load_pools

Table = dict[str, Any]
GRID = tuple(sorted({i / 60 for i in range(61)}))  # includes 1/3, 2/3, 1/6 (the Nash family's values)
MAX_PURE_STATES = 16  # 2^16 pure policies: the most the enumeration takes


@dataclass(frozen=True)
class PolicySpace:
    """A game's tabular policies with two legal actions per decision state, one probability per state."""

    game: str
    params: Params
    analysis: TabularGame
    states: tuple[DecisionState, ...]
    max_payoff: float  # the game's, which sets the SEPO scale of J

    def table_of(self, probs: Sequence[float]) -> Table:
        """The policy whose second legal action's probability at states[i] is probs[i]."""
        return self.analysis.table({s.key: (1.0 - p, p) for s, p in zip(self.states, probs, strict=True)},
                                   self.params)

    def probs_of(self, table: Table) -> list[float]:
        """The second legal action's probability at each state: `table_of`'s inverse."""
        return [self.analysis.row(table, s.key)[s.legal[1]] for s in self.states]

    def exploitability(self, table: Table) -> float:
        return self.analysis.exploitability(table, self.params)


def policy_space(game: str, params: Params = None) -> PolicySpace:
    """`game`'s policy space; a clear error when it has no exact analysis, a state without exactly two legal
    actions, or too many states to enumerate its pure policies."""
    tabular = analysis(game)
    if tabular is None:
        raise ValueError(f"game {game!r} has no exact analysis (envs.tabular)")
    states = tuple(tabular.states(params))
    if any(len(s.legal) != 2 for s in states) or len(states) > MAX_PURE_STATES:
        raise ValueError(f"game {game!r}: the optimum needs at most {MAX_PURE_STATES} states of two legal actions "
                         f"each, got {len(states)}")
    if not hasattr(tabular, "equilibria"):
        raise ValueError(f"game {game!r}: its exact analysis declares no `equilibria` (the Nash reference line)")
    return PolicySpace(game, params, tabular, states, make_game(game, **dict(params or {})).max_payoff)


@dataclass(frozen=True)
class Opponents:
    """The fixed default pools' members, {(pool, name): strategy factory}, for fast exact objectives."""

    space: PolicySpace
    members: Mapping[tuple[str, str], Callable[[], Strategy]]

    @classmethod
    def default(cls, space: PolicySpace, pools: Pools | None = None) -> Opponents:
        pools = pools or load_pools(space.game)
        return cls(space, {(pool, name): (lambda s=pools.make(name): s)  # one instance each: only its table is read
                           for pool in POOL_NAMES for name in pools.names(pool)})

    def pool(self, name: str) -> dict[tuple[str, str], Callable[[], Strategy]]:
        return {key: m for key, m in self.members.items() if key[0] == name}

    def payoffs(self, policy: Table, key: tuple[str, str]) -> list[Any]:
        """The exact per-round expectations of `policy` against pool member `key`."""
        return self.space.analysis.expectations(policy, key[1], self.members[key], self.space.params)


def u_train(policy: Table, opponents: Opponents) -> float:
    """Mean payoff per round against the training pool, seats equally likely."""
    training = opponents.pool("training")
    return sum(sum(e.own for e in opponents.payoffs(policy, key)) for key in training) / len(training)


def j_value(policy: Table, opponents: Opponents, lambdas: Lambdas) -> float:
    """J = u − λe·e − λc·c − λx·x against the fixed pools, through the objective's own `aggregate`."""
    terms = []
    for pool, name in opponents.members:
        rounds = opponents.payoffs(policy, (pool, name))
        terms.append(EpisodeTerms(pool=pool, opponent=name, scale=scale(opponents.space.max_payoff),
                                  payoffs=tuple(e.own for e in rounds), opp_payoffs=tuple(e.opp for e in rounds),
                                  collusion=tuple(e.collusion for e in rounds),
                                  externality=tuple(e.externality for e in rounds)))
    return aggregate(terms, lambdas).safety


def maximise(space: PolicySpace, objective: Callable[[Table], float], starts: int = 4, sweeps: int = 4,
             extra_starts: Sequence[Sequence[float]] = ()) -> tuple[list[float], float]:
    """(probabilities, value) of a maximiser: the best pure policies and `extra_starts`, each refined by
    coordinate ascent on GRID."""
    vertices = sorted(itertools.product((0.0, 1.0), repeat=len(space.states)),
                      key=lambda v: objective(space.table_of(v)), reverse=True)
    best, best_value = list(vertices[0]), objective(space.table_of(vertices[0]))
    for start in [*vertices[:starts], *extra_starts]:
        probs, value = list(start), objective(space.table_of(start))
        for _ in range(sweeps):
            for i in range(len(probs)):
                for p in GRID:
                    trial = probs[:i] + [p] + probs[i + 1:]
                    v = objective(space.table_of(trial))
                    if v > value + 1e-12:
                        probs, value = trial, v
        if value > best_value:
            best, best_value = probs, value
    return best, best_value


def tie_band(space: PolicySpace, objective: Callable[[Table], float], tol: float = 1e-9) -> tuple[float, float]:
    """(min, max) exploitability over the pure policies that maximise `objective` (a tie set)."""
    values = {v: objective(space.table_of(v)) for v in itertools.product((0.0, 1.0), repeat=len(space.states))}
    top = max(values.values())
    tied = [space.exploitability(space.table_of(v)) for v, x in values.items() if x >= top - tol]
    return min(tied), max(tied)


def references(game: str, train_lambdas: Lambdas, weights: Sequence[float],
               opponents: Opponents | None = None) -> dict[str, object]:
    """The study's reference lines and frontier for `game`, all computed: Nash 0, uniform play, each arm's
    optimum."""
    space = opponents.space if opponents is not None else policy_space(game)
    opponents = opponents or Opponents.default(space)
    uniform = space.table_of([0.5] * len(space.states))
    low, high = tie_band(space, lambda t: u_train(t, opponents))
    per_pool, _ = maximise(space, lambda t: j_value(t, opponents, train_lambdas))
    frontier, previous = [], []
    equilibria = space.analysis.equilibria(space.params)  # the game's known Nash family: starts of the ascent
    nash_starts = [space.probs_of(t) for t in equilibria]
    for w in sorted(weights):  # continuation: each w also starts from the last w's maximiser
        probs, _ = maximise(space, lambda t, w=w: u_train(t, opponents) - w * space.exploitability(t),
                            extra_starts=[*nash_starts, *previous])
        previous = [probs]
        table = space.table_of(probs)
        frontier.append({"w": w, "u_train": u_train(table, opponents), "exploitability": space.exploitability(table)})
    return {
        "nash": space.exploitability(equilibria[-1]),
        "uniform": space.exploitability(uniform),
        "reward_only": {"low": low, "high": high, "objective": "u_train (best responses to the training mix)"},
        "per_pool": {"exploitability": space.exploitability(space.table_of(per_pool)),
                     "u_train": u_train(space.table_of(per_pool), opponents),
                     "objective": "J with the training lambdas against the fixed default pools"},
        "exploitability_descent": {"exploitability": 0.0, "objective": "-exploitability (Nash)"},
        "frontier": frontier,
    }
