"""The GPU check for a lent H200: one prepared script, 5.5 minutes of parts, no network, figures against goals.

It runs the project from source (`PYTHONPATH=.`) on the machine's own torch / transformers / peft /
accelerate, with trl and datasets (and their missing dependencies) installed from the wheels `make
gpu-wheels` downloads (README, Performance, has the exact device command), fla-core among them: the Triton
kernels of Qwen 3.5's linear attention (pure Python; the device has Triton), checked against transformers'
PyTorch reference before any part and unwired if they fail there (`linear_attention_kernels`). Random-weight
4B-shaped bf16 models, no downloads. The parts, in order of value (the first is the headline):

  grpo_step        one full SEPO-GRPO step of the paper recipe (`recipe` in configs/benchmarks/gpu_check.yaml:
                   8 rounds, G = 4, the whole pool mix = 28 episodes, 256-token turns, LoRA r16 on q/k/v/o,
                   gradient checkpointing, beta 0.1) on the HF backend, on the 4B Qwen 3.5 build with its real
                   248,320-token vocabulary: 1 warm-up step, then 2 timed steps; every figure is per step
                   (a mean, never a sum), split into generation / SEPO's own work / logprob forwards /
                   backward / optimizer, with peak memory. From it, `prediction`: the wall time of 100 steps.
                   `--step-arch auto` (default): on the 4B Llama shape instead, stated in `step_arch`, where
                   Qwen 3.5's linear attention would run the slow PyTorch reference (its kernels failed).
  rollout          (llama) KV reuse on a real GPU: the 4B Llama shape with the Qwen 3.5 vocabulary, 128
                   episodes (configs/benchmarks/rollout.yaml's game) x 4 rounds x 256-token turns, batched with KV reuse vs batched re-encoding vs one
                   episode at a time (timed on 1, extrapolated). A full-attention model whose batched arm
                   never stored its cache FAILS this part (KV reuse silently off).
  decode           (llama) decode tokens/s through the project's HF backend (`HFBackend.generate` inside a
                   prefix session, the code a rollout runs) at batch 1 and 256 against the memory-bandwidth
                   roofline (the device's nominal bandwidth: H200 4.8 TB/s).
  flops            (llama) prefill FLOP/s and the backward pass's FLOP/s (frozen base + LoRA, as trained) and
                   their MFU against the nominal bf16 dense peak (H200 989 TFLOP/s).
  rollout_qwen3_5, rollout_gemma4
                   the recipes' own architectures (4B builds, real vocabularies), batched arm only, with KV
                   reuse (Qwen 3.5's linear-attention states, Gemma 4's sliding window: sepo.backends.
                   cache_layers); a batched arm that never stored its cache FAILS the part.

    python benchmarks/gpu/check.py --git-sha SHA --out "$OUT"   # on the H200 (README has the whole line)
    python benchmarks/gpu/check.py --tiny --cpu --out D          # smoke test (tiny models, CPU; in make test)

Time: the estimate and time box of every part are printed before the first starts. No part starts after
`--budget-s` (330 s) from the start or runs past it, and a part whose estimate would overrun it is skipped with
a note; the estimates are scaled by how the finished parts compared with theirs. Each part has a time box
(`Part.box_s`): the step part starts no step that would end past it at the last step's pace (it then reports
fewer timed steps and fails), and any part still running at its end is interrupted (SIGALRM; status
"timed_out", the figures so far kept; the step part gets GRACE_S more). So the check ends by about 345 s and,
with the machine's start (1-2 min) and the wheels' install, leaves more than 4 of the device's 15 minutes for a
second try. Nothing is held back for the end:
OUT/gpu_check.json is rewritten atomically before and after every part (a part being run reads "running",
and the step part rewrites it after every step), so a kill loses at most the part it interrupted; SIGTERM
(what `timeout` sends) marks that part "killed" first. Progress lines are flushed as they are printed.

Writes OUT/gpu_check.json (`Check.doc`: `parts`, each with `status`; `prefix_cache` {stored, refused, ...}
in every generating part; `seconds_per_step` in the training part; `prediction` {hours_per_100_steps, ...})
and OUT/results.jsonl (one line for `python -m benchmarks --merge`). Exit status: 0 every goal met; 1 a goal
missed, a part failed or was skipped before its goal was measured (the message names it); 2 no CUDA device
(it never falls back to the CPU unless `--cpu` is given). The smoke test checks the script and its figures'
shape, not the goals.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from benchmarks.settings import game_settings
from sepo.config.provenance import git_sha, machine_info
from sepo.config.recipes import RecipeParser  # transformers' argument parser: on the device
from sepo.config.subcommands import report_usage_errors
from sepo.files import write_json_atomic, write_jsonl_atomic
from sepo.generation import Prompt, SamplingSpec

# Imports of torch, transformers, trl, peft and of the project modules that load them (sepo.tiny_models,
# sepo.grpo, sepo.backends.hf, benchmarks.rollout / overhead / suite) sit in the functions that use them, each
# marked "deferred: after versions()": `main` first checks every REQUIRED package with `versions()`, which names
# the remedy (`make gpu-wheels`) instead of a bare ImportError, and sets TRL_EXPERIMENTAL_SILENCE before trl loads.



@dataclass(frozen=True)
class CheckSettings:
    """The check's game settings (configs/benchmarks/gpu_check.yaml): the recipe the grpo_step part times and
    the game parameters and pool mix `--tiny` shrinks it to (one opponent per pool, few rounds)."""

    recipe: str
    tiny_game_params: dict[str, Any]
    tiny_pool_mix: dict[str, Any]


SCHEMA = "sepo-gpu-check/2"
SETTINGS = game_settings(CheckSettings, "gpu_check")
RECIPE = SETTINGS.recipe
BUDGET_S = 330.0  # no part starts after this many seconds from the start, and none runs past it
GRACE_S = 15.0  # the step part stops itself at its box's end; the hard stop (SIGALRM) waits this much longer
GOAL_HOURS_PER_100_STEPS = 1.0  # the project's goal: 100 steps of the paper recipe in at most 1 h on one H200
GOALS = {  # "part.figure" -> (bound, "min" or "max")
    "grpo_step.hours_per_100_steps": (GOAL_HOURS_PER_100_STEPS, "max"),
    "grpo_step.sepo_overhead_share": (0.05, "max"),
    "rollout.speedup": (30.0, "min"),
    "decode.roofline_fraction": (0.30, "min"),  # at batch 256
}
# Nominal figures by device name (datasheets). A device not listed is measured against the H200's, labelled.
NOMINAL = {
    "H200": {"bandwidth_bytes_s": 4.8e12, "bf16_dense_flops": 989e12,
             "source": "NVIDIA H200 SXM datasheet: HBM3e 4.8 TB/s; BF16 Tensor Core 989 TFLOP/s dense"},
}
REQUIRED = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "numpy", "pyarrow", "tokenizers")


class CheckError(Exception):
    """The check cannot run or failed: `main` prints the message and exits with `code`."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.message, self.code = message, code


