"""GPU check (lent H200, < 8 minutes): a few SEPO-GRPO steps on a 4B-shaped random-weight model in bf16 with
LoRA and the HF generation path; prints the step time split and peak memory, writes a results JSON.

    python benchmarks/gpu/check_trainer_h200.py                       # writes $OUT/check_trainer_h200.json
    python benchmarks/gpu/check_trainer_h200.py --arch qwen3_5 --steps 2 --out results.json
    python benchmarks/gpu/check_trainer_h200.py --shape tiny --cpu    # smoke test of the script itself

Split per optimizer step: generation (backend calls), SEPO rollout work (game logic, rendering, parsing and
fallback bookkeeping outside the backend), reward + advantages (reward function, per-round normalisation),
and the rest of the step (TRL logprob passes, loss, backward, optimizer). Random weights never answer legally,
so every decision also pays one constrained fallback call: an upper bound on generation work per round.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="llama", choices=["llama", "qwen3_5", "gemma4"])
    parser.add_argument("--shape", default="4b", choices=["4b", "tiny"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=8, help="IPD rounds per episode")
    parser.add_argument("--max_turn_tokens", type=int, default=32)
    parser.add_argument("--cpu", action="store_true", help="run on CPU in float32 (script smoke test)")
    parser.add_argument("--out", default=None, help="results JSON (default $OUT/check_trainer_h200.json)")
    a = parser.parse_args(argv)

    import torch
    from peft import LoraConfig

    from sepo.grpo.config import SEPOConfig
    from sepo.grpo.trainer import SEPOTrainer
    from sepo.tiny_models import build_tiny_model

    cuda = torch.cuda.is_available() and not a.cpu
    dtype = torch.bfloat16 if cuda else torch.float32
    model, tokenizer = build_tiny_model(a.arch, shape=a.shape, dtype=dtype)
    n_params = sum(p.numel() for p in model.parameters())
    timings: dict[str, list[float]] = {"step": [], "rewards": []}

    class TimedSEPOTrainer(SEPOTrainer):
        def training_step(self, *args, **kwargs):
            t0 = time.perf_counter()
            try:
                return super().training_step(*args, **kwargs)
            finally:
                if cuda:
                    torch.cuda.synchronize()
                timings["step"].append(time.perf_counter() - t0)

        def _calculate_rewards(self, *args, **kwargs):
            t0 = time.perf_counter()
            try:
                return super()._calculate_rewards(*args, **kwargs)
            finally:
                timings["rewards"].append(time.perf_counter() - t0)

    out_dir = tempfile.mkdtemp(prefix="sepo-gpu-check-")
    args = SEPOConfig(
        output_dir=out_dir, use_cpu=not cuda, bf16=cuda, report_to="none", max_steps=a.steps, logging_steps=1,
        save_strategy="no", gradient_checkpointing=True, games=["ipd"], game_params={"ipd": {"num_rounds": a.rounds}},
        num_generations=4, per_device_train_batch_size=28, gradient_accumulation_steps=1,  # 7 groups x G=4
        max_turn_tokens=a.max_turn_tokens, max_completion_length=4096, seed=0,
    )
    trainer = TimedSEPOTrainer(model=model, args=args, processing_class=tokenizer,
                               peft_config=LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05,
                                                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0

    logs = [h for h in trainer.state.log_history if "sepo/time/rollout_s" in h]
    steps = []
    for i, h in enumerate(logs):
        gen, rollout, adv = h["sepo/time/generation_s"], h["sepo/time/rollout_s"], h["sepo/time/advantages_s"]
        reward = timings["rewards"][i]
        step = timings["step"][i]
        steps.append({
            "step_s": step, "generation_s": gen, "sepo_rollout_work_s": rollout - gen,
            "reward_and_advantages_s": reward + adv,
            "logprobs_loss_backward_optimizer_s": step - rollout - reward - adv,
            "generation_calls": h["sepo/generation_calls"], "completion_mean_tokens": h["completions/mean_length"],
            "fallback_rate": h["sepo/fallback_rate"],
        })  # fmt: skip
    result = {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "arch": a.arch, "shape": a.shape, "params": n_params, "dtype": str(dtype),
        "episodes_per_step": 28, "rounds": a.rounds, "max_turn_tokens": a.max_turn_tokens,
        "steps": steps, "wall_s": wall,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "torch": torch.__version__,
    }
    for i, s in enumerate(steps):
        print(f"step {i}: total {s['step_s']:.1f}s = generation {s['generation_s']:.1f}s + SEPO rollout work "
              f"{s['sepo_rollout_work_s']:.2f}s + reward/advantages {s['reward_and_advantages_s']:.3f}s + "
              f"logprobs/loss/backward/optimizer {s['logprobs_loss_backward_optimizer_s']:.1f}s "
              f"({s['generation_calls']:.0f} generation calls, fallback rate {s['fallback_rate']:.2f})")
    if cuda:
        print(f"peak memory {result['peak_memory_gib']:.1f} GiB, params {n_params / 1e9:.2f} B")
    path = Path(a.out or Path(os.environ.get("OUT", ".")) / "check_trainer_h200.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2))
    os.replace(tmp, path)
    print(f"results: {path}")
    return result


if __name__ == "__main__":
    main()
