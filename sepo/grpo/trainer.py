"""SEPOTrainer: TRL's GRPOTrainer with multi-round game rollouts and per-round SEPO advantages.

TRL keeps the loss, optimiser, reference model, vLLM weight sync, accelerate/DeepSpeed/FSDP and logging.
The class only wires SEPO's pieces into TRL: a `rollout_func` that plays every episode of the rank's batch in
lock-step rounds (`sepo.grpo.rollouts`, which also credits each rollout's per-round rewards once), the SEPO
reward function (`sepo.grpo.rewards`, the mean of those rewards), and after TRL has scored the batch a (B, T)
per-token advantage tensor from per-round group normalisation (`sepo.grpo.scoring`) in place of TRL's own.
What it trains on comes built from `sepo.grpo.groups`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from accelerate.utils import gather
from transformers import TrainerCallback

from envs import make_game
from sepo.backends import trainer_backend, trainer_engine
from sepo.checks import PUSH_REFUSED
from sepo.generation import GenerationBackend
from sepo.grpo.callbacks import CheckpointEvalCallback, eval_config
from sepo.grpo.config import SEPOConfig
from sepo.grpo.groups import TrainingGroups, parse_group_prompt, training_groups
from sepo.grpo.rewards import SEPOReward
from sepo.grpo.rollouts import (
    Played,
    RolloutContext,
    TimedBackend,
    episode_spec,
    exported_factories,
    play,
    probe_specs,
    rollout_columns,
    rollout_sampling,
)
from sepo.grpo.scoring import Batch, round_reward_matrix, sepo_advantages
from sepo.grpo.trl_seam import SeamTrainer, check_supported, ensure_weight_sync
from sepo.objective import resolve_lambdas
from sepo.rollout.chat import ChatRenderer
from sepo.rollout.engine import EpisodeSpec

logger = logging.getLogger(__name__)

RolloutHook = Callable[["SEPOTrainer", Played], None]
"""Called after every rollout batch with the trainer and `play`'s results: (record, trajectory, probe
records) per rollout, in the batch's order (e.g. the study records them)."""


