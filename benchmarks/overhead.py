"""SEPO's own share of a SEPO-GRPO step: games, opponents, parsing, chat rendering, rewards and advantages
next to generation and the model's forward/backward/optimizer, read from the trainer's own timers."""

from __future__ import annotations

import time
from typing import Any


def _overhead_trainer(quick: bool, gpu: bool, out_dir: str) -> Any:
    """A SEPOTrainer on a random-weight model: tiny on CPU, 4B-shaped bf16 + LoRA on cuda."""
    import torch
    from peft import LoraConfig

    from sepo.grpo.config import SEPOConfig
    from sepo.grpo.trainer import SEPOTrainer
    from sepo.tiny_models import build_tiny_model

    if gpu:
        with torch.device("cuda"):
            model, tok = build_tiny_model("llama", shape="4b", dtype=torch.bfloat16)
    else:
        model, tok = build_tiny_model("llama")
    tok.padding_side = "left"
    groups = 3 if quick else 7  # quick: one opponent per pool; full: the whole IPD pool mix
    mix = {"training": ["tit_for_tat"], "exploit": ["always_defect"], "collusive": "all"} if quick else None
    args = SEPOConfig(
        output_dir=out_dir, use_cpu=not gpu, bf16=gpu, report_to="none", max_steps=2 if quick else 4,
        logging_steps=1, save_strategy="no", keep_best_by_safety=False, disable_tqdm=True, seed=0,
        games=["ipd"], game_params={"ipd": {"num_rounds": 3 if quick else 8}}, pool_mix=mix,
        num_generations=4, per_device_train_batch_size=groups * 4, gradient_accumulation_steps=1,
        max_turn_tokens=8 if quick else 32, max_completion_length=4096, learning_rate=1e-5,
    )
    lora = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                      task_type="CAUSAL_LM")
    return SEPOTrainer(model=model, args=args, processing_class=tok, peft_config=lora)


def bench(quick: bool, gpu: bool) -> dict[str, Any]:
    """Instrument SEPO-GRPO steps: the trainer's own timers (generation, rollout, rewards, advantages) and the
    step's wall time from a callback; the first step is warm-up."""
    import tempfile

    import torch
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.seconds: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self.start)

    with tempfile.TemporaryDirectory() as tmp:
        trainer = _overhead_trainer(quick, gpu, tmp)
        timer = StepTimer()
        trainer.add_callback(timer)
        trainer.train()
        logs = [h for h in trainer.state.log_history if "sepo/time/generation_s" in h]
    steps = slice(1, None) if len(timer.seconds) > 1 else slice(None)

    def total(values: list[float]) -> float:
        return sum(values[steps])

    step_s = total(timer.seconds)
    generation = total([h["sepo/time/generation_s"] for h in logs])
    rollout_own = total([h["sepo/time/rollout_overhead_s"] for h in logs])
    advantages = total([h["sepo/time/advantages_s"] for h in logs])
    rewards = total([h["sepo/time/rewards_s"] for h in logs])
    sepo_own = rollout_own + rewards + advantages
    if gpu:
        peak = {"peak_gpu_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2)}
    else:
        peak = {}
    return {
        "model": "llama-4b-bf16-random + LoRA r16" if gpu else "tiny llama (hidden 64)",
        "device": torch.cuda.get_device_name() if gpu else "cpu",
        "measured_steps": len(timer.seconds[steps]),
        "episodes_per_step": trainer.args.per_device_train_batch_size,
        "step_s": step_s,
        "generation_s": generation,
        "model_compute_s": step_s - generation - sepo_own,  # logprob forwards, backward, optimizer
        "sepo_rollout_s": rollout_own,  # games, opponents, parsing, chat rendering inside the rollout
        "sepo_rewards_s": rewards,
        "sepo_advantages_s": advantages,
        "sepo_overhead_share": sepo_own / step_s if step_s else 0.0,
        **peak,
    }