class PartTimedOut(BaseException):
    """A part ran past its time box (raised by SIGALRM). A BaseException, like KeyboardInterrupt, so that the
    libraries' `except Exception` fallbacks inside the part cannot swallow it."""


class PartFailed(Exception):
    """A part ran but its figures show it failed; `figures` are kept in the report."""

    def __init__(self, message: str, figures: dict[str, Any]):
        super().__init__(message)
        self.figures = figures


def log(message: str, start: float | None = None) -> None:
    """One progress line, flushed at once (the device's output is read through a pipe)."""
    stamp = f" +{time.perf_counter() - start:.0f}s" if start is not None else ""
    print(f"[gpu check{stamp}] {message}", flush=True)


def versions() -> dict[str, str]:
    """The versions of the packages the check runs on; a missing one is a CheckError naming the remedy."""
    found = {}
    for name in REQUIRED:
        try:
            found[name] = importlib.import_module(name).__version__
        except ImportError as exc:
            raise CheckError(f"{name} cannot be imported ({exc}); on the H200 install the wheels from "
                             "`make gpu-wheels` first (README, Performance)") from None
    return found


def device_info(cuda: bool) -> dict[str, Any]:
    """The device's name and the nominal bandwidth and bf16 peak the figures are measured against."""
    # deferred: after versions() (see the note above SCHEMA)
    import torch

    name = torch.cuda.get_device_name() if cuda else "cpu"
    known = next((k for k in NOMINAL if k in name), None)
    nominal = NOMINAL[known or "H200"]
    return {"name": name, "nominal_of": known or "H200 (not this device: the smoke test's arithmetic only)",
            "nominal_bandwidth_tb_s": nominal["bandwidth_bytes_s"] / 1e12,
            "nominal_bf16_dense_tflops": nominal["bf16_dense_flops"] / 1e12, "nominal_source": nominal["source"],
            "total_memory_gb": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1) if cuda else None}


DELTA_RULES = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")  # Qwen 3.5's linear attention


def linear_attention_kernels(device: str) -> dict[str, Any]:
    """Which implementation each of Qwen 3.5's gated delta rules runs here, checked before any part.

    transformers wires in the `fla` package's Triton kernels (the carried fla-core wheel) when it imports, and
    otherwise runs its PyTorch reference (correct, "more than an order of magnitude" slower by its own note).
    A wired kernel is run once on small random inputs against the reference; one that fails or disagrees is
    unwired (the module's function set back to the reference), so the parts never meet it. Returns, per rule,
    "fast (...)" or "reference (why)", and `fast`: whether every rule runs a kernel."""
    # deferred: after versions() (see the note above SCHEMA)
    import inspect

    import torch
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen

    out: dict[str, Any] = {}
    for name in DELTA_RULES:
        wired = getattr(qwen, name)
        reference = inspect.unwrap(wired)
        implementation = inspect.getclosurevars(wired).nonlocals.get("implementation", reference)
        if implementation is reference:
            out[name] = "reference (no kernel package importable: fla)"
            continue
        where = f"{implementation.__module__}.{implementation.__name__}"
        try:
            gen = torch.Generator().manual_seed(0)
            b, t, h, d = 2, 80 if name.endswith("chunk_gated_delta_rule") else 1, 4, 64
            q, k, v = (torch.randn(b, t, h, d, generator=gen).to(device=device, dtype=torch.bfloat16) for _ in range(3))
            g = -torch.rand(b, t, h, generator=gen).to(device)  # log-decay, negative
            beta = torch.rand(b, t, h, generator=gen).to(device)
            kwargs = {"g": g, "beta": beta, "initial_state": None, "output_final_state": True,
                      "use_qk_l2norm_in_kernel": True}
            got, want = wired(q, k, v, **kwargs)[0].float(), reference(q, k, v, **kwargs)[0].float()
            error = ((got - want).abs().max() / want.abs().max().clamp_min(1e-6)).item()
            if not error <= 2e-2:
                raise ValueError(f"differs from the reference by {error:.3g} of its largest value")
            out[name] = f"fast ({where}; relative difference {error:.1e})"
        except Exception as exc:
            setattr(qwen, name, reference)
            out[name] = f"reference ({where} failed here, unwired: {type(exc).__name__}: {str(exc)[:200]})"
    out["fast"] = all(out[name].startswith("fast") for name in DELTA_RULES)
    return out


