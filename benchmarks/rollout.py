"""Benchmark batched lock-step rollouts against one-episode-at-a-time generation.

The method's reference implementation generated one sample at a time with HF `generate`, re-encoding the
conversation every round. Here the same rollout code plays the same IPD episodes (same specs, same sampling
settings) three ways: as one lock-step batch reusing each round's key/value cache in the next round (ours),
as one batch re-encoding every round (batching alone), and episode by episode re-encoding every round (the
reference). The headline ratio is reference / ours; the other two ratios split it into its two causes.

    python -m benchmarks.rollout [--episodes 64] [--model tiny|default]
    python -m benchmarks.rollout --gpu [--arch llama|qwen3_5|gemma4]   # 4B-shaped, bf16, cuda

`--gpu` builds a random-weight model with 4B-class dimensions in bf16 on the GPU, times the batched rollouts
of all episodes and the one-at-a-time reference on `--reference-episodes` of them (extrapolated, labelled),
and prints generated tokens/s and peak GPU memory. It is self-contained (no downloads) and sized to finish in
a few minutes on an H200. CPU runs use one torch thread by default (`--threads`): on small shared machines
OpenMP spin-waiting otherwise dominates tiny-model timings. Prefix reuse applies to full-attention models
(the Llama arch here, and the embedded SmolLM2); Qwen 3.5 and Gemma 4 re-encode (see sepo/backends/prefix_cache.py).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from sepo.backends.hf import HFBackend
from sepo.generation import SamplingSpec
from sepo.recipes import RecipeParser
from sepo.rollout.engine import EpisodeSpec, play_episodes
from sepo.subcommands import report_usage_errors
from sepo.tiny_models import ARCHS, build_tiny_model

PROG = "python -m benchmarks.rollout"

OPPONENTS = ("tit_for_tat", "generous_tit_for_tat", "mixed", "grim_trigger")


def _backend(model: str, gpu: bool, arch: str, vocab_size: int | None = None) -> HFBackend:
    if model == "default":
        return HFBackend.from_model("default", device="cuda" if gpu else "cpu")
    if gpu:
        with torch.device("cuda"):
            net, tok = build_tiny_model(arch, shape="4b", dtype=torch.bfloat16, vocab_size=vocab_size)
        return HFBackend(net.eval(), tok)
    net, tok = build_tiny_model(arch, vocab_size=vocab_size)
    return HFBackend(net.eval(), tok)


def _specs(episodes: int, rounds: int) -> list[EpisodeSpec]:
    return [
        EpisodeSpec(
            "ipd", {"num_rounds": rounds}, "training", OPPONENTS[i % len(OPPONENTS)], seed=i, seat=i % 2
        )
        for i in range(episodes)
    ]


def _sync(gpu: bool) -> None:
    if gpu:
        torch.cuda.synchronize()


def _model_tokens(results) -> int:
    return sum(t.n_model_tokens + t.n_forced_tokens for rec, _ in results for t in rec.turns)


ARMS = ("reuse", "no_reuse", "reference")


def run(
    episodes: int = 64,
    model: str = "tiny",
    rounds: int = 8,
    max_new_tokens: int = 32,
    gpu: bool = False,
    arch: str = "llama",
    reference_episodes: int | None = None,
    vocab_size: int | None = None,
    arms: tuple[str, ...] = ARMS,
    backend: HFBackend | None = None,
) -> dict[str, Any]:
    """Time batched vs one-at-a-time rollouts of `episodes` IPD episodes; returns the measurements.

    reference_episodes: time the one-at-a-time reference on this many episodes only and extrapolate
        linearly to `episodes` (default: all of them on CPU, 4 with --gpu).
    vocab_size: the random model's vocabulary (default the tokenizer's; see sepo.tiny_models.REAL_VOCAB).
    arms: which of ARMS to time ("reuse" always runs; an arm left out has None figures).
    backend: an HFBackend to use instead of building one from `model`/`arch`.
    The batched arm's `prefix_cache` counts (stored, refused, hits, misses) say whether KV reuse happened.
    """
    if gpu and not torch.cuda.is_available():
        raise SystemExit("--gpu needs a CUDA device")
    if reference_episodes is None:
        reference_episodes = min(episodes, 4) if gpu else episodes
    torch.manual_seed(0)
    backend = backend or _backend(model, gpu, arch, vocab_size)
    sampling = SamplingSpec(temperature=0.8, top_p=0.95, max_new_tokens=max_new_tokens, seed=0)
    specs = _specs(episodes, rounds)
    play_episodes(specs[:2], backend, backend.renderer, sampling)  # warm-up (kernels, caches)
    if gpu:
        torch.cuda.reset_peak_memory_stats()

    def timed(specs_: list[EpisodeSpec], reuse: bool) -> tuple[list, float]:
        _sync(gpu)
        start = time.perf_counter()
        out = play_episodes(specs_, backend, backend.renderer, sampling, reuse_prefix=reuse)
        _sync(gpu)
        return out, time.perf_counter() - start

    before = dict(backend.prefix_counts)
    batched, batched_s = timed(specs, True)
    counts = {k: n - before.get(k, 0) for k, n in backend.prefix_counts.items()}
    peak_gb = torch.cuda.max_memory_allocated() / 2**30 if gpu else None
    no_reuse_s = timed(specs, False)[1] if "no_reuse" in arms else None
    sequential, sequential_s = [], None
    if "reference" in arms:
        sequential_s = 0.0
        for spec in specs[:reference_episodes]:
            result, seconds = timed([spec], False)
            sequential.append(result[0])
            sequential_s += seconds
        sequential_s *= episodes / reference_episodes

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 2) if a is not None and b is not None else None

    tokens = _model_tokens(batched)
    return {
        "model": f"{arch}-4b-bf16-random"
        if gpu and model == "tiny"
        else (model if model == "default" else arch),
        "vocab_size": backend.model.config.get_text_config().vocab_size,
        "device": torch.cuda.get_device_name() if gpu else "cpu",
        "episodes": episodes,
        "rounds": rounds,
        "max_new_tokens": max_new_tokens,
        "batched_s": round(batched_s, 3),
        "batched_no_reuse_s": round(no_reuse_s, 3) if no_reuse_s is not None else None,
        "prefix_reuse_speedup": ratio(no_reuse_s, batched_s),
        "batching_speedup": ratio(sequential_s, no_reuse_s),
        "one_at_a_time_s": round(sequential_s, 3) if sequential_s is not None else None,
        "one_at_a_time_extrapolated_from": reference_episodes if sequential_s is not None else None,
        "speedup": ratio(sequential_s, batched_s),
        "model_tokens": tokens,
        "batched_tokens_per_s": round(tokens / batched_s, 1),
        "one_at_a_time_tokens_per_s": round(
            _model_tokens(sequential) / (sequential_s * reference_episodes / episodes), 1
        ) if sequential_s else None,
        "fallback_rate": round(
            sum(rec.n_fallbacks for rec, _ in batched) / max(1, sum(len(rec.turns) for rec, _ in batched)), 3
        ),
        "prefix_cache": counts,  # the batched arm's KV reuse: stored / refused stores, hits / misses of calls
        "peak_gpu_memory_gb": round(peak_gb, 2) if peak_gb is not None else None,
    }


def bench(quick: bool, gpu: bool) -> dict[str, Any]:
    """The suite's rollout part: 64 IPD episodes (quick: 8 short ones)."""
    if quick:
        return run(episodes=8, rounds=2, max_new_tokens=8, gpu=gpu, reference_episodes=4 if gpu else None)
    return run(episodes=64, gpu=gpu)


