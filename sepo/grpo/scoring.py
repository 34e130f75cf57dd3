"""The per-token SEPO advantages of one generation batch, from the rollouts' credited per-round rewards: the
step's one scoring call is `score_batch`.

Inputs are TRL's scored batch: `inputs` (this rank's rows with the rollout's extra columns, `round_rewards`
and `probe_penalty` among them: computed once, in the rollout) and TRL's output tensors (`completion_mask`,
optionally `tool_mask`). Cross-rank reductions go through `gather` (accelerate's), so the same code serves one
process and many. Every function returns its metrics instead of writing them anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from sepo.grpo.advantages import sepo_round_advantages, token_advantages
from sepo.grpo.config import SEPOConfig
from sepo.objective import PROBE_CREDITS

Gather = Callable[[torch.Tensor], torch.Tensor]  # this rank's rows -> every rank's rows, in rank order


@dataclass(frozen=True)
class Batch:
    """Where a generation batch sits: the group size G, this rank's index, the rounds K of the longest game,
    the device, and the cross-rank gather."""

    num_generations: int
    process_index: int
    max_rounds: int
    device: torch.device
    gather: Gather


@dataclass(frozen=True)
class Scored:
    """A scored batch's SEPO result: this rank's (B, T) per-token advantages, the global (N, K) per-round rewards
    they were normalised from, and the metrics of both."""

    advantages: torch.Tensor
    rewards: torch.Tensor
    metrics: dict[str, float]


def score_batch(args: SEPOConfig, inputs: list[dict[str, Any]], output: dict[str, Any], batch: Batch) -> Scored:
    """The step's scoring: the global per-round rewards (`round_reward_matrix`), then this rank's per-token
    advantages from them (`sepo_advantages`)."""
    rewards, reward_metrics = round_reward_matrix(args, inputs, batch)
    advantages, metrics = sepo_advantages(args, inputs, output, rewards, batch)
    return Scored(advantages=advantages, rewards=rewards, metrics={**reward_metrics, **metrics})


def round_reward_matrix(args: SEPOConfig, inputs: list[dict[str, Any]], batch: Batch
                        ) -> tuple[torch.Tensor, dict[str, float]]:
    """Global (N, K) per-round rewards (NaN = round absent); with credit shared, minus the group mean of
    the rollouts' probe penalties (one constant per group). Returns (rewards, metrics)."""
    n, device = len(inputs), batch.device
    local = torch.full((n, batch.max_rounds), torch.nan, device=device)
    probe_penalty = torch.zeros(n, device=device)
    for i, x in enumerate(inputs):
        rewards = x["round_rewards"]
        probe_penalty[i] = x["probe_penalty"]
        local[i, : len(rewards)] = torch.tensor(rewards, dtype=torch.float32, device=device)
    rewards = batch.gather(local).to(torch.float64)  # every credit in float64 (exact for these float32 values)
    metrics: dict[str, float] = {}
    if args.credit in PROBE_CREDITS:
        penalties = batch.gather(probe_penalty)
        metrics["sepo/probe_penalty"] = penalties.mean().item()
        if args.credit == "shared":
            # the group constant, rounded to float32, subtracted in float64: the difference of two float32 values
            # is exact in float64, so the group's centred rewards are reward_only's exactly (bit for bit when G is
            # a power of two, whose mean divides exactly)
            G = batch.num_generations
            constant = penalties.view(-1, G).mean(dim=1).to(torch.float32).to(torch.float64)
            rewards = rewards - constant.repeat_interleave(G).unsqueeze(1)
    return rewards, metrics


def loss_mask(output: dict[str, Any]) -> torch.Tensor:
    """The tokens TRL's loss counts: the completion mask, times the tool/env mask when there is one."""
    return output["completion_mask"] * output["tool_mask"] if "tool_mask" in output else output["completion_mask"]


