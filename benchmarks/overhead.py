"""SEPO's own share of a SEPO-GRPO step: games, opponents, parsing, chat rendering, rewards and advantages
next to generation and the model's logprob forwards, backward and optimizer step.

Every part is timed on its own, none is a remainder: the trainer's timers (generation, rollout overhead,
rewards, advantages), and here, around TRL's own calls, every logprob forward
(`_get_per_token_logps_and_entropies`: old/reference log-probs and the loss forward), every
`accelerator.backward`, gradient clipping and the optimizer step (`on_pre_optimizer_step` to
`on_optimizer_step`). The step's wall time comes from `on_step_begin`/`on_step_end`. The first step is a
warm-up; every figure is per step, the mean over the steps after it (`timed_steps_s` lists each one). What the parts do not
cover (`other_s`: TRL's tensor bookkeeping, the loss arithmetic, the scheduler) is reported, not assumed; the
parts must add up to at most the step. On CUDA every timer synchronises first, so GPU work is charged to the
part that launched it.
"""

from __future__ import annotations

import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.settings import game_settings
from envs import game_spec
from sepo.tiny_models import build_tiny_model


@dataclass(frozen=True)
class OverheadSettings:
    """The game the steps are timed on (configs/benchmarks/overhead.yaml)."""

    game: str
    game_params: dict[str, dict[str, Any]]  # "quick" / "full" -> the game's parameters
    quick_pool_mix: dict[str, Any]  # pool -> its members (or "all"): one opponent per pool


def opponent_groups(game: str, mix: dict[str, Any] | None) -> int:
    """How many opponents a step's pool mix draws from (None: every member of the game's default pools)."""
    pools = game_spec(game).pools
    mix = mix or dict.fromkeys(pools, "all")
    return sum(len(pools[pool]) if members == "all" else len(members) for pool, members in mix.items())


class Stopwatch:
    """Seconds and calls per named part."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.calls: defaultdict[str, int] = defaultdict(int)

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        start = self.now()
        try:
            yield
        finally:
            self.seconds[name] += self.now() - start
            self.calls[name] += 1

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.part(name):
                return fn(*args, **kwargs)

        return timed


def instrumented(watch: Stopwatch) -> tuple[type, Any]:
    """A SEPOTrainer subclass whose model compute `watch` times, and a callback that snapshots `watch` after
    every step (its `steps`: one dict of cumulative totals per step, with that step's own wall time)."""
    # deferred: transformers' Trainer and sepo.grpo (trl) take seconds to import; the suite imports every part's
    # module at start-up, and a run of other parts (`--only car_tag`) never builds a trainer
    from transformers import TrainerCallback

    from sepo.grpo.trainer import SEPOTrainer

    class TimedSEPOTrainer(SEPOTrainer):
        def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any) -> Any:
            with watch.part("logprob_forward"):
                return super()._get_per_token_logps_and_entropies(*args, **kwargs)

        def _clip_grad_norm(self, model: Any) -> Any:
            with watch.part("clip"):
                return super()._clip_grad_norm(model)

    class StepParts(TrainerCallback):
        """Step wall time and the optimizer step; a snapshot of `watch` (seconds, calls) after every step."""

        def __init__(self) -> None:
            self.steps: list[dict[str, float]] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = watch.now()

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            self.optimizer_start = watch.now()

        def on_optimizer_step(self, args, state, control, **kwargs):
            watch.seconds["optimizer"] += watch.now() - self.optimizer_start
            watch.calls["optimizer"] += 1

        def on_step_end(self, args, state, control, **kwargs):
            calls = {f"{name}_calls": float(n) for name, n in watch.calls.items()}
            self.steps.append({"step": watch.now() - self.start, **watch.seconds, **calls})

    return TimedSEPOTrainer, StepParts()


def _overhead_trainer(quick: bool, gpu: bool, out_dir: str, watch: Stopwatch) -> Any:
    """A SEPOTrainer on a random-weight model (tiny on CPU, 4B-shaped bf16 + LoRA r16 on cuda), its model
    compute timed by `watch`."""
    # deferred: peft and sepo.grpo (trl) take seconds to import; only this part of the suite needs them
    from peft import LoraConfig

    from sepo.grpo.config import SEPOConfig

    trainer_cls, step_parts = instrumented(watch)
    if gpu:
        with torch.device("cuda"):
            model, tok = build_tiny_model("llama", shape="4b", dtype=torch.bfloat16)
    else:
        model, tok = build_tiny_model("llama")
    tok.padding_side = "left"
    settings = game_settings(OverheadSettings, "overhead")
    mix = settings.quick_pool_mix if quick else None  # full: the game's whole default pool mix
    groups = opponent_groups(settings.game, mix)
    args = SEPOConfig(
        output_dir=out_dir, use_cpu=not gpu, bf16=gpu, gradient_checkpointing=gpu, report_to="none",
        max_steps=3 if quick else 4,  # one warm-up step, then 2 (quick) or 3 measured steps
        logging_steps=1, save_strategy="no", keep_best_by_safety=False, disable_tqdm=True, seed=0,
        games=[settings.game], game_params={settings.game: settings.game_params["quick" if quick else "full"]},
        pool_mix=mix,
        num_generations=4, per_device_train_batch_size=groups * 4, gradient_accumulation_steps=1,
        max_turn_tokens=8 if quick else 32, max_completion_length=4096, learning_rate=1e-5,
    )
    lora = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                      task_type="CAUSAL_LM")
    trainer = trainer_cls(model=model, args=args, processing_class=tok, peft_config=lora, callbacks=[step_parts])
    trainer.accelerator.backward = watch.wrap("backward", trainer.accelerator.backward)
    return trainer