@dataclass
class RolloutConfig:
    """The keys of `python -m benchmarks.rollout` (command line or `--config` recipe)."""

    episodes: int = field(default=64, metadata={"help": "IPD episodes of the batched arms"})
    model: str = field(default="tiny", metadata={"help": "a tiny random-weight model or the embedded SmolLM2",
                                                  "choices": ("tiny", "default")})
    rounds: int = field(default=8, metadata={"help": "IPD rounds per episode"})
    max_new_tokens: int = field(default=32, metadata={"help": "the token budget of a turn"})
    gpu: bool = field(default=False, metadata={"help": "4B-shaped random bf16 model on cuda"})
    arch: str = field(default="llama", metadata={"help": "the tiny model's architecture", "choices": ARCHS})
    reference_episodes: int | None = field(
        default=None, metadata={"help": "episodes of the one-at-a-time arm, extrapolated to all (default: all; 4 "
                                         "with --gpu)"})
    threads: int = field(default=1, metadata={"help": "torch intra-op CPU threads (both arms)"})


def parser() -> RecipeParser:
    """The command line of the rollout benchmark."""
    return RecipeParser((RolloutConfig,), prog=PROG, description=__doc__.split("\n\n")[0])


def main(argv: list[str] | None = None) -> int:
    (args,) = parser().parse(sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(args.threads)
    result = run(
        episodes=args.episodes,
        model=args.model,
        rounds=args.rounds,
        max_new_tokens=args.max_new_tokens,
        gpu=args.gpu,
        arch=args.arch,
        reference_episodes=args.reference_episodes,
    )
    print(
        f"batched lock-step : {result['batched_s']:.2f} s  ({result['batched_tokens_per_s']} model tokens/s)"
    )
    print(f"  without prefix KV reuse: {result['batched_no_reuse_s']:.2f} s")
    extrapolated = result["one_at_a_time_extrapolated_from"]
    note = f", extrapolated from {extrapolated} episodes" if extrapolated != result["episodes"] else ""
    print(
        f"one at a time     : {result['one_at_a_time_s']:.2f} s  ({result['one_at_a_time_tokens_per_s']} tokens/s{note})"
    )
    print(f"speedup           : {result['speedup']}x")
    if result["peak_gpu_memory_gb"] is not None:
        print(f"peak GPU memory   : {result['peak_gpu_memory_gb']} GiB")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
