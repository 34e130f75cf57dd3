"""Exact optima of the organism arms' objectives over tabular Kuhn policies: the reference lines of the study.

A tabular policy has one free probability per information set (the aggressive action's: BET or CALL), 12 in
all. Each objective below is evaluated exactly (`envs.kuhn_exact`, the objective's `aggregate`) and maximised by
enumerating the 4,096 pure policies and then refining the best few by coordinate ascent on a grid of each
probability (the objectives are not linear: exploitability is a maximum over best responses and e a clip,
so an optimum can be mixed). What is reported is the exploitability (and u_train) of the maximiser.

- reward_only: u_train, the mean payoff per hand against the training pool. Its maximisers are best responses
  to the training mix, a tie set: the band is the exploitability over the tied pure maximisers.
- per_pool: J under the training λ against the fixed default pools (u − λe·e − λc·c, e clipped).
- the frontier: for a weight w, u_train − w·exploitability, both in chips per hand. The adaptive arm's
  objective is close to a point of it, but its pool weight is not exactly this w (group normalisation
  rescales each group), so the frontier shows what SEPO could reach, not a prediction.
- exploitability descent: 0, the Nash family.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from envs.kuhn import INFO_STATES, actions_at
from envs.kuhn_exact import expected_hand, exploitability, nash_policy
from sepo.objective import EpisodeTerms, Lambdas, aggregate, scale
from sepo.pools import POOL_NAMES, Pools, load_pools

Table = dict[str, dict[str, float]]
GRID = tuple(sorted({i / 60 for i in range(61)}))  # includes 1/3, 2/3, 1/6 (the Nash family's values)


def table_of(probs: Sequence[float]) -> Table:
    """The policy whose aggressive-action probability at INFO_STATES[i] is probs[i]."""
    out = {}
    for info, p in zip(INFO_STATES, probs):
        passive, aggressive = actions_at(info[1:])
        out[info] = {passive: 1.0 - p, aggressive: p}
    return out


@dataclass(frozen=True)
class Opponents:
    """The fixed default pools as tables, {(pool, name): table}, for fast exact objectives."""

    tables: Mapping[tuple[str, str], Table]

    @classmethod
    def default(cls, pools: Pools | None = None) -> Opponents:
        pools = pools or load_pools("kuhn")
        return cls({(pool, name): pools.make(name).table for pool in POOL_NAMES for name in pools.names(pool)})

    def pool(self, name: str) -> dict[tuple[str, str], Table]:
        return {key: t for key, t in self.tables.items() if key[0] == name}


def u_train(policy: Table, opponents: Opponents) -> float:
    """Mean payoff per hand (chips) against the training pool, positions equally likely."""
    training = opponents.pool("training")
    return sum(expected_hand(policy, t)[0] for t in training.values()) / len(training)


def j_value(policy: Table, opponents: Opponents, lambdas: Lambdas, max_payoff: float = 2.0) -> float:
    """J = u − λe·e − λc·c − λx·x against the fixed pools, through the objective's own `aggregate`."""
    terms = []
    for (pool, name), table in opponents.tables.items():
        payoff, fold = expected_hand(policy, table)
        terms.append(EpisodeTerms(pool=pool, opponent=name, scale=scale(max_payoff), payoffs=(payoff,),
                                  opp_payoffs=(-payoff,), collusion=(fold,), externality=(0.0,)))
    return aggregate(terms, lambdas).safety


def maximise(objective: Callable[[Table], float], starts: int = 4, sweeps: int = 4,
             extra_starts: Sequence[Sequence[float]] = ()) -> tuple[list[float], float]:
    """(probabilities, value) of a maximiser: the best pure policies and `extra_starts`, each refined by
    coordinate ascent on GRID."""
    vertices = sorted(itertools.product((0.0, 1.0), repeat=len(INFO_STATES)),
                      key=lambda v: objective(table_of(v)), reverse=True)
    best, best_value = list(vertices[0]), objective(table_of(vertices[0]))
    for start in [*vertices[:starts], *extra_starts]:
        probs, value = list(start), objective(table_of(start))
        for _ in range(sweeps):
            for i in range(len(probs)):
                for p in GRID:
                    trial = probs[:i] + [p] + probs[i + 1:]
                    v = objective(table_of(trial))
                    if v > value + 1e-12:
                        probs, value = trial, v
        if value > best_value:
            best, best_value = probs, value
    return best, best_value


def tie_band(objective: Callable[[Table], float], tol: float = 1e-9) -> tuple[float, float]:
    """(min, max) exploitability over the pure policies that maximise `objective` (a tie set)."""
    values = {v: objective(table_of(v)) for v in itertools.product((0.0, 1.0), repeat=len(INFO_STATES))}
    top = max(values.values())
    tied = [exploitability(table_of(v)) for v, x in values.items() if x >= top - tol]
    return min(tied), max(tied)


def references(train_lambdas: Lambdas, weights: Sequence[float],
               opponents: Opponents | None = None) -> dict[str, object]:
    """The study's reference lines and frontier, all computed: Nash 0, uniform play, each arm's optimum."""
    opponents = opponents or Opponents.default()
    uniform = table_of([0.5] * len(INFO_STATES))
    low, high = tie_band(lambda t: u_train(t, opponents))
    per_pool, _ = maximise(lambda t: j_value(t, opponents, train_lambdas))
    frontier, previous = [], []
    nash = [nash_policy(a)[info][actions_at(info[1:])[1]] for a in (0.0, 1 / 6, 1 / 3) for info in INFO_STATES]
    nash_starts = [nash[i * len(INFO_STATES):(i + 1) * len(INFO_STATES)] for i in range(3)]
    for w in sorted(weights):  # continuation: each w also starts from the last w's maximiser
        probs, _ = maximise(lambda t, w=w: u_train(t, opponents) - w * exploitability(t),
                            extra_starts=[*nash_starts, *previous])
        previous = [probs]
        table = table_of(probs)
        frontier.append({"w": w, "u_train": u_train(table, opponents), "exploitability": exploitability(table)})
    return {
        "nash": exploitability(nash_policy()),
        "uniform": exploitability(uniform),
        "reward_only": {"low": low, "high": high, "objective": "u_train (best responses to the training mix)"},
        "per_pool": {"exploitability": exploitability(table_of(per_pool)),
                     "u_train": u_train(table_of(per_pool), opponents),
                     "objective": "J with the training lambdas against the fixed default pools"},
        "exploitability_descent": {"exploitability": 0.0, "objective": "-exploitability (Nash)"},
        "frontier": frontier,
    }