def step_parts_of(trainer: Any) -> Any:
    return next(c for c in trainer.callback_handler.callbacks if hasattr(c, "steps"))


PREFIX_COUNTS = ("stored", "refused", "hits", "misses", "refused_cache_type", "refused_over_budget")


def per_step(steps: list[dict[str, float]], logs: list[dict[str, Any]], warmup: int = 1) -> dict[str, Any]:
    """Per-step figures of the steps after `warmup` warm-up steps: every part's seconds as the mean over
    those steps (never their sum), each step's wall time in `timed_steps_s`, and the SEPO share.

    steps: the StepParts snapshots (cumulative watch totals, each with its own step's wall time); logs: the
    trainer's log entries with `sepo/time/*` (one per step at logging_steps 1)."""
    first = warmup if len(steps) > warmup else 0
    timed = steps[first:]
    n = len(timed)
    base = steps[first - 1] if first else {}

    def measured(key: str) -> float:  # a watch total over the timed steps, per step
        return (timed[-1].get(key, 0.0) - base.get(key, 0.0)) / n

    def logged(key: str) -> float:  # a trainer metric, mean over the timed steps
        return sum(h.get(key, 0.0) for h in logs[first:]) / n

    step_s = sum(s["step"] for s in timed) / n
    generation = logged("sepo/time/generation_s")
    rollout_own = logged("sepo/time/rollout_overhead_s")
    rewards, advantages = logged("sepo/time/rewards_s"), logged("sepo/time/advantages_s")
    forward, backward = measured("logprob_forward"), measured("backward")
    optimizer = measured("optimizer") + measured("clip")
    model_compute = forward + backward + optimizer
    sepo_own = rollout_own + rewards + advantages
    return {
        "warmup_steps": first,
        "warmup_step_s": steps[0]["step"] if first else None,
        "measured_steps": n,
        "timed_steps_s": [s["step"] for s in timed],
        "seconds_per_step": step_s,
        "step_s": step_s,  # the same: every *_s figure below is per step (a mean), not a sum over steps
        "generation_s": generation,
        "sepo_rollout_s": rollout_own,  # games, opponents, parsing, chat rendering inside the rollout
        "sepo_rewards_s": rewards,
        "sepo_advantages_s": advantages,
        "logprob_forward_s": forward,  # old/reference log-probs and the loss forward
        "backward_s": backward,
        "optimizer_s": optimizer,  # gradient clipping and the optimizer step
        "model_compute_s": model_compute,
        "other_s": step_s - generation - sepo_own - model_compute,  # not covered by any timer above
        "backward_calls": measured("backward_calls"),  # per step
        "optimizer_calls": measured("optimizer_calls"),
        "sepo_overhead_share": sepo_own / step_s if step_s else 0.0,
        # KV reuse across rounds inside the step's rollouts (HF backend), summed over the timed steps
        "prefix_cache": {k: int(sum(h.get(f"sepo/prefix_cache/{k}", 0) for h in logs[first:])) for k in PREFIX_COUNTS},
    }


def bench(quick: bool, gpu: bool) -> dict[str, Any]:
    """Instrumented SEPO-GRPO steps; the first step is warm-up and left out of every figure, and every
    figure is per step (the mean over the measured steps)."""
    watch = Stopwatch(cuda=gpu)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = _overhead_trainer(quick, gpu, tmp, watch)
        if gpu:
            torch.cuda.reset_peak_memory_stats()
        trainer.train()
        logs = [h for h in trainer.state.log_history if "sepo/time/generation_s" in h]
        steps = step_parts_of(trainer).steps
    return {
        "model": "llama-4b-bf16-random + LoRA r16" if gpu else "tiny llama (hidden 64)",
        "device": torch.cuda.get_device_name() if gpu else "cpu",
        "episodes_per_step": trainer.args.per_device_train_batch_size,
        **per_step(steps, logs),
        **({"peak_gpu_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2)} if gpu else {}),
    }
