"""SEPOTrainer: TRL's GRPOTrainer with multi-round game rollouts and per-round SEPO advantages.

TRL keeps the loss, optimiser, reference model, vLLM weight sync, accelerate/DeepSpeed/FSDP and logging.
This subclass adds three things: a `rollout_func` that plays every episode of the rank's batch in
lock-step rounds, a SEPO reward function, and (after `super()._generate_and_score_completions`) a
(B, T) per-token advantage tensor from per-round group normalisation.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from accelerate.utils import gather
from transformers import TrainerCallback
from trl import GRPOTrainer
from trl.models.utils import unwrap_model_for_generation

from envs import Game, make_game
from sepo.backends.base import Generation, GenerationBackend, Prompt, SamplingSpec, prefix_session
from sepo.grpo.advantages import sepo_round_advantages, token_advantages
from sepo.grpo.config import SEPOConfig
from sepo.grpo.groups import TrainingGroups, parse_group_prompt, training_groups
from sepo.grpo.rewards import SEPOReward
from sepo.objective import PROBE_CREDITS, resolve_lambdas

logger = logging.getLogger(__name__)

RolloutHook = Callable[["SEPOTrainer", list[tuple[Any, Any, list[Any]]]], None]
"""Called after every rollout batch with the trainer and `play`'s results: (record, trajectory, probe
records) per rollout, in the batch's order (e.g. the study records them)."""


class _TimedBackend:
    """Wraps a GenerationBackend and accumulates the seconds spent inside its calls."""

    def __init__(self, inner: GenerationBackend) -> None:
        self.inner, self.seconds, self.calls = inner, 0.0, 0

    def _timed(self, fn, *a):
        t0 = time.perf_counter()
        try:
            return fn(*a)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1

    def generate(self, prompts: list[Prompt], sampling: SamplingSpec) -> list[Generation]:
        return self._timed(self.inner.generate, prompts, sampling)

    def generate_choice(self, prompts: list[Prompt], choices: list[list[str]], sampling: SamplingSpec):
        return self._timed(self.inner.generate_choice, prompts, choices, sampling)

    def score_choices(self, prompts: list[Prompt], choices: list[list[str]]) -> list[list[float]]:
        return self._timed(self.inner.score_choices, prompts, choices)

    def prefix_session(self):
        return prefix_session(self.inner)