def choose_step_arch(requested: str, tiny: bool, kernels: dict[str, Any]) -> tuple[str, str]:
    """The step part's architecture and why: the recipe's Qwen 3.5 where its linear attention runs a fast kernel
    (or in the smoke test), else the 4B Llama shape, which the device runs at full speed, stated as such."""
    if requested != "auto":
        return requested, "--step-arch"
    if tiny or kernels["fast"]:
        return "qwen3_5", "the recipe's architecture" + ("" if tiny else " (its linear attention on fast kernels)")
    return "llama", ("Qwen 3.5's linear attention would run the slow PyTorch reference here, so the step is "
                     "measured on the 4B Llama shape (full attention, full speed): not the recipe's architecture")


# ------------------------------------------------------------------------------------------------
# the parts


@dataclass
class Context:
    tiny: bool
    cuda: bool
    device: dict[str, Any]
    progress: Callable[[dict[str, Any]], None]  # a running part's partial figures, written at once
    step_arch: str = "qwen3_5"
    deadline: float = float("inf")  # perf_counter time of the part's box's end: the step part stops before it

    @property
    def bandwidth(self) -> float:
        return self.device["nominal_bandwidth_tb_s"] * 1e12

    @property
    def peak_flops(self) -> float:
        return self.device["nominal_bf16_dense_tflops"] * 1e12

    def sync(self) -> None:
        if self.cuda:
            # deferred: after versions() (see the note above SCHEMA)
            import torch

            torch.cuda.synchronize()

    def now(self) -> float:
        self.sync()
        return time.perf_counter()


def _vocab(ctx: Context, arch: str) -> int | None:
    """The real vocabulary at full size (the Llama shape gets Qwen 3.5's), the tokenizer's in the smoke test."""
    # deferred: after versions() (see the note above SCHEMA)
    from sepo.tiny_models import REAL_VOCAB

    return None if ctx.tiny else REAL_VOCAB.get(arch, REAL_VOCAB["qwen3_5"])


def build_model(ctx: Context, arch: str) -> tuple[Any, Any]:
    """A random-weight model of `arch`: 4B-shaped bf16 on cuda with the real vocabulary, or the tiny one."""
    # deferred: after versions() (see the note above SCHEMA)
    import torch

    from sepo.tiny_models import build_tiny_model

    if ctx.tiny:
        return build_tiny_model(arch)
    with torch.device("cuda"):
        return build_tiny_model(arch, shape="4b", dtype=torch.bfloat16, vocab_size=_vocab(ctx, arch))


def model_label(ctx: Context, arch: str, model: Any) -> str:
    vocab = model.config.get_text_config().vocab_size
    return f"{arch}-{'tiny-fp32' if ctx.tiny else '4b-bf16'}-random, vocab {vocab:,}"


