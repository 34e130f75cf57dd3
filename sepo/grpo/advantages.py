"""SEPO-GRPO advantages as pure torch functions (no trainer state), so the math can be tested by hand.

Shapes: N episodes in the global generation batch, ordered so that consecutive blocks of G rows are one
group (TRL's RepeatSampler order); K rounds (NaN where a round did not happen); T completion tokens.
"""

from __future__ import annotations

import torch

from sepo.grpo.trl_seam import nanstd

RETURN_MODES = ("reward_to_go", "per_round", "paper")
SCALE_REWARDS = ("group", "batch", "none")  # TRL's GRPOConfig.scale_rewards, honoured by the per-round advantages
PAPER_EPSILON = 1e-8  # the revised paper's delta in A = (rew - mean) / (sigma + delta)


def round_returns(round_rewards: torch.Tensor, return_mode: str = "reward_to_go") -> torch.Tensor:
    """The per-round signal to normalise: the reward-to-go sum_{t' >= t} r_t', or (per_round, paper) the
    round reward itself.

    Rounds that did not happen stay NaN (and contribute nothing to the returns of earlier rounds).
    """
    if return_mode in ("per_round", "paper"):
        return round_rewards.clone()
    if return_mode != "reward_to_go":
        raise ValueError(f"unknown return_mode {return_mode!r}; choose one of: {', '.join(RETURN_MODES)}")
    filled = torch.nan_to_num(round_rewards, nan=0.0)
    to_go = filled.flip(-1).cumsum(-1).flip(-1)
    return torch.where(torch.isnan(round_rewards), torch.nan, to_go)


SPREAD_RTOL = 1e-9  # a (group, round) whose rewards differ by at most this fraction of their size is a tie


def group_normalize(
    values: torch.Tensor, num_generations: int, eps: float = 1e-4, paper: bool = False, scale: str = "group"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Standardise `values` (N, ...) across the G members of each group, separately for every trailing index.

    NaN entries (rounds that did not happen) are excluded from mean and std and get advantage 0; a
    (group, round) seen by a single episode has no baseline and also gets 0. Computed in float64 and robust
    to ties: a cell whose rewards span at most `SPREAD_RTOL` of their largest magnitude has zero spread and
    every member gets advantage exactly 0 (in float32 the mean of equal rewards can be an ulp off, and
    dividing that ulp by a std of the same size gave every member of a tied group an advantage of about ±1
    of one sign). Elsewhere the formula is TRL's: nan-aware unbiased std and `(x - mean) / (std + eps)`, so
    groups with real spread equal TRL's own advantages (to float32 rounding); what differs is only the
    tied groups, which TRL gives (x - mean) / eps. `paper`: the method's code (train/grpo.py), the
    population std (numpy's default), and also advantage 0 wherever std < eps.

    `scale` is TRL's `scale_rewards`: "group" divides by the group's std (above); "batch" by the std of every
    existing value in the batch at that trailing index (TRL's batch scaling, per round); "none" does not divide
    (Dr. GRPO, arXiv:2503.20783: dividing by the group's std weights each group, here each deal, by 1/std,
    which biases the gradient away from the expected reward's). Ties give 0 in every mode. Returns (advantages
    with the shape and dtype of `values`, zero_std: bool per (group, ...) among cells that exist).
    """
    if values.size(0) % num_generations:
        raise ValueError(f"batch of {values.size(0)} rows is not a whole number of groups of {num_generations}")
    if scale not in SCALE_REWARDS:
        raise ValueError(f"unknown scale_rewards {scale!r}; choose one of: {', '.join(SCALE_REWARDS)}")
    grouped = values.to(torch.float64).reshape(-1, num_generations, *values.shape[1:])
    absent = torch.isnan(grouped)
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    if paper:
        std = torch.nanmean((grouped - mean) ** 2, dim=1, keepdim=True).sqrt()
    else:
        std = nanstd(grouped, dim=1, keepdim=True)
    high = grouped.masked_fill(absent, -torch.inf).amax(dim=1)
    low = grouped.masked_fill(absent, torch.inf).amin(dim=1)
    tied = (high - low) <= SPREAD_RTOL * torch.maximum(high.abs(), low.abs())  # also: one member, or none
    if paper:
        tied |= torch.nan_to_num(std.squeeze(1), nan=0.0) < eps
    if scale == "none":
        adv = grouped - mean
    else:
        if scale == "batch":
            std = nanstd(grouped.flatten(0, 1), dim=0, keepdim=True).unsqueeze(0)
        adv = (grouped - mean) / (std + eps)
    adv = adv.masked_fill(tied.unsqueeze(1), 0.0)
    adv = torch.nan_to_num(adv, nan=0.0).reshape(values.shape).to(values.dtype)
    exists = (~absent).any(dim=1)
    return adv, tied & exists


def sepo_round_advantages(
    round_rewards: torch.Tensor,
    num_generations: int,
    *,
    advantage_mode: str = "per_round",
    return_mode: str = "reward_to_go",
    pool_weights: torch.Tensor | None = None,
    eps: float = 1e-4,
    scale: str = "group",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-round advantages (N, K) from per-round rewards (N, K, NaN = round absent).

    per_round: normalise round t across the group for every t separately (the reward-to-go, or with
    per_round / paper the round reward; paper also normalises as the method's code, see
    `group_normalize`). episode: normalise the episode reward (mean round reward) and give every round
    that happened that value (the ablation). `scale`: TRL's scale_rewards (see `group_normalize`).
    `pool_weights` (N,) multiplies each episode's advantages after normalisation. Returns (advantages, zero_std per (group, round) or per group).
    """
    absent = torch.isnan(round_rewards)
    paper = return_mode == "paper"
    if advantage_mode == "per_round":
        adv, zero_std = group_normalize(round_returns(round_rewards, return_mode), num_generations, eps, paper, scale)
    elif advantage_mode == "episode":
        episode_return = torch.nanmean(round_rewards, dim=1)  # the objective's episode reward
        ep_adv, zero_std = group_normalize(episode_return, num_generations, eps, paper, scale)
        adv = ep_adv.unsqueeze(1).expand_as(round_rewards).clone()
    else:
        raise ValueError(f"unknown advantage_mode {advantage_mode!r}; choose one of: per_round, episode")
    adv = adv.masked_fill(absent, 0.0)
    if pool_weights is not None:
        adv = adv * pool_weights.to(adv).unsqueeze(1)
    return adv, zero_std


def token_advantages(round_advantages: torch.Tensor, round_ids: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Expand per-round advantages (n, K) to tokens (n, T) via per-token round ids (n, T, -1 = none).

    `keep` (n, T) is 1 on tokens that may carry an advantage (model-sampled, not env, not forced,
    not padding); every other token gets exactly 0.
    """
    index = round_ids.clamp(min=0).long()
    per_token = torch.gather(round_advantages, 1, index)
    return per_token * (keep.bool() & (round_ids >= 0)).to(per_token.dtype)