class SEPOTrainer(GRPOTrainer):
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
        self.games: dict[str, Game] = {g: make_game(g, **args.game_params.get(g, {})) for g in args.games}
        self.adaptive = groups.adaptive
        self.pools = groups.pools.training
        self.lambdas = {g: resolve_lambdas(self.games[g], args.lambdas.get(g)) for g in args.games}
        self.max_rounds = max(game.num_rounds for game in self.games.values())
        # FMSP-exported members (scripted ones are built by the rollout from the game's registry)
        self._pool_factories = {m.name: m.factory for p in self.pools.values() for m in p.registry.values()
                                if m.source.get("kind") != "scripted"}
        self.sepo_reward = SEPOReward(self.games, self.lambdas, args.credit, args.fallback_penalty,
                                      paper=args.return_mode == "paper", exploit_reward=args.exploit_reward)
        callbacks = list(callbacks or [])
        if args.keep_best_by_safety:
            from sepo.grpo.callbacks import CheckpointEvalCallback, eval_config

            callbacks.append(CheckpointEvalCallback(eval_config(args), groups.pools.evaluation))
        self.rollout_hooks = list(rollout_hooks)
        super().__init__(model=model, reward_funcs=[self.sepo_reward], args=args,
                         train_dataset=groups.dataset, processing_class=processing_class,
                         peft_config=peft_config, callbacks=callbacks, rollout_func=self._rollout)
        from sepo.rollout.chat import ChatRenderer

        self.renderer = ChatRenderer(self._tokenizer, enable_thinking=args.enable_thinking)
        if args.use_vllm:
            from sepo.backends.trl_vllm import check_supported, ensure_weight_sync

            check_supported(self.vllm_generation)
            ensure_weight_sync(self.vllm_generation)
        self.sampling = SamplingSpec(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k or 0,
                                     max_new_tokens=args.max_turn_tokens)

    # --- rollouts -----------------------------------------------------------------------------------
    @contextmanager
    def generation_backend(self):
        """The rollout engine for this step: vLLM (colocate engine or server) when use_vllm, else HF generate."""
        if self.use_vllm:
            from sepo.backends.trl_vllm import TRLVLLMBackend

            yield TRLVLLMBackend(self.vllm_generation, self._tokenizer, self.renderer.end_of_turn_id)
            return
        from sepo.backends.hf import HFBackend

        with unwrap_model_for_generation(self.model_wrapped, self.accelerator,
                                         gather_deepspeed3_params=self.args.ds3_gather_for_generation) as model:
            yield HFBackend.from_trainer_model(model, self._tokenizer)  # it switches eval/no_grad per call

    def _spec(self, game: str, pool: str, opponent: str, seed: int, seat: int) -> Any:
        from sepo.rollout.engine import EpisodeSpec

        return EpisodeSpec(game=game, game_params=dict(self.args.game_params.get(game, {})), pool=pool,
                           opponent=opponent, seed=seed, seat=seat)

    def probe_specs(self, row: dict[str, Any], index: int) -> list[Any]:
        """credit shared / auxiliary: the probe episodes of one training rollout (`index`: its position in
        the global batch), one against every exploiter and every collusive partner of the game's pools, as
        the method's code played them, each with its own seed; their penalty reaches this rollout
        (auxiliary) or the group mean does (shared)."""
        rng = random.Random(f"{row['seed']}:{index}:probes")
        pools = self.pools[row["game"]]
        return [self._spec(row["game"], pool, name, rng.randrange(2**31), int(row["seat"]))
                for pool in ("exploit", "collusive") for name in pools.names(pool)]

    def play(self, rows: list[dict[str, Any]], backend: GenerationBackend) -> list[tuple[Any, Any, list[Any]]]:
        """Play one episode per row (plus its probe episodes when credit is shared or auxiliary) in one
        lock-step batch, with the same number of generation calls on every rank; returns (record,
        trajectory, probe records)."""
        from sepo.rollout.engine import play_episodes

        specs = [self._spec(r["game"], r["pool"], r["opponent"], int(r["seed"]), int(r["seat"])) for r in rows]
        first = self.accelerator.process_index * len(rows)  # this rank's offset in the global batch
        probes = [self.probe_specs(r, first + i) if self.args.credit in PROBE_CREDITS else []
                  for i, r in enumerate(rows)]
        flat = [spec for specs_i in probes for spec in specs_i]
        results = play_episodes([*specs, *flat], backend, self.renderer, self.sampling,
                                opponents=self._pool_factories, fallback=self.args.fallback, trajectories=True,
                                collective=self.accelerator.num_processes > 1)
        main, rest = results[: len(specs)], iter(results[len(specs):])
        return [(record, traj, [next(rest)[0] for _ in probes_i]) for (record, traj), probes_i in zip(main, probes)]

    def _rollout(self, prompts: list, trainer: GRPOTrainer) -> dict[str, list]:
        """TRL rollout_func: episodes of this rank's batch -> prompt/completion ids, logprobs, env_mask, extras.

        `prompts` are this rank's dataset prompts, already repeated G times by TRL's sampler; each names the
        group its rollout belongs to (`group_prompt`). Rollout hooks see every batch as it was played."""
        mode = "train" if self.model.training else "eval"
        rows = [parse_group_prompt(p) for p in prompts]
        t0 = time.perf_counter()
        with self.generation_backend() as backend:
            if self.adaptive is not None and self.adaptive.due(self.state.global_step, self.args.adaptive_every):
                self._refresh_adaptive(backend, mode)
            timed = _TimedBackend(backend)
            results = self.play(rows, timed)
        rollout_s = time.perf_counter() - t0
        for name, n in getattr(backend, "prefix_counts", {}).items():  # HF: KV reuse across rounds, per step
            self._metrics[mode][f"sepo/prefix_cache/{name}"].append(float(n))
        for hook in self.rollout_hooks:
            hook(self, results)
        self._metrics[mode]["sepo/time/generation_s"].append(timed.seconds)
        self._metrics[mode]["sepo/time/rollout_s"].append(rollout_s)
        self._metrics[mode]["sepo/time/rollout_overhead_s"].append(rollout_s - timed.seconds)
        self._metrics[mode]["sepo/generation_calls"].append(float(timed.calls))
        eos = set(self.eos_token_ids)
        out: dict[str, list] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask",
                                                 "round_ids", "forced_mask", "episode", "probes")}
        for record, traj, probes in results:
            ids, lps = list(traj.completion_ids), list(traj.logprobs)
            env, rids, forced = list(traj.env_mask), list(traj.round_ids), list(traj.forced_mask)
            if not ids or ids[-1] not in eos:  # end with end-of-turn so TRL does not count it as truncated
                ids.append(self.renderer.end_of_turn_id)
                lps.append(0.0)
                env.append(0)
                rids.append(rids[-1] if rids else 0)
                forced.append(0)
            if self.args.mask_forced_tokens:
                env = [e * (1 - f) for e, f in zip(env, forced)]
            out["prompt_ids"].append(list(traj.prompt_ids))
            out["completion_ids"].append(ids)
            out["logprobs"].append(lps)
            out["env_mask"].append(env)
            out["round_ids"].append(rids)
            out["forced_mask"].append(forced)
            out["episode"].append(record)
            out["probes"].append(probes)
        return out

    def _refresh_adaptive(self, backend: GenerationBackend, mode: str) -> None:
        """Recompute the adaptive exploiter's best response from the policy's scored action probabilities at the
        12 information sets (the training prompts), and log the policy's exact exploitability and game value."""
        from sepo.eval.kuhn import scored_policy

        t0 = time.perf_counter()
        policy = scored_policy(backend, self.renderer, self.args.game_params.get("kuhn"), self.args.seat)
        figures = self.adaptive.refresh(policy, self.state.global_step)
        seconds = time.perf_counter() - t0
        for key, value in {**figures, "refresh_s": seconds}.items():
            self._metrics[mode][f"sepo/adaptive/{key}"].append(value)
        logger.info("step %d: adaptive exploiter refreshed in %.3f s; policy exploitability %.4f, game value %.4f",
                    self.state.global_step, seconds, figures["exploitability"], figures["game_value"])

    # --- advantages ---------------------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)  # rollout extras are now in inputs[i]
        mode = "train" if self.model.training else "eval"
        t0 = time.perf_counter()
        output["advantages"] = self._sepo_advantages(inputs, output, mode)
        self._metrics[mode]["sepo/time/advantages_s"].append(time.perf_counter() - t0)
        return output

    def _round_reward_matrix(self, inputs: list[dict[str, Any]], device: torch.device) -> torch.Tensor:
        """Global (N, K) per-round rewards (NaN = round absent); with credit shared, minus the group mean of
        the rollouts' probe penalties (one constant per group)."""
        K, n = self.max_rounds, len(inputs)
        local = torch.full((n, K), torch.nan, device=device)
        probe_penalty = torch.zeros(n, device=device)
        for i, x in enumerate(inputs):
            rewards, probe_penalty[i] = self.sepo_reward.round_rewards(x["episode"], x["probes"])
            local[i, : len(rewards)] = torch.tensor(rewards, dtype=torch.float32, device=device)
        rewards = gather(local)
        if self.args.credit in PROBE_CREDITS:
            penalties = gather(probe_penalty)
            mode = "train" if self.model.training else "eval"
            self._metrics[mode]["sepo/probe_penalty"].append(penalties.mean().item())
            if self.args.credit == "shared":
                G = self.num_generations if self.model.training else self.num_generations_eval
                rewards = rewards - penalties.view(-1, G).mean(dim=1).repeat_interleave(G).unsqueeze(1)
        return rewards

    def _sepo_advantages(self, inputs: list[dict[str, Any]], output: dict[str, Any], mode: str) -> torch.Tensor:
        device = self.accelerator.device
        G = self.num_generations if mode == "train" else self.num_generations_eval
        rewards = self._round_reward_matrix(inputs, device)
        weights = gather(torch.tensor([self.args.pool_weight(x["pool"]) for x in inputs], device=device))
        adv, zero_std = sepo_round_advantages(
            rewards, G, advantage_mode=self.args.advantage_mode, return_mode=self.args.return_mode,
            pool_weights=weights if self.args.pool_weights else None, eps=self.args.advantage_epsilon,
        )
        n, p = len(inputs), self.accelerator.process_index
        local = adv[p * n : (p + 1) * n]
        T = output["completion_ids"].size(1)
        round_ids = torch.full((n, T), -1, dtype=torch.long, device=device)
        forced = torch.zeros((n, T), dtype=torch.long, device=device)
        for i, x in enumerate(inputs):
            r = torch.tensor(x["round_ids"][:T], dtype=torch.long, device=device)
            round_ids[i, : len(r)] = r
            f = torch.tensor(x["forced_mask"][:T], dtype=torch.long, device=device)
            forced[i, : len(f)] = f
        keep = output["completion_mask"] * (1 - forced)
        if "tool_mask" in output:
            keep = keep * output["tool_mask"]
        token_adv = token_advantages(local, round_ids, keep)
        if self.args.loss_scale == "training_tokens":
            token_adv = token_adv * self._training_token_scale(inputs, output, mode)
        self._log_advantage_metrics(rewards, adv, zero_std, mode)
        return token_adv

    def _training_token_scale(self, inputs: list[dict[str, Any]], output: dict[str, Any], mode: str) -> float:
        """N_all / N_train: TRL's dapo loss divides by every loss token of the generation batch (N_all); scaling
        every advantage by this factor makes its denominator the training groups' loss tokens (N_train), so
        the payoff gradient is the same whether or not an arm adds penalty groups (they add their own terms on
        top, at the weight `pool_weights` gives them). With no training group (e.g. exploitability descent)
        the factor is 1. Exact for the policy-gradient term; the KL term (beta > 0) keeps TRL's normaliser."""
        mask = output["completion_mask"] * output["tool_mask"] if "tool_mask" in output else output["completion_mask"]
        tokens = mask.sum(dim=1).to(torch.float64)
        training = torch.tensor([x["pool"] == "training" for x in inputs], dtype=torch.float64, device=tokens.device)
        counts = gather(torch.stack([tokens.sum(), (tokens * training).sum()]).unsqueeze(0)).sum(dim=0)
        scale = float(counts[0] / counts[1]) if counts[1] > 0 else 1.0
        self._metrics[mode]["sepo/loss_scale"].append(scale)
        return scale

    def _log_advantage_metrics(self, rewards: torch.Tensor, adv: torch.Tensor, zero_std: torch.Tensor,
                               mode: str) -> None:
        m = self._metrics[mode]
        exists = ~torch.isnan(rewards)
        m["sepo/frac_round_zero_std"].append(zero_std.float().mean().item())
        # no learning signal: every (group, round) that happened has zero reward spread, so every advantage is 0
        cells = exists.view(zero_std.size(0), -1, rewards.size(1)).any(dim=1)
        no_signal = bool((zero_std == (cells if zero_std.dim() == 2 else cells.any(dim=1))).all())
        m["sepo/no_learning_signal"].append(float(no_signal))
        if no_signal and mode == "train":
            logger.warning("step %d: every group's rewards are equal (zero spread), so every advantage is 0 and "
                           "this step has no learning signal", self.state.global_step + 1)
        m["sepo/round_reward_mean"].append(torch.nanmean(rewards).item())
        for t in range(adv.size(1)):
            if exists[:, t].any():
                col = adv[exists[:, t], t]
                m[f"sepo/adv/round_{t}/abs_mean"].append(col.abs().mean().item())
                m[f"sepo/adv/round_{t}/std"].append(col.std(unbiased=False).item())
        m["sepo/adv/abs_mean"].append(adv[exists].abs().mean().item() if exists.any() else 0.0)