def part_grpo_step(ctx: Context) -> dict[str, Any]:
    """One full SEPO-GRPO step of the paper recipe on the HF backend: 1 warm-up + 2 timed steps."""
    # deferred: after versions() (see the note above SCHEMA)
    import torch
    from transformers.trainer_callback import PrinterCallback
    from trl import get_peft_config

    from benchmarks.overhead import Stopwatch, instrumented, per_step
    from sepo.config.recipes import parse_config
    from sepo.grpo.config import SEPOConfig
    from sepo.lora import SEPOModelConfig

    arch = ctx.step_arch
    overrides = {"use_vllm": "false", "report_to": "none", "max_steps": "3", "save_strategy": "no",
                 "keep_best_by_safety": "false", "logging_steps": "1", "disable_tqdm": "true"}
    if ctx.tiny:  # the same recipe, shrunk (SETTINGS: one opponent per pool, few rounds), 8-token turns, fp32 on the CPU
        overrides |= {"use_cpu": "true", "bf16": "false", "max_turn_tokens": "8",
                      "game_params": json.dumps(SETTINGS.tiny_game_params),
                      "pool_mix": json.dumps(SETTINGS.tiny_pool_mix), "gradient_accumulation_steps": "3"}
    watch = Stopwatch(cuda=ctx.cuda)
    model, tok = build_model(ctx, arch)
    tok.padding_side = "left"
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["--config", RECIPE, "--output_dir", tmp]
        for key, value in overrides.items():
            argv += [f"--{key}", value]
        args, model_args = parse_config((SEPOConfig, SEPOModelConfig), argv, prog="gpu check")
        args.model_init_kwargs = None  # the model is built here, not loaded from model_name_or_path
        trainer_cls, step_parts = instrumented(watch)
        trainer = trainer_cls(model=model, args=args, processing_class=tok, peft_config=get_peft_config(model_args),
                              callbacks=[step_parts])
        trainer.accelerator.backward = watch.wrap("backward", trainer.accelerator.backward)
        trainer.remove_callback(PrinterCallback)  # its log dicts would bury the progress lines
        label = model_label(ctx, arch, model) + " + LoRA r16 (q/k/v/o)"

        def figures_of(log_history: list[dict[str, Any]]) -> dict[str, Any]:
            steps = step_parts.steps
            logs = [h for h in log_history if "sepo/time/generation_s" in h][: len(steps)]
            return {"model": label, "arch": arch, "device": ctx.device["name"], "recipe": RECIPE, "backend": "hf",
                    "overrides": overrides, "max_turn_tokens": args.max_turn_tokens,
                    "episodes_per_step": args.per_device_train_batch_size * args.gradient_accumulation_steps,
                    **per_step(steps, logs),
                    **({"peak_gpu_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2)} if ctx.cuda else {})}

        trainer.add_callback(step_progress(step_parts, ctx, figures_of))
        if ctx.cuda:
            torch.cuda.reset_peak_memory_stats()
        trainer.train()
        figures = figures_of(trainer.state.log_history)
    del trainer, model
    if figures["warmup_steps"] < 1 or figures["measured_steps"] < 2:
        timed = figures["measured_steps"] if figures["warmup_steps"] else 0
        raise PartFailed(f"only {timed} timed step(s) after a warm-up (its time box ran out); the figures need 2",
                         figures)
    if figures["prefix_cache"]["stored"] == 0:
        raise PartFailed(f"KV reuse off: no rollout of the step stored its cache ({figures['prefix_cache']})", figures)
    return figures


def step_progress(step_parts: Any, ctx: Context, figures: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> Any:
    """A callback that, after every step's log entry, reports the steps so far and, from the first timed step
    on, the per-step figures so far (`figures(log_history)`): what a kill during a later step leaves. A step
    that would end past `ctx.deadline` (at the last step's pace) is not started: training stops, noted."""
    # deferred: after versions() (see the note above SCHEMA)
    from transformers import TrainerCallback

    class StepProgress(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            steps = step_parts.steps
            if not logs or "sepo/time/generation_s" not in logs or not steps:
                return
            partial: dict[str, Any] = {"steps_done": len(steps), "step_s_so_far": [round(s["step"], 3) for s in steps]}
            if len(steps) >= 2:  # a warm-up and at least one timed step
                partial["figures_so_far"] = figures(state.log_history)
            if state.global_step < args.max_steps and time.perf_counter() + steps[-1]["step"] > ctx.deadline:
                control.should_training_stop = True
                partial["stopped"] = (f"after {len(steps)} of {args.max_steps} steps: one more at "
                                      f"{steps[-1]['step']:.0f} s would end past its time box")
            ctx.progress(partial)

    return StepProgress()


def prediction(step: dict[str, Any] | None, tiny: bool) -> dict[str, Any] | None:
    """100 steps of the paper recipe on the HF backend, from the step part's per-step figures."""
    if not step or not step.get("seconds_per_step"):
        return None
    s = step["seconds_per_step"]
    own = step["sepo_rollout_s"] + step["sepo_rewards_s"] + step["sepo_advantages_s"]
    parts = {"generation": step["generation_s"], "sepo_own": own, "logprob_forward": step["logprob_forward_s"],
             "backward": step["backward_s"], "optimizer": step["optimizer_s"], "other": step["other_s"]}
    hours = 100 * s / 3600
    return {
        "of": f"100 steps of {RECIPE}" + (" (shrunk for the smoke test: not a prediction)" if tiny else ""),
        "model": step["model"], "backend": "hf", "slower_path": True,
        "note": "the recipe generates with vLLM colocate (use_vllm: true), which cannot travel to this device; "
                "this is the HF generate path, the slower one, so the recipe's own time should be lower",
        "from_measured_steps": step["measured_steps"], "seconds_per_step": s, "hours_per_100_steps": hours,
        "share": {k: v / s for k, v in parts.items()}, "seconds_per_step_by_part": parts,
        "peak_gpu_memory_gb": step.get("peak_gpu_memory_gb"),
        "goal_hours_per_100_steps": GOAL_HOURS_PER_100_STEPS, "meets_goal": hours <= GOAL_HOURS_PER_100_STEPS,
        "excludes": "model loading, checkpoint saves (save_steps 25) and the keep_best_by_safety evaluations",
    }


def _rollout_part(ctx: Context, arch: str, arms: tuple[str, ...]) -> dict[str, Any]:
    # deferred: after versions() (see the note above SCHEMA)
    from benchmarks import rollout

    if ctx.tiny:
        figures = rollout.run(episodes=4, rounds=2, max_new_tokens=8, reference_episodes=2, arch=arch, arms=arms)
    else:
        figures = rollout.run(episodes=128, rounds=4, max_new_tokens=256, gpu=True, arch=arch, arms=arms,
                              reference_episodes=1, vocab_size=_vocab(ctx, arch))
    counts = figures["prefix_cache"]
    if counts["stored"] == 0:
        raise PartFailed(f"KV reuse off: the batched arm never stored its cache ({counts})", figures)
    return figures


def part_rollout(ctx: Context) -> dict[str, Any]:
    return _rollout_part(ctx, "llama", ("reuse", "no_reuse", "reference"))


def part_rollout_arch(arch: str) -> Callable[[Context], dict[str, Any]]:
    return lambda ctx: _rollout_part(ctx, arch, ("reuse",))


def weight_bytes_read(model: Any) -> int:
    """The bytes of weights one decode step reads: every parameter but the input embedding table (a step
    gathers only its tokens' rows of it)."""
    embed = model.get_input_embeddings().weight
    return sum(p.numel() * p.element_size() for p in model.parameters() if p is not embed)


def kv_bytes_per_token(model: Any, dtype_bytes: int) -> int:
    cfg = model.config.get_text_config()
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * dtype_bytes


TIMING_REPEATS = 3  # decode_arm's calls per timed length


def decode_arm(ctx: Context, backend: Any, batch: int, prompt_len: int, new_tokens: int) -> dict[str, Any]:
    """Decode tokens/s of `HFBackend.generate` inside a prefix session at `batch` rows (random prompts of
    `prompt_len` tokens, `new_tokens` new ones): a prefill-only call is timed apart and subtracted, each the fastest
    of `TIMING_REPEATS` calls, the two kinds taken in turn so that a host's load falls on both alike. Noise only
    adds time, but it need not add it to every call: on a busy host and a tiny model (the smoke test on a loaded
    CPU) the difference can still come out at or below 0. Roofline: every decode step reads the weights and every
    row's key/value cache at the mean context length."""
    # deferred: after versions() (see the note above SCHEMA)
    import torch

    vocab = backend.model.config.get_text_config().vocab_size
    gen = torch.Generator().manual_seed(batch)

    def prompts() -> list[Prompt]:  # fresh random rows: no call continues a stored one, so each is a prefill
        return [Prompt(ids=torch.randint(10, vocab, (prompt_len,), generator=gen).tolist()) for _ in range(batch)]

    def timed(n: int, cache: Any) -> tuple[float, int]:
        rows = prompts()
        start = ctx.now()
        out = backend.generate(rows, SamplingSpec(temperature=1.0, top_p=1.0, max_new_tokens=n, seed=0), session=cache)
        return ctx.now() - start, max(len(g.token_ids) for g in out)

    with backend.prefix_session() as cache:
        timed(2, cache)  # warm-up; a full-attention model's cache is stored, so later calls preallocate theirs
        pairs = [(timed(1, cache)[0], timed(new_tokens, cache)) for _ in range(TIMING_REPEATS)]
        prefill_s = min(prefill for prefill, _ in pairs)
        total_s, steps = min(t for _, (t, _) in pairs), pairs[0][1][1]
        counts = dict(cache.counts)
    decode_s = total_s - prefill_s
    dtype_bytes = next(backend.model.parameters()).element_size()
    weights = weight_bytes_read(backend.model)
    step_bytes = weights + batch * (prompt_len + steps / 2) * kv_bytes_per_token(backend.model, dtype_bytes)
    tokens_per_s = batch * (steps - 1) / decode_s
    roofline = batch * ctx.bandwidth / step_bytes
    return {"batch": batch, "prompt_len": prompt_len, "new_tokens": steps, "prefill_s": prefill_s,
            "decode_s": decode_s, "decode_tokens_per_s": tokens_per_s, "ms_per_decode_step": 1e3 * decode_s / (steps - 1),
            "kv_gb_per_step": (step_bytes - weights) / 1e9, "roofline_tokens_per_s": roofline,
            "roofline_fraction": tokens_per_s / roofline, "prefix_cache": counts}


def part_decode(ctx: Context) -> dict[str, Any]:
    """Decode through the project's HF backend at batch 1 and at batch 256 (smoke test: 1 and 8)."""
    # deferred: after versions() (see the note above SCHEMA)
    import torch

    from sepo.backends.hf import HFBackend

    model, tok = build_model(ctx, "llama")
    backend = HFBackend(model.eval(), tok)
    sizes = [(1, 16, 8), (8, 16, 8)] if ctx.tiny else [(1, 256, 64), (256, 256, 64)]
    if ctx.cuda:
        torch.cuda.reset_peak_memory_stats()
    arms = [decode_arm(ctx, backend, *size) for size in sizes]
    big = arms[-1]
    counts = {k: sum(a["prefix_cache"][k] for a in arms) for k in arms[0]["prefix_cache"]}
    figures = {
        "model": model_label(ctx, "llama", model), "backend": "HFBackend.generate (prefix session)",
        "weight_gb": weight_bytes_read(model) / 1e9, "bandwidth_tb_s": ctx.bandwidth / 1e12,
        "batches": arms, "prefix_cache": counts,
        # the batch-256 arm's figures at the top level, for the goal and the results table
        **{k: big[k] for k in ("batch", "decode_tokens_per_s", "roofline_tokens_per_s", "roofline_fraction")},
    }
    if counts["stored"] == 0:
        raise PartFailed(f"the backend never stored a full-attention cache ({counts})", figures)
    return figures


def attention_flops(model: Any, batch: int, length: int) -> float:
    """Causal attention's FLOPs in one forward: scores and values, 2 x batch x heads x length^2 x head_dim a
    layer (half of the full square each, 2 FLOPs a multiply-add)."""
    cfg = model.config.get_text_config()
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return cfg.num_hidden_layers * 2 * batch * cfg.num_attention_heads * length**2 * head_dim


def forward_flops(model: Any, batch: int, length: int, logits_tokens: int) -> float:
    """Model FLOPs of one forward: 2 x (matmul parameters) per token for the body, 2 x the output projection
    per token whose logits are computed, and causal attention (`attention_flops`)."""
    embed, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    body = sum(p.numel() for p in model.parameters() if p.dim() == 2 and p is not embed and p is not head)
    return 2 * body * batch * length + 2 * head.numel() * logits_tokens + attention_flops(model, batch, length)


def part_flops(ctx: Context) -> dict[str, Any]:
    """Prefill FLOP/s (no grad, last-token logits, as generate runs it) and the backward pass's FLOP/s with a
    frozen base and LoRA r16 on q/k/v/o (as the recipe trains; no gradient checkpointing here), with MFU."""
    # deferred: after versions() (see the note above SCHEMA)
    import torch
    from peft import LoraConfig, get_peft_model

    model, _tok = build_model(ctx, "llama")
    vocab = model.config.vocab_size
    prefill_b, train_b, length = (2, 2, 32) if ctx.tiny else (8, 2, 2048)
    gen = torch.Generator().manual_seed(0)
    device = next(model.parameters()).device

    def ids(batch: int) -> torch.Tensor:
        return torch.randint(10, vocab, (batch, length), generator=gen).to(device)

    model.eval()
    prefill = []
    with torch.inference_mode():
        for _ in range(3):  # 1 warm-up, 2 timed
            x = ids(prefill_b)
            start = ctx.now()
            model(input_ids=x, logits_to_keep=1)
            prefill.append(ctx.now() - start)
    prefill_s = sum(prefill[1:]) / 2
    prefill_flops = forward_flops(model, prefill_b, length, prefill_b)
    # counted on the base model, before LoRA's matrices join its parameters (their FLOPs are left out)
    fwd = forward_flops(model, train_b, length, train_b * length)
    attention = attention_flops(model, train_b, length)
    lora = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, lora)
    peft_model.train()
    forward, backward = [], []
    for _ in range(3):
        x = ids(train_b)
        start = ctx.now()
        loss = peft_model(input_ids=x, labels=x).loss
        mid = ctx.now()
        loss.backward()
        end = ctx.now()
        forward.append(mid - start)
        backward.append(end - mid)
        peft_model.zero_grad(set_to_none=True)
    # frozen base: the backward computes input gradients only (one matmul per forward matmul) plus attention's
    # backward (four products to the forward's two); the LoRA weight gradients are left out (r16: < 1 %)
    bwd_flops = (fwd - attention) + 2 * attention
    backward_s, forward_s = sum(backward[1:]) / 2, sum(forward[1:]) / 2
    peak = ctx.peak_flops
    return {
        "model": model_label(ctx, "llama", model), "length": length,
        "prefill": {"batch": prefill_b, "seconds": prefill_s, "flops": prefill_flops,
                    "tflops_per_s": prefill_flops / prefill_s / 1e12, "mfu": prefill_flops / prefill_s / peak},
        "train_forward": {"batch": train_b, "seconds": forward_s, "flops": fwd,
                          "tflops_per_s": fwd / forward_s / 1e12, "mfu": fwd / forward_s / peak},
        "backward": {"batch": train_b, "seconds": backward_s, "flops": bwd_flops,
                     "tflops_per_s": bwd_flops / backward_s / 1e12, "mfu": bwd_flops / backward_s / peak},
        "peak_tflops_per_s": peak / 1e12,
        "counting": "2 x matmul parameters per token, output projection only where logits are taken, causal "
                    "attention 2 x b x heads x L^2 x head_dim per layer; backward with a frozen base = input "
                    "gradients (1 x the matmuls) + 2 x the attention; LoRA's own FLOPs left out",
    }


@dataclass
class Part:
    name: str
    arch: str
    estimate_s: float  # at full size on an H200: a guess until a device has run it (no GPU has yet)
    estimate_tiny_s: float  # the smoke test on this project's 2-core CPU
    box_s: float  # its time box on the H200: stopped (status "timed_out") when it runs past it
    box_tiny_s: float  # the smoke test's (generous: a busy 2-core CPU)
    run: Callable[[Context], dict[str, Any]]
    generates: bool = True
    trains: bool = False


def parts(step_arch: str = "qwen3_5") -> list[Part]:
    """Every part in order of value, with its estimate and time box (seconds: H200, then smoke test). The boxes
    add up to more than BUDGET_S: the last parts run only if the first ones finish early."""
    return [
        Part("grpo_step", step_arch, 150, 40, 170, 240, part_grpo_step, trains=True),
        Part("rollout", "llama", 75, 10, 90, 120, part_rollout),
        Part("decode", "llama", 25, 5, 30, 60, part_decode),
        Part("flops", "llama", 20, 5, 25, 60, part_flops, generates=False),
        Part("rollout_qwen3_5", "qwen3_5", 40, 10, 45, 120, part_rollout_arch("qwen3_5")),
        Part("rollout_gemma4", "gemma4", 40, 10, 45, 120, part_rollout_arch("gemma4")),
    ]


# ------------------------------------------------------------------------------------------------
# running, recording


def _raise_timed_out(signum: int, frame: Any) -> None:
    raise PartTimedOut()


def missed_goals(by_part: dict[str, dict[str, Any]]) -> list[str]:
    """One message per goal of GOALS that the parts' figures miss (or lack)."""
    out = []
    for key, (bound, kind) in GOALS.items():
        part, name = key.split(".")
        value = by_part.get(part, {}).get(name)
        if value is None:
            out.append(f"{key}: not measured")
        elif (value < bound) if kind == "min" else (value > bound):
            out.append(f"{key} = {value:.3g}, goal {'>=' if kind == 'min' else '<='} {bound:g}")
    return out


PROG = "python benchmarks/gpu/check.py"


@dataclass
class GPUCheckConfig:
    """The keys of the check's command line (read by the project's recipe parser; `--git-sha` and `--git_sha`
    are the same flag)."""

    out: str = field(default_factory=lambda: os.environ.get("OUT", "."),
                     metadata={"help": "folder for the JSON files (default $OUT, else the working directory)"})
    tiny: bool = field(default=False, metadata={"help": "tiny model and sizes (with --cpu: the smoke test)"})
    cpu: bool = field(default=False, metadata={"help": "run on the CPU (only with --tiny)"})
    git_sha: str | None = field(default=None, metadata={
        "help": "the commit measured (default: git rev-parse, if git is there)"})
    budget_s: float = field(default=BUDGET_S, metadata={"help": "no part starts after this many seconds"})
    parts: str | None = field(default=None, metadata={
        "help": "run these parts, comma-separated, in this order (default every part, in order of value): "
                f"{', '.join(p.name for p in parts())}"})
    step_arch: Literal["auto", "qwen3_5", "llama", "gemma4"] = field(default="auto", metadata={
        "help": "the architecture of the grpo_step part (auto: the recipe's Qwen 3.5 where its linear attention "
                "runs fast kernels, else the 4B Llama shape, stated)"})


class Check:
    """The run's state and its two files, rewritten whole (atomically) at every change."""

    def __init__(self, args: GPUCheckConfig, found: dict[str, str], cuda: bool, start: float,
                 kernels: dict[str, Any]):
        self.args, self.cuda, self.start = args, cuda, start
        self.out = Path(args.out)
        self.device = device_info(cuda)
        step_arch, why = choose_step_arch(args.step_arch, args.tiny, kernels)
        every = {p.name: p for p in parts(step_arch)}
        self.parts = [every[name] for name in args.parts.split(",")] if args.parts else list(every.values())
        self.budget = args.budget_s
        self.doc: dict[str, Any] = {
            "schema": SCHEMA, "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": " ".join(sys.argv), "git_sha": args.git_sha or git_sha(),
            "git_sha_from": "--git-sha" if args.git_sha else "git rev-parse here",
            "tiny": args.tiny, "gpu": cuda, "machine": machine_info(cuda), "device": self.device,
            "versions": found, "budget_s": self.budget, "linear_attention_kernels": kernels,
            "step_arch": {"arch": step_arch, "why": why},
            "estimate_s": {p.name: self.estimate(p) for p in self.parts},
            "parts": [{"part": p.name, "arch": p.arch, "status": "pending"} for p in self.parts],
            "prediction": None, "goals": {k: {"bound": b, "kind": kind} for k, (b, kind) in GOALS.items()},
            "goals_enforced": not args.tiny, "missed_goals": None, "complete": False, "wall_s": 0.0,
        }
        self.running: dict[str, Any] | None = None

    def estimate(self, part: Part) -> float:
        return part.estimate_tiny_s if self.args.tiny else part.estimate_s

    def box(self, part: Part) -> float:
        return part.box_tiny_s if self.args.tiny else part.box_s

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def by_part(self) -> dict[str, dict[str, Any]]:
        """Each finished part's figures by name (with the prediction's under grpo_step)."""
        out = {e["part"]: dict(e.get("figures", {})) for e in self.doc["parts"] if e.get("figures")}
        if self.doc["prediction"] and "grpo_step" in out:
            out["grpo_step"]["hours_per_100_steps"] = self.doc["prediction"]["hours_per_100_steps"]
        return out

    def write(self) -> None:
        self.doc["wall_s"] = round(self.elapsed(), 1)
        write_json_atomic(self.out / "gpu_check.json", self.doc)
        got = self.by_part()
        figures = {k: got[p] for k, p in (("overhead", "grpo_step"), ("rollout", "rollout"), ("decode", "decode"))
                   if p in got}
        line = {"date": self.doc["date"], "machine": self.doc["machine"], "git_sha": self.doc["git_sha"],
                "quick": self.args.tiny, "gpu": self.cuda, "parts": list(figures), "figures": figures,
                "errors": {e["part"]: e["error"] for e in self.doc["parts"] if e.get("error")}}
        write_jsonl_atomic(self.out / "results.jsonl", [line])

    def print_estimate(self) -> None:
        total = 0.0
        log(f"estimate before starting ({'smoke test' if self.args.tiny else 'H200 guesses: no GPU has run this'}); "
            f"no part starts or runs after {self.budget:.0f} s, none runs past its time box:")
        for p in self.parts:
            total += self.estimate(p)
            fits = "" if total <= self.budget else "  <- over the budget at this estimate: will be skipped unless faster"
            print(f"    {p.name:<16} {p.arch:<8} ~{self.estimate(p):>4.0f} s, box {self.box(p):>4.0f} s   "
                  f"(cumulative {total:>4.0f} s){fits}", flush=True)

    def run(self) -> None:
        self.write()
        self.print_estimate()
        scale_num = scale_den = 0.0
        for part, entry in zip(self.parts, self.doc["parts"]):
            left = self.budget - self.elapsed()
            scale = min(4.0, max(0.5, scale_num / scale_den)) if scale_den else 1.0
            expected = self.estimate(part) * scale
            if left <= 0 or expected > left:
                why = (f"not started: the {self.budget:.0f} s budget was spent" if left <= 0 else
                       f"skipped: its estimate {expected:.0f} s (x{scale:.2f}, from the finished parts) "
                       f"would overrun the {left:.0f} s left of the {self.budget:.0f} s budget")
                entry.update(status="skipped", note=why)
                log(f"{part.name} ({part.arch}) {why}", self.start)
                self.write()
                continue
            self.run_part(part, entry)
            scale_num += entry["seconds"]
            scale_den += self.estimate(part)
        by_part = self.by_part()
        self.doc["missed_goals"] = [] if self.args.tiny else missed_goals(by_part)
        self.doc["complete"] = True
        self.write()

    def run_part(self, part: Part, entry: dict[str, Any]) -> None:
        # deferred: after versions() (see the note above SCHEMA)
        import torch

        entry.update(status="running", started_at_s=round(self.elapsed(), 1))
        self.running = entry
        self.write()
        log(f"{part.name} ({part.arch}) ...", self.start)

        def progress(partial: dict[str, Any]) -> None:
            entry["progress"] = partial
            log(f"{part.name}: " + ", ".join(f"{k} {v}" for k, v in partial.items() if k != "figures_so_far"),
                self.start)
            if part.trains and partial.get("figures_so_far"):  # provisional until the part ends
                self.doc["prediction"] = {**prediction(partial["figures_so_far"], self.args.tiny), "provisional": True}
            self.write()

        t0 = time.perf_counter()
        deadline = min(t0 + self.box(part), self.start + self.budget)
        ctx = Context(tiny=self.args.tiny, cuda=self.cuda, device=self.device, progress=progress,
                      step_arch=part.arch, deadline=deadline)
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        # the hard stop: the step part stops itself at `deadline` (it starts no step that would end past it), the
        # others are interrupted there
        hard_stop = max(0.01, deadline + (GRACE_S if part.trains else 0.0) - time.perf_counter())
        previous = signal.signal(signal.SIGALRM, _raise_timed_out)
        signal.setitimer(signal.ITIMER_REAL, hard_stop)
        try:
            figures = part.run(ctx)
            entry.update(status="ok", figures=figures)
        except PartTimedOut:
            partial = entry.get("progress", {}).get("figures_so_far")
            entry.update(status="timed_out", error=f"stopped at its time box ({hard_stop:.0f} s)",
                         **({"figures": partial} if partial else {}))
        except PartFailed as exc:
            entry.update(status="failed", error=str(exc), figures=exc.figures)
        except Exception as exc:  # one broken part must not lose the others' figures
            traceback.print_exc()
            entry.update(status="failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        entry["seconds"] = round(time.perf_counter() - t0, 1)
        if stopped := entry.pop("progress", {}).get("stopped"):
            entry["note"] = f"stopped {stopped}"
        if self.cuda:
            entry["peak_gpu_memory_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
            entry.setdefault("figures", {})["peak_gpu_memory_gb"] = entry["peak_gpu_memory_gb"]
        if part.generates and "figures" in entry:
            entry["prefix_cache"] = entry["figures"].get("prefix_cache")
        if part.trains and entry.get("figures"):
            entry["seconds_per_step"] = entry["figures"].get("seconds_per_step")
            self.doc["prediction"] = prediction(entry["figures"], self.args.tiny)
        self.running = None
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()
        self.write()
        log(f"{part.name} {entry['status']} in {entry['seconds']:.0f} s" + (f": {entry['error']}" if entry.get("error") else ""),
            self.start)

    def killed(self, signum: int) -> None:
        """SIGTERM (timeout's first signal): mark the part being run, write, and leave."""
        if self.running is not None:
            self.running.update(status="killed", error=f"signal {signum} after {self.elapsed():.0f} s")
        self.doc["killed_by_signal"] = signum
        self.write()

    def summary(self) -> list[str]:
        """The problems the exit status reports: failed parts and missed goals."""
        problems = [f"part {e['part']} {e['status']}: {e.get('error', '')}" for e in self.doc["parts"]
                    if e["status"] in ("failed", "killed", "timed_out")]
        return problems + [f"goal missed: {m}" for m in self.doc["missed_goals"] or []]


def main(argv: list[str] | None = None) -> int:
    start = time.perf_counter()
    (args,) = RecipeParser((GPUCheckConfig,), prog=PROG, description=__doc__.splitlines()[0]).parse(
        sys.argv[1:] if argv is None else argv)
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # every line out at once, even through a pipe
    try:
        if args.tiny != args.cpu:
            raise CheckError("--tiny and --cpu go together (the smoke test); the real check takes neither", 2)
        unknown = set(args.parts.split(",")) - {p.name for p in parts()} if args.parts else set()
        if unknown:
            raise CheckError(f"unknown part(s) {sorted(unknown)}; choose from {[p.name for p in parts()]}", 2)
        found = versions()
        # deferred: after versions() (see the note above SCHEMA)
        import torch

        if not args.cpu and not torch.cuda.is_available():
            raise CheckError("no CUDA device: this check needs the GPU (torch.cuda.is_available() is False); "
                             "it does not fall back to the CPU (use --tiny --cpu for the smoke test)", 2)
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        kernels = linear_attention_kernels("cpu" if args.cpu else "cuda")
        log("Qwen 3.5 linear attention: " + "; ".join(f"{k}: {v}" for k, v in kernels.items() if k != "fast"))
        check = Check(args, found, cuda=not args.cpu, start=start, kernels=kernels)
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: (check.killed(signum), sys.exit(128 + signum)))
        try:
            check.run()
        finally:
            signal.signal(signal.SIGTERM, previous)
        report(check)
        if problems := check.summary():
            raise CheckError("; ".join(problems), 1)
    except CheckError as exc:
        print(f"[gpu check] FAILED: {exc.message}", file=sys.stderr, flush=True)
        return exc.code
    log("every goal met" if not args.tiny else "smoke test passed")
    return 0


def report(check: Check) -> None:
    """Print each part's status and the figures table."""
    # deferred: after versions() (see the note above SCHEMA)
    from benchmarks.suite import table

    for e in check.doc["parts"]:
        extra = e.get("note") or e.get("error") or ""
        print(f"    {e['part']:<16} {e['arch']:<8} {e['status']:<8} {e.get('seconds', '-')!s:>6} s  {extra}", flush=True)
    got = check.by_part()
    print(table({k: got[p] for k, p in (("overhead", "grpo_step"), ("rollout", "rollout"), ("decode", "decode"))
                 if p in got}), flush=True)
    if pred := check.doc["prediction"]:
        print(f"[gpu check] prediction: {pred['hours_per_100_steps']:.2f} h per 100 steps of the recipe on the HF "
              f"backend (the slower path; goal <= {pred['goal_hours_per_100_steps']:g} h with the recipe's vLLM)",
              flush=True)
    log(f"wrote {check.out / 'gpu_check.json'} and {check.out / 'results.jsonl'} ({check.elapsed():.0f} s in all)")


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