class SEPOTrainer(SeamTrainer):
    """GRPOTrainer for SEPO-GRPO: game rollouts, SEPO rewards credited by pool, per-round advantages.

    `groups` are the run's pools, adaptive exploiter and group dataset (`sepo.grpo.groups.training_groups`,
    built from `args` when not given); the reward is the SEPO reward. Everything else is GRPOTrainer's.
    """

    def __init__(self, model: Any, args: SEPOConfig, groups: TrainingGroups | None = None,
                 processing_class: Any = None, peft_config: Any = None,
                 callbacks: Sequence[TrainerCallback] | None = None,
                 rollout_hooks: Sequence[RolloutHook] = ()) -> None:
        if not isinstance(args, SEPOConfig):
            raise TypeError(f"SEPOTrainer needs a SEPOConfig, got {type(args).__name__}")
        groups = groups if groups is not None else training_groups(args)
        games = {g: make_game(g, **args.game_params.get(g, {})) for g in args.games}
        self.lambdas = {g: resolve_lambdas(games[g], args.lambdas.get(g)) for g in args.games}  # training λ
        self.adaptive = groups.adaptive
        self.max_rounds = max(game.num_rounds for game in games.values())
        self.sepo_reward = SEPOReward(games, self.lambdas, args.credit, args.fallback_penalty,
                                      paper=args.return_mode == "paper", exploit_reward=args.exploit_reward)
        callbacks = list(callbacks or [])
        if args.keep_best_by_safety:
            callbacks.append(CheckpointEvalCallback(eval_config(args), groups.pools.evaluation))
        self.rollout_hooks = list(rollout_hooks)
        super().__init__(model=model, reward_funcs=[self.sepo_reward], args=args,
                         train_dataset=groups.dataset, processing_class=processing_class,
                         peft_config=peft_config, callbacks=callbacks)
        self.renderer = ChatRenderer(self.text_tokenizer(), enable_thinking=args.enable_thinking)
        if args.use_vllm:
            check_supported(self.vllm_engine())
            ensure_weight_sync(self.vllm_engine())
        self.rollout_context = RolloutContext(
            args=args, pools=groups.pools.training, renderer=self.renderer, sampling=rollout_sampling(args),
            process_index=self.accelerator.process_index, num_processes=self.accelerator.num_processes,
            factories=exported_factories(groups.pools.training))

    def push_to_hub(self, *args: Any, **kwargs: Any) -> Any:
        """Refused: transformers' push uploads output_dir as it is (the run's secret rng key, optimizer states,
        evaluation episodes); `sepo export --push_to_hub` uploads the exported model and its card only."""
        raise RuntimeError(PUSH_REFUSED)

    # --- rollouts -----------------------------------------------------------------------------------
    @contextmanager
    def generation_backend(self):
        """The rollout engine for this step, by name (`sepo.backends.trainer_engine`): TRL's vLLM engine
        (colocate or server) when use_vllm, else HF generate over the live policy (it switches eval/no_grad per
        call)."""
        kind = trainer_engine(self.use_vllm)
        with self.engine_parts(kind) as engine:
            yield trainer_backend(kind, self.text_tokenizer(), self.renderer.end_of_turn_id, **engine)

    def _spec(self, game: str, pool: str, opponent: str, seed: int, seat: int) -> EpisodeSpec:
        """The episode one rollout plays (`sepo.grpo.rollouts.episode_spec`); with `probe_specs` and `play`, the
        methods a rollout test double overrides or reuses."""
        return episode_spec(self.args, game, pool, opponent, seed, seat)

    def probe_specs(self, row: dict[str, Any], index: int) -> list[EpisodeSpec]:
        """The probe episodes of one training rollout (`sepo.grpo.rollouts.probe_specs`)."""
        return probe_specs(self.args, self.rollout_context.pools, row, index)

    def play(self, rows: list[dict[str, Any]], backend: GenerationBackend) -> Played:
        """This rank's rollout batch played with `backend` (`sepo.grpo.rollouts.play`)."""
        return play(self.rollout_context, rows, backend)

    def rollout(self, prompts: list) -> dict[str, list]:
        """TRL's rollout_func: episodes of this rank's batch -> prompt/completion ids, logprobs, env_mask, extras
        (`sepo.grpo.rollouts.rollout_columns`, the credited round rewards among them).

        `prompts` are this rank's dataset prompts, already repeated G times by TRL's sampler; each names the
        group its rollout belongs to (`group_prompt`). Rollout hooks see every batch as it was played."""
        mode = self.metric_mode()
        rows = [parse_group_prompt(p) for p in prompts]
        t0 = time.perf_counter()
        with self.generation_backend() as backend:
            if self.adaptive is not None and self.adaptive.due(self.state.global_step, self.args.adaptive_every):
                self._refresh_adaptive(backend, mode)
            timed = TimedBackend(backend)
            results = self.play(rows, timed)
        rollout_s = time.perf_counter() - t0
        metrics = {f"sepo/prefix_cache/{name}": float(n)  # HF: KV reuse across rounds, per step
                   for name, n in getattr(backend, "prefix_counts", {}).items()}
        for hook in self.rollout_hooks:
            hook(self, results)
        metrics.update({"sepo/time/generation_s": timed.seconds, "sepo/time/rollout_s": rollout_s,
                        "sepo/time/rollout_overhead_s": rollout_s - timed.seconds,
                        "sepo/generation_calls": float(timed.calls)})
        self.record_metrics(mode, metrics)
        return rollout_columns(results, self.sepo_reward, self.stop_token_ids(), self.renderer.end_of_turn_id,
                               self.args.mask_forced_tokens)

    def _refresh_adaptive(self, backend: GenerationBackend, mode: str) -> None:
        """Recompute the adaptive exploiter's best response from the policy's scored action probabilities on the
        training prompts (`sepo.grpo.adaptive`), and log the policy's exact figures."""
        t0 = time.perf_counter()
        params = self.args.game_params.get(self.adaptive.game)
        policy = self.adaptive.oracle.measure(backend, self.renderer, params, self.args.seat)
        figures = self.adaptive.refresh(policy, self.state.global_step, params)
        seconds = time.perf_counter() - t0
        self.record_metrics(mode, {f"sepo/adaptive/{key}": value
                                   for key, value in {**figures, "refresh_s": seconds}.items()})
        logger.info("step %d: adaptive exploiter refreshed in %.3f s; policy exploitability %.4f",
                    self.state.global_step, seconds, figures["exploitability"])

    # --- advantages ---------------------------------------------------------------------------------
    def scored_advantages(self, inputs: list[dict[str, Any]], output: dict[str, Any], mode: str) -> torch.Tensor:
        """The seam's hook after TRL scored a batch: the SEPO advantages, timed."""
        t0 = time.perf_counter()
        advantages = self._sepo_advantages(inputs, output, mode)
        self.record_metrics(mode, {"sepo/time/advantages_s": time.perf_counter() - t0})
        return advantages

    def _round_reward_matrix(self, inputs: list[dict[str, Any]], device: torch.device) -> torch.Tensor:
        """Global (N, K) per-round rewards of a scored batch (`sepo.grpo.scoring.round_reward_matrix`)."""
        mode = self.metric_mode()
        rewards, metrics = round_reward_matrix(self.args, inputs, self._batch(device, mode))
        self.record_metrics(mode, metrics)
        return rewards

    def _sepo_advantages(self, inputs: list[dict[str, Any]], output: dict[str, Any], mode: str) -> torch.Tensor:
        """This rank's per-token advantages of a scored batch (`sepo.grpo.scoring.sepo_advantages`), its
        metrics logged under `mode`."""
        batch = self._batch(self.accelerator.device, mode)
        rewards = self._round_reward_matrix(inputs, batch.device)
        token_adv, metrics = sepo_advantages(self.args, inputs, output, rewards, batch)
        self.record_metrics(mode, metrics)
        if metrics["sepo/no_learning_signal"] and mode == "train":
            logger.warning("step %d: every group's rewards are equal (zero spread), so every advantage is 0 and "
                           "this step has no learning signal", self.state.global_step + 1)
        return token_adv

    def _batch(self, device: torch.device, mode: str) -> Batch:
        """Where this step's generation batch sits (the group size of `mode`, rank, rounds, gather)."""
        return Batch(num_generations=self.group_size(mode), process_index=self.accelerator.process_index,
                     max_rounds=self.max_rounds, device=device, gather=gather)
