"""SEPOTrainer: TRL's GRPOTrainer with multi-round game rollouts and per-round SEPO advantages.

One step, from dataset row to loss. TRL drives it and calls back into SEPO twice, through the seam
(`sepo.grpo.trl_seam`, the one place TRL's private names are used):

    1. `rollout(prompts, mode)`: TRL's rollout_func, for this rank's rows (`sepo.grpo.groups` names each row's game,
       pool, opponent, seed and seat in its prompt). The engine is opened by its class, looked up once per run
       (`sepo.backends.trainer_backend_class`: HF generate over the live policy, or TRL's vLLM engine), every episode
       and probe episode is played in lock-step rounds (`sepo.grpo.rollouts.play` -> `sepo.rollout.engine`, whose
       `PhaseTimer` times its generation calls), and each rollout's per-round rewards are credited once into TRL's
       columns (`sepo.grpo.rollouts.rollout_columns` -> `sepo.grpo.rewards`). Returns the columns and the step's
       rollout metrics (the seam logs them).
    2. TRL scores the batch: the SEPO reward (`sepo.grpo.rewards.SEPOReward`, the mean of the credited round
       rewards, with the batch's episode metrics), the old and reference log-probabilities.
    3. `scored_advantages(inputs, output, mode)`: one scoring call (`sepo.grpo.scoring.score_batch`), the (B, T)
       per-token advantages from per-round group normalisation in place of TRL's own, and their metrics (the
       seam logs them).
    4. TRL's loss and optimiser step on those advantages (the seam's shared-prefix pass computes the
       log-probabilities when `share_prompt_prefix` is set).

TRL keeps the loss, optimiser, reference model, vLLM weight sync, accelerate/DeepSpeed/FSDP and logging. What the
trainer trains on comes built from `sepo.grpo.groups`.
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
from sepo.backends import trainer_backend_class, trainer_engine
from sepo.config.checks import PUSH_REFUSED
from sepo.generation import GenerationBackend
from sepo.grpo.callbacks import CheckpointEvalCallback, eval_config
from sepo.grpo.config import SEPOConfig
from sepo.grpo.groups import TrainingGroups, parse_group_prompt, training_groups
from sepo.grpo.rewards import SEPOReward
from sepo.grpo.rollouts import (
    Played,
    RolloutContext,
    episode_spec,
    exported_factories,
    play,
    probe_specs,
    rollout_columns,
    rollout_sampling,
)
from sepo.grpo.scoring import Batch, Scored, score_batch
from sepo.grpo.trl_seam import SeamTrainer, check_supported, ensure_weight_sync
from sepo.objective import resolve_lambdas
from sepo.rollout.chat import ChatRenderer
from sepo.rollout.engine import EpisodeSpec, PhaseTimer

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
        # fixed for the run: the engine's name and class, TRL's end-of-completion ids, each metric mode's group size
        self.engine = trainer_engine(args.use_vllm)
        self.engine_class = trainer_backend_class(self.engine)
        self.stop_ids = self.stop_token_ids()
        self.group_sizes = {mode: self.group_size(mode) for mode in ("train", "eval")}
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

    # --- 1. rollouts ---------------------------------------------------------------------------------
    def rollout(self, prompts: list, mode: str) -> tuple[dict[str, list], dict[str, float]]:
        """TRL's rollout_func: episodes of this rank's batch -> (prompt/completion ids, logprobs, env_mask, extras,
        as `sepo.grpo.rollouts.rollout_columns` builds them with the credited round rewards; the rollout's
        metrics under `mode`).

        `prompts` are this rank's dataset prompts, already repeated G times by TRL's sampler; each names the
        group its rollout belongs to (`group_prompt`). Rollout hooks see every batch as it was played."""
        rows = [parse_group_prompt(p) for p in prompts]
        metrics: dict[str, float] = {}
        t0 = time.perf_counter()
        with self.generation_backend() as backend:
            if self.adaptive is not None and self.adaptive.due(self.state.global_step, self.args.adaptive_every):
                metrics.update(self._refresh_adaptive(backend))
            timer = PhaseTimer()
            results = self.play(rows, backend, timer)
        rollout_s = time.perf_counter() - t0
        metrics.update({f"sepo/prefix_cache/{name}": float(n)  # HF: KV reuse across rounds, per step
                        for name, n in getattr(backend, "prefix_counts", {}).items()})
        for hook in self.rollout_hooks:
            hook(self, results)
        generation_s = timer.seconds.get("generation", 0.0)  # the engine's backend calls, one lap each
        metrics.update({"sepo/time/generation_s": generation_s, "sepo/time/rollout_s": rollout_s,
                        "sepo/time/rollout_overhead_s": rollout_s - generation_s,
                        "sepo/generation_calls": float(timer.laps.get("generation", 0))})
        columns = rollout_columns(results, self.sepo_reward, self.stop_ids, self.renderer.end_of_turn_id,
                                  self.args.mask_forced_tokens)
        return columns, metrics

    @contextmanager
    def generation_backend(self):
        """The rollout engine for this step, built by its class (`self.engine_class`, named by
        `sepo.backends.trainer_engine`): TRL's vLLM engine (colocate or server) when use_vllm, else HF generate over
        the live policy (it switches eval/no_grad per call), over what the seam hands over of it."""
        with self.engine_parts(self.engine) as engine:
            yield self.engine_class.from_trainer(self.renderer.end_of_turn_id, **engine)

    def play(self, rows: list[dict[str, Any]], backend: GenerationBackend, timer: PhaseTimer) -> Played:
        """This rank's rollout batch played with `backend`, its phases timed by `timer` (`sepo.grpo.rollouts.play`);
        with `_spec` and `probe_specs`, the methods a rollout test double overrides or reuses."""
        return play(self.rollout_context, rows, backend, timer)

    def _spec(self, game: str, pool: str, opponent: str, seed: int, seat: int) -> EpisodeSpec:
        """The episode one rollout plays (`sepo.grpo.rollouts.episode_spec`)."""
        return episode_spec(self.args, game, pool, opponent, seed, seat)

    def probe_specs(self, row: dict[str, Any], index: int) -> list[EpisodeSpec]:
        """The probe episodes of one training rollout (`sepo.grpo.rollouts.probe_specs`)."""
        return probe_specs(self.args, self.rollout_context.pools, row, index)

    def _refresh_adaptive(self, backend: GenerationBackend) -> dict[str, float]:
        """Recompute the adaptive exploiter's best response from the policy's scored action probabilities on the
        training prompts (`sepo.grpo.adaptive`); returns the policy's exact figures as metrics."""
        t0 = time.perf_counter()
        params = self.args.game_params.get(self.adaptive.game)
        policy = self.adaptive.oracle.measure(backend, self.renderer, params, self.args.seat)
        figures = self.adaptive.refresh(policy, self.state.global_step, params)
        seconds = time.perf_counter() - t0
        logger.info("step %d: adaptive exploiter refreshed in %.3f s; policy exploitability %.4f",
                    self.state.global_step, seconds, figures["exploitability"])
        return {f"sepo/adaptive/{key}": value for key, value in {**figures, "refresh_s": seconds}.items()}

    # --- 3. advantages -------------------------------------------------------------------------------
    def scored_advantages(self, inputs: list[dict[str, Any]], output: dict[str, Any], mode: str
                          ) -> tuple[torch.Tensor, dict[str, float]]:
        """The seam's hook after TRL scored a batch: this rank's SEPO advantages (`score`) and their metrics and
        time, which the seam logs under `mode`."""
        t0 = time.perf_counter()
        scored = self.score(inputs, output, mode)
        if scored.metrics["sepo/no_learning_signal"] and mode == "train":
            logger.warning("step %d: every group's rewards are equal (zero spread), so every advantage is 0 and "
                           "this step has no learning signal", self.state.global_step + 1)
        return scored.advantages, {**scored.metrics, "sepo/time/advantages_s": time.perf_counter() - t0}

    def score(self, inputs: list[dict[str, Any]], output: dict[str, Any], mode: str) -> Scored:
        """The step's one scoring call (`sepo.grpo.scoring.score_batch`) on this rank's scored batch, with the
        group size of `mode`."""
        batch = Batch(num_generations=self.group_sizes[mode], process_index=self.accelerator.process_index,
                      max_rounds=self.max_rounds, device=self.accelerator.device, gather=gather)
        return score_batch(self.args, inputs, output, batch)