def training_token_scale(inputs: list[dict[str, Any]], output: dict[str, Any], gather: Gather) -> float:
    """N_all / N_train: TRL's dapo loss divides by every loss token of the generation batch (N_all); scaling
    every advantage by this factor makes its denominator the training groups' loss tokens (N_train), so
    the payoff gradient is the same whether or not an arm adds penalty groups (they add their own terms on
    top, at the weight `pool_weights` gives them). With no training group (e.g. exploitability descent)
    the factor is 1. Exact for the policy-gradient term; the KL term (beta > 0) keeps TRL's normaliser."""
    tokens = loss_mask(output).sum(dim=1).to(torch.float64)
    training = torch.tensor([x["pool"] == "training" for x in inputs], dtype=torch.float64, device=tokens.device)
    counts = gather(torch.stack([tokens.sum(), (tokens * training).sum()]).unsqueeze(0)).sum(dim=0)
    return float(counts[0] / counts[1]) if counts[1] > 0 else 1.0


def token_column(inputs: list[dict[str, Any]], key: str, width: int, fill: int, dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
    """(B, width) tensor of the per-token rollout column `key`, each row cut to `width` and padded with `fill`."""
    out = torch.full((len(inputs), width), fill, dtype=dtype, device=device)
    for i, x in enumerate(inputs):
        values = torch.tensor(x[key][:width], dtype=dtype, device=device)
        out[i, : len(values)] = values
    return out


def sepo_advantages(args: SEPOConfig, inputs: list[dict[str, Any]], output: dict[str, Any], rewards: torch.Tensor,
                    batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
    """This rank's (B, T) per-token advantages: per-round group normalisation of the global round rewards
    `rewards` (`round_reward_matrix`), spread over each round's kept tokens (not forced, in the loss mask),
    none positive on a turn that did not parse if `unparsed_credit` is non_positive, scaled as `loss_scale`
    asks. Returns (advantages, metrics)."""
    device = batch.device
    metrics: dict[str, float] = {}
    weights = batch.gather(torch.tensor([float(args.pool_weights.get(x["pool"], 1.0)) for x in inputs], device=device))
    adv, zero_std = sepo_round_advantages(  # in float64 (exact for float32 rewards: see round_reward_matrix)
        rewards.to(torch.float64), batch.num_generations, advantage_mode=args.advantage_mode, return_mode=args.return_mode,
        pool_weights=weights if args.pool_weights else None, eps=args.advantage_epsilon,
        scale=args.scale_rewards,
    )
    n, p = len(inputs), batch.process_index
    local = adv[p * n : (p + 1) * n]
    T = output["completion_ids"].size(1)
    round_ids = token_column(inputs, "round_ids", T, -1, torch.long, device)
    forced = token_column(inputs, "forced_mask", T, 0, torch.long, device)
    unparsed = token_column(inputs, "unparsed_mask", T, 0, torch.bool, device)
    keep = loss_mask(output) * (1 - forced)
    token_adv = token_advantages(local, round_ids, keep)
    if args.unparsed_credit == "non_positive":
        token_adv = token_adv.masked_fill(unparsed & (token_adv > 0), 0.0)
    if args.loss_scale == "training_tokens":
        scale = training_token_scale(inputs, output, batch.gather)
        metrics["sepo/loss_scale"] = scale
        token_adv = token_adv * scale
    return token_adv.to(torch.float32), {**metrics, **advantage_metrics(rewards, adv, zero_std)}


def advantage_metrics(rewards: torch.Tensor, adv: torch.Tensor, zero_std: torch.Tensor) -> dict[str, float]:
    """Round-reward and advantage statistics of a batch; `sepo/no_learning_signal` is 1 when every (group,
    round) that happened has zero reward spread, so every advantage is 0."""
    m: dict[str, float] = {}
    exists = ~torch.isnan(rewards)
    m["sepo/frac_round_zero_std"] = zero_std.float().mean().item()
    cells = exists.view(zero_std.size(0), -1, rewards.size(1)).any(dim=1)
    m["sepo/no_learning_signal"] = float(bool((zero_std == (cells if zero_std.dim() == 2 else cells.any(dim=1))).all()))
    m["sepo/round_reward_mean"] = torch.nanmean(rewards).item()
    for t in range(adv.size(1)):
        if exists[:, t].any():
            col = adv[exists[:, t], t]
            m[f"sepo/adv/round_{t}/abs_mean"] = col.abs().mean().item()
            m[f"sepo/adv/round_{t}/std"] = col.std(unbiased=False).item()
    m["sepo/adv/abs_mean"] = adv[exists].abs().mean().item() if exists.any() else 0.0
    return m
