"""SEPOConfig: TRL's GRPOConfig plus what SEPO-GRPO needs (games, pool mix, credit, normalisation, fallback).

Recipes are flat YAML files read by `sepo.config.recipes` (TRL's TrlParser conventions); dict-valued fields also accept
JSON or YAML flow on the command line (`--pool_weights '{"exploit": 0.5}'`), like GRPOConfig's own dict fields.
Every count, size and step number is checked here, before TRL derives batch sizes from them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import GRPOConfig

from envs import GAMES
from sepo.config.checks import (
    COUNT,
    NON_NEGATIVE,
    OPTIONAL_COUNT,
    TRAINER_RANGES,
    Range,
    check_names,
    check_output_dir,
    check_push_to_hub,
    check_ranges,
    check_report_to,
    first_games,
    require,
)
from sepo.config.checks import check_choice as _check_choice
from sepo.config.recipes import fall_back_to_fp32
from sepo.grpo.adaptive import check_adaptive
from sepo.grpo.advantages import PAPER_EPSILON, RETURN_MODES, SCALE_REWARDS
from sepo.objective import CREDIT_MODES, EXPLOIT_REWARDS, TRAINING_ONLY_CREDITS
from sepo.pools import POOL_NAMES
from sepo.rollout.choice import TURN_DECODES

ADVANTAGE_MODES = ("per_round", "episode")
# How the policy-gradient loss is normalised across groups (sepo.grpo.scoring.training_token_scale): "training_tokens" divides by
# the training groups' tokens, so the payoff gradient does not shrink as an arm adds penalty groups;
# "all_tokens" is TRL's dapo normaliser as it is (every token of the generation batch).
LOSS_SCALES = ("training_tokens", "all_tokens")
# What the policy's own tokens of a turn that did not parse are credited (sepo.grpo.scoring.sepo_advantages):
# "advantage" gives them their round's advantage, as every sampled token (the method); "non_positive" keeps only a
# negative one, so text that does not parse is never reinforced by an outcome the fallback's choice produced.
UNPARSED_CREDITS = ("advantage", "non_positive")
# SEPO's own counts and sizes, checked with TRL's before TRL derives batch sizes from them
SEPO_RANGES = {
    **TRAINER_RANGES,
    "seat": Range(0, 1, integer=True),
    "num_groups": OPTIONAL_COUNT,
    "max_turn_tokens": COUNT,
    "advantage_epsilon": Range(0, low_open=True, optional=True),  # None: the return mode's default
    "fallback_penalty": NON_NEGATIVE,
    "checkpoint_eval_episodes": COUNT,
    "adaptive_every": COUNT,
    "torch_threads": OPTIONAL_COUNT,
}


@dataclass
class SEPOConfig(GRPOConfig):
    """GRPOConfig with SEPO-GRPO's game, pool, credit, advantage and rollout settings.

    Defaults follow the method (docs/references.md#training-recipe): LoRA r16/alpha32 (in ModelConfig),
    lr 1e-5, beta 0.1, eps 0.2, 4 rollouts per opponent, temperature 0.8 / top-p 0.95, thinking off.
    """

    _VALID_DICT_FIELDS = GRPOConfig._VALID_DICT_FIELDS + ["game_params", "pool_mix", "lambdas", "pool_weights"]
    _DEPRECATED_KEYS = {"pools_dir": "pool_dir"}  # one name across sepo train / sepo eval / fmsp export

    # --- overridden GRPO defaults (the method's SEPO stage) ---------------------------------------------
    learning_rate: float = field(default=1e-5, metadata={"help": "AdamW learning rate (some recipes: 3e-6)."})
    lr_scheduler_type: str = field(default="constant", metadata={"help": "The method used a constant rate."})
    beta: float = field(default=0.1, metadata={"help": "KL coefficient against the adapter-disabled model."})
    num_generations: int | None = field(default=4, metadata={"help": "G: rollouts per (pool, opponent) group."})
    temperature: float = field(default=0.8, metadata={"help": "Sampling temperature of action turns."})
    top_p: float = field(default=0.95, metadata={"help": "Top-p of action turns."})
    max_completion_length: int | None = field(
        default=1024, metadata={"help": "Upper bound on the whole multi-turn completion (all rounds)."}
    )
    shuffle_dataset: bool | None = field(
        default=False, metadata={"help": "Keep group rows in recipe order so each step sees the whole pool mix."}
    )

    # --- games and pools --------------------------------------------------------------------------------
    games: list[str] = field(default_factory=lambda: first_games(1), metadata={"help": "Games mixed in the run."})
    game_params: dict[str, Any] | str | None = field(
        default=None, metadata={"help": "Per-game parameter overrides: {game: {param: value}}."}
    )
    pool_mix: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": "Groups per step by pool: {pool: 'all' | n | [opponent names]}; default every opponent of "
            "every pool once per step (credit per_pool), or of the training pool (the other credits)."
        },
    )
    strict_pools: bool = field(
        default=False,
        metadata={"help": "Keep every opponent in one pool (default: pools separated by role, as the method)."},
    )
    pool_dir: str | None = field(
        default=None, metadata={"help": "Directory of FMSP-exported pool members (manifest.json)."}
    )
    unsafe_sandbox: bool = field(
        default=False,
        metadata={"help": "Play pool_dir members even where a sandbox layer is missing."},
    )
    rng_key: str = field(
        default="",
        metadata={"help": "Secret key of sandboxed members' rngs; empty: made once (output_dir/rng_key.json)."},
    )
    seat: int = field(default=0, metadata={"help": "Seat of the LLM (0 or 1)."})
    num_groups: int | None = field(
        default=None, metadata={"help": "Dataset size in groups; default max_steps x groups per step."}
    )

    # --- objective ------------------------------------------------------------------------------------
    credit: str = field(
        default="per_pool",
        metadata={"help": f"Penalty credit mode: {', '.join(CREDIT_MODES)} (the four arms of the method's study)."},
    )
    lambdas: dict[str, Any] | str | None = field(
        default=None, metadata={"help": "lambda overrides {game: {e, c, x}}; default the game's own."}
    )
    pool_weights: dict[str, Any] | str | None = field(
        default=None, metadata={"help": "Per-pool advantage weights applied after normalisation (default 1)."}
    )
    # --- advantages -----------------------------------------------------------------------------------
    advantage_mode: str = field(
        default="per_round", metadata={"help": f"Normalisation: {', '.join(ADVANTAGE_MODES)} (episode = ablation)."}
    )
    return_mode: str = field(
        default="reward_to_go",
        metadata={"help": f"Per-round signal: {', '.join(RETURN_MODES)} (paper = the revised paper's round reward)."},
    )
    advantage_epsilon: float | None = field(
        default=None, metadata={"help": "Added to the group std; default TRL's 1e-4, or 1e-8 with return_mode paper."}
    )
    # --- rollouts -------------------------------------------------------------------------------------
    max_turn_tokens: int = field(default=64, metadata={"help": "Max new tokens per action turn."})
    enable_thinking: bool = field(default=False, metadata={"help": "Chat-template thinking for action turns."})
    fallback: bool = field(default=True, metadata={"help": "Constrained fallback decode on parse failure."})
    fallback_penalty: float = field(
        default=0.0, metadata={"help": "Subtracted from the round reward when the fallback decided the action."}
    )
    mask_forced_tokens: bool = field(
        default=True, metadata={"help": "Remove fallback-forced tokens from the loss (they always get 0 advantage)."}
    )
    turn_decode: str = field(
        default="free",
        metadata={"help": f"How a turn is decoded: {', '.join(TURN_DECODES)} (free: the method's text, parsed, the "
                          "fallback where it does not parse; choice: drawn among the legal actions' canonical "
                          "answers by their scored probabilities, so the played policy is the scored one: "
                          "sepo.rollout.choice, for compact answer-only prompts)."},
    )
    unparsed_credit: str = field(
        default="advantage",
        metadata={"help": f"Credit of the model's own tokens in a turn that did not parse: {', '.join(UNPARSED_CREDITS)} "
                          "(non_positive: a positive advantage becomes 0 there)."},
    )

    # --- checkpoints ----------------------------------------------------------------------------------
    keep_best_by_safety: bool = field(
        default=True,
        metadata={"help": "Evaluate every saved checkpoint against the pools (checkpoints.json) and copy the one "
                          "with the best evaluated safety score J to output_dir/best."},
    )
    checkpoint_eval_episodes: int = field(
        default=16, metadata={"help": "Episodes per (pool, opponent) when a saved checkpoint is evaluated."}
    )

    # --- the machine ----------------------------------------------------------------------------------
    torch_threads: int | None = field(
        default=None, metadata={"help": "torch intra-op threads per process (unset: torch's default); 1 on a "
                                        "shared small machine, where OpenMP spin-waiting slows every thread"})

    share_prompt_prefix: bool = field(
        default=False, metadata={"help": "Loss forward: run each distinct prompt once for the rollouts that share it "
                                         "(the G of a group), reusing its key/value cache; the log-probabilities and "
                                         "gradients are TRL's single pass's up to round-off (sepo.grpo.shared_prefix). "
                                         "Off by default: a run resumed after a kill then differs from an "
                                         "uninterrupted one by round-off (1e-7), where the single pass is bit-exact"})

    # --- exploitability: penalty forms, adaptive exploiter, loss normalisation across groups -------------
    exploit_reward: str = field(
        default="clipped",
        metadata={"help": "Exploit-pool term: clipped (the method's s*max(0, o-a) per episode) or signed (s*(o-a))."},
    )
    adaptive_exploiter: bool = field(
        default=False,
        metadata={"help": "A game with an exact analysis (its registration's `exact`): add best_response_to_current "
                          "(the exact best response to the policy) to the exploit pool."},
    )
    adaptive_every: int = field(
        default=1, metadata={"help": "Steps between refreshes of the adaptive exploiter's table."}
    )
    loss_scale: str = field(
        default="training_tokens",
        metadata={"help": f"Loss normaliser: {', '.join(LOSS_SCALES)} (training_tokens: the payoff gradient does not "
                          "shrink as penalty groups are added; needs loss_type dapo)."},
    )

    def __post_init__(self) -> None:
        check_ranges(self, SEPO_RANGES)
        check_report_to(self.report_to)
        check_push_to_hub(self.push_to_hub)
        fall_back_to_fp32(self)
        super().__post_init__()
        check_scale_out(self)
        self.games = check_names("game", self.games, GAMES)
        _check_choice("credit mode", self.credit, CREDIT_MODES)
        _check_choice("advantage_mode", self.advantage_mode, ADVANTAGE_MODES)
        _check_choice("return_mode", self.return_mode, RETURN_MODES)
        _check_choice("exploit_reward", self.exploit_reward, EXPLOIT_REWARDS)
        _check_choice("loss_scale", self.loss_scale, LOSS_SCALES)
        _check_choice("unparsed_credit", self.unparsed_credit, UNPARSED_CREDITS)
        _check_choice("turn_decode", self.turn_decode, TURN_DECODES)
        _check_choice("scale_rewards", self.scale_rewards, SCALE_REWARDS)
        if self.turn_decode == "choice" and (self.top_p < 1.0 or (self.top_k or 0) > 0):
            raise ValueError(f"turn_decode choice draws from the answers' whole probabilities (tempered by temperature); "
                             f"top_p {self.top_p} and top_k {self.top_k} do not apply: set top_p 1.0 and top_k 0")
        if self.loss_scale == "training_tokens" and self.loss_type != "dapo":
            raise ValueError(f"loss_scale training_tokens rescales TRL's dapo loss; loss_type is {self.loss_type!r}: "
                             "use loss_type dapo, or loss_scale all_tokens")
        self.game_params = dict(self.game_params or {})
        if self.adaptive_exploiter:
            check_adaptive(self.games, self.game_params)
        self.lambdas = dict(self.lambdas or {})
        if self.advantage_epsilon is None:
            self.advantage_epsilon = PAPER_EPSILON if self.return_mode == "paper" else 1e-4
        group_pools = ("training",) if self.credit in TRAINING_ONLY_CREDITS else POOL_NAMES
        self.pool_mix = dict(self.pool_mix or dict.fromkeys(group_pools, "all"))
        for pool, weight in (self.pool_weights or {}).items():
            NON_NEGATIVE.check(f"pool_weights[{pool!r}]", weight)
        self.pool_weights = {pool: float(w) for pool, w in (self.pool_weights or {}).items()}
        for mapping, what in ((self.game_params, "game_params"), (self.lambdas, "lambdas")):
            for game in mapping:
                if game not in self.games:
                    raise ValueError(f"{what} names game {game!r}, which is not in games {self.games}")
        for mapping, what in ((self.pool_mix, "pool_mix"), (self.pool_weights, "pool_weights")):
            for pool in mapping:
                _check_choice(f"pool in {what}", pool, POOL_NAMES)
        for pool, choice in self.pool_mix.items():
            require(choice == "all" or NON_NEGATIVE.admits(choice) and float(choice).is_integer()
                    or isinstance(choice, list) and all(isinstance(n, str) for n in choice),
                    f"pool_mix[{pool!r}]", choice, "'all', a number of groups >= 0, or a list of opponent names")
        probes = [pool for pool, choice in self.pool_mix.items() if pool != "training" and choice not in (0, [])]
        if self.credit in TRAINING_ONLY_CREDITS and probes:
            raise ValueError(
                f"pool_mix asks for {' and '.join(probes)} groups, but credit={self.credit!r} trains on "
                "training-pool groups only: under reward_only, shared and auxiliary credit the exploit and "
                "collusive pools are probes (shared and auxiliary play them per rollout and subtract their "
                "penalty), never groups of their own. Remove them from pool_mix, or use credit: per_pool"
            )
        check_output_dir("output_dir", self.output_dir)


def sharded_parameters(args: Any) -> str | None:
    """The name of the parameter sharding a run is launched with ("FSDP", "DeepSpeed ZeRO-3"), or None: read from
    the config (`fsdp`, `deepspeed`) and from what `accelerate launch` sets in the environment."""
    if args.fsdp or os.environ.get("ACCELERATE_USE_FSDP", "").lower() in ("true", "1"):
        return "FSDP"
    stage = os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE")
    if args.deepspeed:
        config = args.deepspeed if isinstance(args.deepspeed, dict) else json.loads(Path(args.deepspeed).read_text())
        stage = str(config.get("zero_optimization", {}).get("stage", stage))
    return "DeepSpeed ZeRO-3" if stage == "3" else None


def check_scale_out(args: Any) -> None:
    """Refuse, when the config is read, the combinations that would fail only on the cluster, after the queue:
    the per-checkpoint evaluation (it plays the live model on rank 0 alone) with sharded parameters, and the
    adaptive exploiter (its refresh scores the policy's choices in-process) with TRL's vLLM server mode."""
    sharding = sharded_parameters(args)
    saves = getattr(args.save_strategy, "value", args.save_strategy) != "no"
    if sharding and args.keep_best_by_safety and saves:
        raise ValueError(f"keep_best_by_safety evaluates every saved checkpoint on rank 0 with the live model, whose "
                         f"parameters {sharding} shards across ranks: set keep_best_by_safety: false and evaluate the "
                         "checkpoints afterwards with `sepo eval --checkpoints <output_dir>`")
    if args.adaptive_exploiter and args.use_vllm and args.vllm_mode == "server":
        raise ValueError("adaptive_exploiter refreshes the exact best response by scoring the policy's choices, which "
                         "TRL's vLLM server mode cannot do: use vllm_mode: colocate, or use_vllm: false")
