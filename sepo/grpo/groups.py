"""What a SEPO-GRPO run trains on, built once per run: its pools, its group dataset and the prompt codec.

A group is one (game, pool, opponent, seed, seat) row of the dataset; TRL repeats every row G times and hands
the rows' prompts to the rollout, which reads back what to play from them (`group_prompt` /
`parse_group_prompt`, canonical JSON). The pools are loaded once (`run_pools`: a `pool_dir`'s members are
validated and smoke-tested in the sandbox once), and the trainer, the per-checkpoint evaluation and the
held-out check all use that one load (`TrainingGroups`).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import dataclass
from typing import Any

from datasets import Dataset

from envs.sandbox import SandboxConfig
from sepo.grpo.adaptive import AdaptiveExploiter, with_adaptive
from sepo.grpo.config import SEPOConfig
from sepo.pools import POOL_NAMES, Pools, load_pool_dir, pools_with

GROUP_KEYS = ("game", "pool", "opponent", "seed", "seat")


@dataclass(frozen=True)
class RunPools:
    """The pools of every game of a run, built from one load of its `pool_dir`.

    training: what the rollouts play: split by role as `strict_pools` asks, plus the adaptive exploiter in
        the game's exploit pool when `adaptive_exploiter`.
    evaluation: what the per-checkpoint evaluation plays: `sepo eval`'s pools of the same members (separated
        by role, no adaptive exploiter).
    """

    training: dict[str, Pools]
    evaluation: dict[str, Pools]


def run_pools(args: SEPOConfig, exploiter: AdaptiveExploiter | None = None) -> RunPools:
    """The pools of every game of a run: defaults plus `pool_dir` members (played in the sandbox, with the
    run's rng key: call this after the key is set), `exploiter` (the run's adaptive exploiter) in the
    game's exploit pool when `adaptive_exploiter` (the parse-time check passes none)."""
    sandbox = SandboxConfig(unsafe=args.unsafe_sandbox)
    training, evaluation = {}, {}
    for game in args.games:
        extras = load_pool_dir(args.pool_dir, game, sandbox) if args.pool_dir is not None else []
        training[game] = pools_with(game, extras, strict=args.strict_pools)
        evaluation[game] = pools_with(game, extras)
    if args.adaptive_exploiter:
        game = args.games[0]  # one game with an oracle (SEPOConfig checks it)
        training[game] = with_adaptive(training[game], exploiter or AdaptiveExploiter(game))
    return RunPools(training=training, evaluation=evaluation)


def group_specs(args: SEPOConfig, pools: dict[str, Pools]) -> list[dict[str, Any]]:
    """One block of the pool mix: a (game, pool, opponent) row per group, as configured by `pool_mix`.

    A name in two pools (separation by role) forms one group per pool it is asked for in; each row
    carries its pool, which decides the episode's credit downstream."""
    rng = random.Random(args.seed)
    block = []
    for game in args.games:
        for pool in POOL_NAMES:
            choice = args.pool_mix.get(pool, 0)
            names = pools[game].names(pool)
            if choice == "all":
                chosen = list(names)
            elif isinstance(choice, list):
                chosen = list(choice)
                wrong = [n for n in chosen if n not in names]
                if wrong:
                    raise ValueError(f"pool_mix[{pool!r}] names {wrong}, which are not in the {pool!r} pool of "
                                     f"{game!r}; that pool holds: {', '.join(names)}")
            else:
                chosen = [rng.choice(names) for _ in range(int(choice))] if names else []
            block += [{"game": game, "pool": pool, "opponent": name} for name in chosen]
    if not block:
        raise ValueError(f"pool_mix {args.pool_mix} selects no opponent for games {args.games}")
    return block


def group_seed(seed: int, game: str, pool: str, opponent: str, block: int, index: int) -> int:
    """The seed of the `index`-th group against (game, pool, opponent) in block `block` of a run seeded `seed`.

    Keyed by what the group is, not by its position in the block, so arms whose pool mixes differ (reward_only's
    training groups only, per_pool's extra penalty groups) deal their k-th training group against an opponent
    the same cards, values and opponent stream at every step: paired deals."""
    digest = hashlib.sha256(f"{seed}:{game}:{pool}:{opponent}:{block}:{index}".encode()).digest()
    return int.from_bytes(digest[:6], "big")


def build_group_dataset(args: SEPOConfig, pools: dict[str, Pools]) -> Dataset:
    """Dataset of groups: each row names (game, pool, opponent, seed, seat); TRL repeats it G times.

    Rows come in blocks of the whole pool mix with fresh seeds (`group_seed`: paired across arms); with
    `shuffle_dataset=False` (the default) each generation batch of the same size as a block sees every
    configured opponent once.
    """
    block = group_specs(args, pools)
    if args.num_groups:
        n = args.num_groups
    else:
        per_step = max(1, args.generation_batch_size // args.num_generations // args.steps_per_generation)
        n = max(len(block), per_step * max(1, args.max_steps) * args.num_iterations)
    blocks = math.ceil(n / len(block)) + 1
    rows = []
    for b in range(blocks):
        seen: dict[tuple[str, str, str], int] = {}
        for row in block:
            key = (row["game"], row["pool"], row["opponent"])
            seen[key] = seen.get(key, -1) + 1
            group = {**row, "seed": group_seed(args.seed, *key, b, seen[key]), "seat": args.seat}
            rows.append({"prompt": group_prompt(group), **group})
    return Dataset.from_list(rows)


def group_prompt(group: dict[str, Any]) -> str:
    """The dataset's `prompt` for one group: its (game, pool, opponent, seed, seat) as canonical JSON.

    TRL hands exactly these strings to `rollout_func`, so the rollout reads what to play from its own
    arguments (and the completions table in wandb shows which group each rollout belongs to)."""
    return json.dumps({k: group[k] for k in GROUP_KEYS})


def parse_group_prompt(prompt: str) -> dict[str, Any]:
    """The group a dataset prompt names (the inverse of `group_prompt`)."""
    try:
        group = json.loads(prompt)
        return {k: group[k] for k in GROUP_KEYS}
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"a SEPO group prompt is JSON with keys {GROUP_KEYS}; got {prompt!r}") from exc


@dataclass(frozen=True)
class TrainingGroups:
    """A run's pools (one load), its adaptive exploiter (None unless `adaptive_exploiter`; its pool member
    plays the table it holds) and its group dataset: built once by `training_groups` and handed to the
    trainer and to the per-checkpoint evaluation."""

    pools: RunPools
    adaptive: AdaptiveExploiter | None
    dataset: Dataset


def training_groups(args: SEPOConfig) -> TrainingGroups:
    """Everything a run trains on, from its config (the pools are loaded here, once)."""
    adaptive = AdaptiveExploiter(args.games[0]) if args.adaptive_exploiter else None
    pools = run_pools(args, adaptive)
    return TrainingGroups(pools=pools, adaptive=adaptive, dataset=build_group_dataset(args, pools.training))
