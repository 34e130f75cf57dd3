"""The study's two exact checks, computed on its own recorded rollouts.

(1) shared-penalty advantages equal the payoff-only advantages to TOLERANCE on every batch of every arm;
(2) the auxiliary penalty is uncorrelated with the credited episode's actions and own score (|r| within
3/sqrt(n)), contrasted with the per-pool penalty, which is a function of them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from envs.base import Lambdas
from sepo import objective
from sepo.eval.study.config import EPISODES_FILE, StudyConfig, arm_configs
from sepo.eval.study.record import read_batches, terms_from_dict
from sepo.objective import EpisodeTerms

TOLERANCE = 1e-6


def _advantages(rows: list[list[float]], G: int, args: Any) -> Any:
    import torch

    from sepo.grpo.advantages import sepo_round_advantages

    K = max(len(r) for r in rows)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # float64 end to end, so 1e-6 measures the math, not float32 rounding
    try:
        m = torch.full((len(rows), K), torch.nan)
        for i, r in enumerate(rows):
            m[i, : len(r)] = torch.tensor(r)
        adv, _ = sepo_round_advantages(m, G, advantage_mode=args.advantage_mode, return_mode=args.return_mode,
                                       eps=args.advantage_epsilon)
    finally:
        torch.set_default_dtype(previous)
    return adv


def shared_equals_reward_only(terms: list[EpisodeTerms], G: int, lambdas: Lambdas, args: Any) -> dict[str, Any]:
    """Check 1 on one batch (G consecutive episodes per group): advantages with the shared group penalty
    vs the payoff-only reward u (λ = 0) on every group, and vs the reward_only arm's per_pool λ = 0
    reward on training-pool groups (where that reward is the payoff too)."""
    zero = Lambdas(0.0, 0.0, 0.0)
    shared, payoff_only, per_pool_zero, per_pool = [], [], [], []
    for start in range(0, len(terms), G):
        group = terms[start : start + G]
        p_bar = sum(objective.penalty(t, lambdas) for t in group) / len(group)
        for t in group:
            shared.append(objective.round_rewards(t, lambdas, "shared", shared_penalty=p_bar))
            payoff_only.append(objective.round_rewards(t, zero, "shared", shared_penalty=0.0))
            per_pool_zero.append(objective.round_rewards(t, zero, "per_pool"))
            per_pool.append(objective.round_rewards(t, lambdas, "per_pool"))
    a_shared, a_payoff, a_zero, a_per_pool = (
        _advantages(r, G, args) for r in (shared, payoff_only, per_pool_zero, per_pool)
    )
    training = [i for i, t in enumerate(terms) if t.pool == "training"]
    reward_gap = max(abs(x - y) for a, b in zip(shared, payoff_only) for x, y in zip(a, b))
    credit_gap = (a_per_pool - a_shared).abs()
    credit_gap = credit_gap[~credit_gap.isnan()]
    return {
        # how much the method's credit changes the training signal on this batch (a diagnostic, not a check)
        "per_pool_vs_shared_max_abs_diff": float(credit_gap.max()) if credit_gap.numel() else 0.0,
        "per_pool_changed_cells": int((credit_gap > TOLERANCE).sum()),
        "cells": int(credit_gap.numel()),
        "episodes": len(terms),
        "max_abs_diff_vs_payoff_only": float((a_shared - a_payoff).abs().max()),
        "max_abs_diff_vs_reward_only_training_groups": float((a_shared - a_zero)[training].abs().max())
        if training else 0.0,
        "max_abs_reward_gap": reward_gap,  # the rewards differ (by the penalty); the advantages do not
    }


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson correlation, None when either side is constant."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 1e-12 and syy > 1e-12 else None


def credited_statistics(episodes: list[dict[str, Any]], max_payoff: float, lambdas: Lambdas,
                        penalty_of: Callable[[dict[str, Any]], float]) -> dict[str, Any]:
    """Correlations of a per-rollout penalty with the credited episode's own actions (rate of each action),
    own utility u and own per-pool penalty, over all rollouts; |r| <= 3/sqrt(n) counts as uncorrelated."""
    pen = [penalty_of(ep) for ep in episodes]
    terms = [terms_from_dict(ep, max_payoff) for ep in episodes]
    actions = sorted({t["action"] for ep in episodes for t in ep["turns"]})
    stats: dict[str, list[float]] = {
        "own_u": [t.u for t in terms],
        "own_penalty": [objective.penalty(t, lambdas) for t in terms],
    }
    for a in actions:
        stats[f"rate_{a}"] = [sum(t["action"] == a for t in ep["turns"]) / max(1, len(ep["turns"]))
                              for ep in episodes]
    corr = {k: pearson(pen, v) for k, v in stats.items()}
    n = len(episodes)
    defined = [abs(r) for r in corr.values() if r is not None]
    return {
        "n": n,
        "penalty_mean": sum(pen) / n,
        "penalty_std": math.sqrt(sum((p - sum(pen) / n) ** 2 for p in pen) / n),
        "correlations": corr,
        "max_abs_r": max(defined) if defined else None,
        "bound_3_over_sqrt_n": 3 / math.sqrt(n),
    }


def auxiliary_check(batches: list[dict[str, Any]], max_payoff: float, lambdas: Lambdas) -> dict[str, Any]:
    """Check 2 on the auxiliary arm: its penalty against the credited episode's actions, plus the
    structural fact that every auxiliary episode has its own seed, distinct from the credited one."""
    episodes = [ep for b in batches for ep in b["episodes"]]
    if not episodes or not all(ep["auxiliary"] for ep in episodes):
        raise ValueError("auxiliary check: the auxiliary arm recorded no auxiliary episodes")

    def aux_penalty(ep: dict[str, Any]) -> float:
        return objective.auxiliary_penalty([terms_from_dict(a, max_payoff) for a in ep["auxiliary"]], lambdas)

    out = credited_statistics(episodes, max_payoff, lambdas, aux_penalty)
    out["aux_seeds_distinct"] = all(a["spec"]["seed"] != ep["spec"]["seed"] for ep in episodes
                                    for a in ep["auxiliary"])
    out["passed"] = out["aux_seeds_distinct"] and (out["max_abs_r"] is None
                                                   or out["max_abs_r"] <= out["bound_3_over_sqrt_n"])
    return out


def per_pool_contrast(batches: list[dict[str, Any]], max_payoff: float, lambdas: Lambdas) -> dict[str, Any]:
    """The same correlations for the per_pool arm, whose penalty is computed from the credited episode."""
    episodes = [ep for b in batches for ep in b["episodes"]]
    return credited_statistics(episodes, max_payoff, lambdas,
                               lambda ep: objective.penalty(terms_from_dict(ep, max_payoff), lambdas))


def exact_checks(cfg: StudyConfig, arms: Sequence[str]) -> dict[str, Any]:
    """Both checks, on the recorded rollouts of the study's arms."""
    import envs
    from sepo.objective import resolve_lambdas

    out: dict[str, Any] = {"shared_equals_reward_only": {}, "auxiliary_uncorrelated": None, "per_pool_contrast": None}
    worst = 0.0
    for arm in arms:
        args, _ = arm_configs(cfg, arm)
        game_name = args.games[0]
        game = envs.make_game(game_name, **args.game_params.get(game_name, {}))
        lambdas = resolve_lambdas(game, args.lambdas.get(game_name))
        true_lambdas = resolve_lambdas(game, cfg.train.get("lambdas", {}).get(game_name))  # before arm overrides
        batches = read_batches(Path(args.output_dir) / EPISODES_FILE)
        per_batch = [shared_equals_reward_only([terms_from_dict(ep, game.max_payoff) for ep in b["episodes"]],
                                               b["num_generations"], true_lambdas, args) for b in batches]
        arm_worst = max((max(r["max_abs_diff_vs_payoff_only"], r["max_abs_diff_vs_reward_only_training_groups"])
                         for r in per_batch), default=0.0)
        worst = max(worst, arm_worst)
        out["shared_equals_reward_only"][arm] = {
            "batches": len(per_batch), "max_abs_diff": arm_worst,
            "max_abs_reward_gap": max((r["max_abs_reward_gap"] for r in per_batch), default=0.0),
            "per_pool_vs_shared_max_abs_diff": max((r["per_pool_vs_shared_max_abs_diff"] for r in per_batch),
                                                   default=0.0),
            "per_pool_changed_cells": sum(r["per_pool_changed_cells"] for r in per_batch),
            "cells": sum(r["cells"] for r in per_batch),
        }
        if args.credit == "auxiliary":
            out["auxiliary_uncorrelated"] = {"arm": arm, **auxiliary_check(batches, game.max_payoff, lambdas)}
        elif args.credit == "per_pool" and any(dataclasses.astuple(lambdas)):
            out["per_pool_contrast"] = {"arm": arm, **per_pool_contrast(batches, game.max_payoff, lambdas)}
    out["shared_equals_reward_only_passed"] = worst <= TOLERANCE
    out["tolerance"] = TOLERANCE
    return out


