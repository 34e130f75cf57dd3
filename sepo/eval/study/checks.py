"""The study's two exact checks, computed on its own recorded rollouts.

(1) On identical batches the shared arm's advantages equal the reward-only arm's to TOLERANCE while its
rewards differ: every recorded batch of an arm that played probe episodes (shared, auxiliary; both play the
same probes) is credited both ways, u minus the group's shared probe penalty and u alone, and normalised as
that arm's trainer normalises (its advantage_mode, return_mode and epsilon).
(2) The auxiliary penalty's probe part is uncorrelated with the credited episode's actions and own score
(|r| within 3/sqrt(n)), contrasted with the per-pool penalty, which is a function of them. The part of the
auxiliary penalty that the method's code took from the credited episode itself (its externality, pooled
into x) is excluded: it is credited, not auxiliary.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from envs.base import Lambdas
from sepo import objective
from sepo.eval.study.config import EPISODES_FILE, StudyConfig, arm_configs, arm_dir
from sepo.eval.study.record import read_batches, terms_from_dict
from sepo.objective import PROBE_CREDITS, EpisodeTerms

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
                                       eps=args.advantage_epsilon, scale=args.scale_rewards)
    finally:
        torch.set_default_dtype(previous)
    return adv


def shared_equals_reward_only(terms: list[EpisodeTerms], probes: list[list[EpisodeTerms]], G: int,
                              lambdas: Lambdas, args: Any) -> dict[str, Any]:
    """Check 1 on one batch of training-pool groups (G consecutive episodes per group, `probes[i]` the probe
    episodes of episode i): the shared arm's rewards (u minus the group's `objective.group_penalty`) and
    the reward-only arm's (u) give the same advantages, while the rewards differ by the penalty."""
    shared, reward_only, per_pool = [], [], []
    paper = args.return_mode == "paper"
    for start in range(0, len(terms), G):
        group, group_probes = terms[start : start + G], probes[start : start + G]
        p_bar = objective.group_penalty(group, group_probes, lambdas)
        for t in group:
            shared.append(objective.round_rewards(t, lambdas, "shared", shared_penalty=p_bar))
            reward_only.append(objective.round_rewards(t, lambdas, "reward_only"))
            per_pool.append(objective.round_rewards(t, lambdas, "per_pool", paper=paper))
    a_shared, a_reward_only, a_per_pool = (_advantages(r, G, args) for r in (shared, reward_only, per_pool))
    credit_gap = (a_per_pool - a_shared).abs()
    credit_gap = credit_gap[~credit_gap.isnan()]
    return {
        # how much the method's per-pool credit changes the signal on the same episodes (a diagnostic)
        "per_pool_vs_shared_max_abs_diff": float(credit_gap.max()) if credit_gap.numel() else 0.0,
        "per_pool_changed_cells": int((credit_gap > TOLERANCE).sum()),
        "cells": int(credit_gap.numel()),
        "episodes": len(terms),
        "max_abs_diff": float((a_shared - a_reward_only).abs().max()),
        # the rewards differ (by the shared penalty); the advantages do not
        "max_abs_reward_gap": max(abs(x - y) for a, b in zip(shared, reward_only) for x, y in zip(a, b)),
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


def _probe_terms(ep: dict[str, Any], max_payoff: float) -> list[EpisodeTerms]:
    return [terms_from_dict(p, max_payoff) for p in ep["probes"]]


def auxiliary_check(batches: list[dict[str, Any]], max_payoff: float, lambdas: Lambdas) -> dict[str, Any]:
    """Check 2 on the auxiliary arm: the probe part of its penalty (`objective.probe_penalty_parts`) against
    the credited episode's actions, plus the structural fact that every probe episode has its own seed,
    distinct from the credited one."""
    episodes = [ep for b in batches for ep in b["episodes"]]
    if not episodes or not all(ep["probes"] for ep in episodes):
        raise ValueError("auxiliary check: the auxiliary arm recorded no probe episodes")

    def probe_part(ep: dict[str, Any]) -> float:
        credited = terms_from_dict(ep, max_payoff)
        return objective.probe_penalty_parts(credited, _probe_terms(ep, max_payoff), lambdas)[0]

    out = credited_statistics(episodes, max_payoff, lambdas, probe_part)
    out["aux_seeds_distinct"] = all(p["spec"]["seed"] != ep["spec"]["seed"] for ep in episodes for p in ep["probes"])
    out["passed"] = out["aux_seeds_distinct"] and (out["max_abs_r"] is None
                                                   or out["max_abs_r"] <= out["bound_3_over_sqrt_n"])
    return out


def per_pool_contrast(batches: list[dict[str, Any]], max_payoff: float, lambdas: Lambdas) -> dict[str, Any]:
    """The same correlations for the per_pool arm, whose penalty is computed from the credited episode."""
    episodes = [ep for b in batches for ep in b["episodes"]]
    return credited_statistics(episodes, max_payoff, lambdas,
                               lambda ep: objective.penalty(terms_from_dict(ep, max_payoff), lambdas))


def exact_checks(cfg: StudyConfig, arms: Sequence[str]) -> dict[str, Any]:
    """Both checks, on the recorded rollouts of the study's arms, each arm's training seeds pooled (check 1
    on every arm that played probes)."""
    import envs
    from sepo.objective import resolve_lambdas

    out: dict[str, Any] = {"shared_equals_reward_only": {}, "auxiliary_uncorrelated": None, "per_pool_contrast": None}
    worst = 0.0
    for arm in arms:
        args, _ = arm_configs(cfg, arm, cfg.seeds[0])  # the seeds differ in nothing the checks read
        game_name = args.games[0]
        game = envs.make_game(game_name, **args.game_params.get(game_name, {}))
        lambdas = resolve_lambdas(game, args.lambdas.get(game_name))
        batches = [b for seed in cfg.seeds for b in read_batches(arm_dir(cfg, arm, seed) / EPISODES_FILE)]
        if args.credit in PROBE_CREDITS:
            per_batch = [shared_equals_reward_only([terms_from_dict(ep, game.max_payoff) for ep in b["episodes"]],
                                                   [_probe_terms(ep, game.max_payoff) for ep in b["episodes"]],
                                                   b["num_generations"], lambdas, args) for b in batches]
            arm_worst = max((r["max_abs_diff"] for r in per_batch), default=0.0)
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
