"""SEPO rewards for TRL: the per-episode reward function, per-round rewards for the advantages, and metrics.

Everything here reads one episode's record (what the rollout returns as extra keys: the episode and, for
credit shared / auxiliary, its probe episodes) and the game's lambdas; the group-level part of the `shared`
arm is finished by the trainer after gathering.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from envs import Game
from envs.base import Lambdas
from sepo import objective
from sepo.objective import PROBE_CREDITS, EpisodeTerms


def terms_of(record: Any, game: Game) -> EpisodeTerms:
    """The objective's per-round signals of the LLM seat in one episode record."""
    return objective.episode_terms(record.rounds, record.spec.seat, record.spec.pool, game.max_payoff,
                                   opponent=record.spec.opponent)


def fallback_penalties(record: Any, num_rounds: int, penalty: float) -> list[float]:
    """Per-round penalty for actions the constrained fallback decided (0 everywhere when penalty is 0)."""
    out = [0.0] * num_rounds
    if penalty:
        for turn in record.turns:
            if turn.fallback and 0 <= turn.round < num_rounds:
                out[turn.round] += penalty
    return out


class SEPOReward:
    """TRL reward function: the credited SEPO reward of each episode (mean of its per-round rewards).

    per_pool, reward_only and auxiliary are computed from the episode's own record (and, for auxiliary,
    its probe episodes); for `shared` the group penalty is the mean of the group's probe penalties, which
    only the trainer can see across ranks, so this returns s*u there and the trainer subtracts the shared
    penalty (the advantages, which cancel it anyway, use the exact value). `paper`: the revised paper's
    round reward (the whole-episode penalty on every round; `objective.round_rewards`). `exploit_reward`:
    the exploit-pool term, clipped (the method) or signed (`objective.EXPLOIT_REWARDS`).
    """

    __name__ = "sepo"

    def __init__(self, games: Mapping[str, Game], lambdas: Mapping[str, Lambdas], credit: str,
                 fallback_penalty: float = 0.0, paper: bool = False, exploit_reward: str = "clipped") -> None:
        self.games, self.lambdas, self.credit = games, lambdas, credit
        self.fallback_penalty, self.paper, self.exploit_reward = fallback_penalty, paper, exploit_reward

    def round_rewards(self, record: Any, probes: Sequence[Any] = ()) -> tuple[list[float], float]:
        """(per-round rewards before any shared penalty, this rollout's probe penalty or 0).

        `probes` are the records of the probe episodes played for this rollout (credit shared / auxiliary).
        """
        game = self.games[record.spec.game]
        terms, lam = terms_of(record, game), self.lambdas[record.spec.game]
        probe_terms = [terms_of(r, self.games[r.spec.game]) for r in probes]
        rewards = objective.round_rewards(terms, lam, self.credit, probes=probe_terms, paper=self.paper,
                                          shared_penalty=0.0, exploit_reward=self.exploit_reward)  # shared: the trainer subtracts the group mean
        probe_penalty = objective.probe_penalty(terms, probe_terms, lam) if self.credit in PROBE_CREDITS else 0.0
        penalties = fallback_penalties(record, len(rewards), self.fallback_penalty)
        return [r - p for r, p in zip(rewards, penalties)], probe_penalty

    def __call__(self, prompts: list, completions: list, completion_ids: list, episode: list,
                 round_rewards: list, log_metric: Callable[[str, float], None] | None = None,
                 **_: Any) -> list[float]:
        """TRL's scalar reward of each rollout: the mean of its per-round rewards, which the rollout credited
        once with `round_rewards` (TRL hands the rollout's `round_rewards` column here, and the advantages
        read the same column); logs the batch's `episode_metrics`."""
        start = time.perf_counter()
        rewards = [sum(per_round) / max(1, len(per_round)) for per_round in round_rewards]
        if log_metric is not None:
            for name, value in episode_metrics(episode, self.games, self.lambdas).items():
                log_metric(name, value)
            log_metric("sepo/time/rewards_s", time.perf_counter() - start)
        return rewards


def episode_metrics(records: Sequence[Any], games: Mapping[str, Game],
                    lambdas: Mapping[str, Lambdas]) -> dict[str, float]:
    """Batch metrics: per game and pool u/e/c/x, safety J, fallback and parse-failure rates, action frequencies.

    Keys look like `sepo/<game>/<pool>/u`, `sepo/<game>/J`, `sepo/fallback_rate`, `sepo/<game>/action/<A>`.
    J here is the objective's `aggregate` over this batch's episodes (a noisy per-step estimate of eval's J).
    """
    out: dict[str, float] = {}
    by_game: dict[str, list[Any]] = defaultdict(list)
    for r in records:
        by_game[r.spec.game].append(r)
    decisions = fallbacks = failures = 0
    for name, recs in by_game.items():
        game = games[name]
        terms = [terms_of(r, game) for r in recs]
        m = objective.aggregate(terms, lambdas[name])
        out[f"sepo/{name}/J"] = m.safety
        for key in ("u", "e", "c", "x", "payoff", "welfare"):
            out[f"sepo/{name}/{key}"] = getattr(m, key)
        for pool, means in objective.pool_means(terms).items():
            for key, value in means.items():
                out[f"sepo/{name}/{pool}/{key}"] = value
        actions: Counter[str] = Counter(turn.action for r in recs for turn in r.turns)
        total = sum(actions.values())
        for action, n in actions.items():
            out[f"sepo/{name}/action/{action}"] = n / total
        decisions += total
        fallbacks += sum(r.n_fallbacks for r in recs)
        failures += sum(r.n_parse_failures for r in recs)
    out["sepo/fallback_rate"] = fallbacks / max(1, decisions)
    out["sepo/parse_failure_rate"] = failures / max(1, decisions)
    if by_game:
        out["sepo/safety"] = sum(out[f"sepo/{g}/J"] for g in by_game) / len(by_game)
    return out
