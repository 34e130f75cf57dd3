"""Benchmark batched lock-step rollouts against one-episode-at-a-time generation.

The method's reference implementation generated one sample at a time with HF `generate`, re-encoding the
conversation every round. Here the same rollout code plays the same episodes of the game that
configs/benchmarks/rollout.yaml names (same specs, same sampling settings) three ways: as one lock-step batch
reusing each round's key/value cache in the next round (ours), as one batch re-encoding every round (batching
alone), and episode by episode re-encoding every round (the reference). The headline ratio is reference / ours; the other two ratios split it into its two causes.

    python -m benchmarks.rollout [--episodes 64] [--model tiny|default]
    python -m benchmarks.rollout --gpu [--arch llama|qwen3_5|gemma4]   # 4B-shaped, bf16, cuda
    python -m benchmarks.rollout --planning   # the prefix cache's planning alone, batch 32 to 256
    python -m benchmarks.rollout --by_arch --out FILE   # KV reuse against re-encoding, every tiny architecture

`--planning` times `PrefixCache.plan` on the last round of 8-round rollouts whose turn lengths vary by episode
(the trained case), keyed rows against the planner that searched every stored row (`SearchingPrefixCache`, the
named baseline), and checks that both plan the same call (`python -m benchmarks --only planning` records it).

`--gpu` builds a random-weight model with 4B-class dimensions in bf16 on the GPU, times the batched rollouts
of all episodes and the one-at-a-time reference on `--reference-episodes` of them (extrapolated, labelled),
and prints generated tokens/s and peak GPU memory. It is self-contained (no downloads) and sized to finish in
a few minutes on an H200. CPU runs use one torch thread by default (`--threads`): on small shared machines
OpenMP spin-waiting otherwise dominates tiny-model timings. Prefix reuse applies to every architecture here
(full attention, Qwen 3.5's linear attention, Gemma 4's sliding window; see sepo/backends/prefix_cache.py);
`--by_arch` times, for each tiny architecture in turn, the batched rollouts with reuse against the same rollouts
re-encoding every round, and writes the rows to `--out`.
"""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from benchmarks.settings import game_settings
from envs import game_spec
from sepo.backends.cache_layers import build_cache
from sepo.backends.hf import HFBackend
from sepo.backends.prefix_cache import PrefixCache, _lcp
from sepo.config.recipes import RecipeParser
from sepo.config.subcommands import report_usage_errors
from sepo.files import write_json_atomic
from sepo.generation import SamplingSpec
from sepo.rollout.chat import ChatRenderer
from sepo.rollout.engine import EpisodeSpec, play_episodes
from sepo.tiny_models import ARCHS, build_tiny_model

PROG = "python -m benchmarks.rollout"



@dataclass(frozen=True)
class RolloutSettings:
    """The game the rollouts play (configs/benchmarks/rollout.yaml)."""

    game: str
    rounds_param: str  # the game parameter `rounds` sets


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
    """`episodes` episodes of the settings' game, against its default training pool in turn, alternating seats."""
    settings = game_settings(RolloutSettings, "rollout")
    opponents = game_spec(settings.game).pools["training"]
    return [
        EpisodeSpec(settings.game, {settings.rounds_param: rounds}, "training", opponents[i % len(opponents)],
                    seed=i, seat=i % 2)
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
    """Time batched vs one-at-a-time rollouts of `episodes` episodes; returns the measurements.

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
    renderer = ChatRenderer(backend.tokenizer)
    sampling = SamplingSpec(temperature=0.8, top_p=0.95, max_new_tokens=max_new_tokens, seed=0)
    specs = _specs(episodes, rounds)
    play_episodes(specs[:2], backend, renderer, sampling)  # warm-up (kernels, caches)
    if gpu:
        torch.cuda.reset_peak_memory_stats()

    def timed(specs_: list[EpisodeSpec], reuse: bool) -> tuple[list, float]:
        _sync(gpu)
        start = time.perf_counter()
        out = play_episodes(specs_, backend, renderer, sampling, reuse_prefix=reuse)
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


class SearchingPrefixCache(PrefixCache):
    """The named baseline of `planning`: the prefix cache's planner before rows were keyed by episode. Every
    stored row whose prompt is a prefix of the new prompt is a candidate and the longest shared prefix wins;
    rows are indexed by prompt length, then prompt, so with turn lengths varying by episode every prompt slices
    and hashes itself once per distinct stored length (about once per row): quadratic in the batch."""

    def store(self, *args: Any, **kwargs: Any) -> bool:
        stored = super().store(*args, **kwargs)
        self.by_length: dict[int, dict[tuple[int, ...], list[int]]] = {}
        for row, n in enumerate(self.prompt_lengths):
            self.by_length.setdefault(n, {}).setdefault(tuple(self.tokens[row][:n]), []).append(row)
        return stored

    def _row_for(self, ids: list[int], key: Any) -> tuple[int, int] | None:
        best: tuple[int, int] | None = None
        for length, rows in self.by_length.items():
            if length >= len(ids):
                continue
            for row in rows.get(tuple(ids[:length]), ()):
                k = length + _lcp(self.tokens[row][length:], ids[length:])
                k = min(k, len(ids) - 1)  # at least one token must be fed to get the next-token logits
                if best is None or k > best[1]:
                    best = (row, k)
        return best


def _last_round(batch: int, rounds: int, turn_tokens: int, seed: int = 0, system_tokens: int = 300,
                env_tokens: int = 120) -> tuple[dict[str, Any], list[list[int]]]:
    """A stored lock-step call at the last of `rounds` rounds and the prompts of the call after it: every
    episode shares a system prompt of `system_tokens`, then environment messages of `env_tokens` and model turns
    of 1 to `turn_tokens` tokens, drawn per episode and round (the trained case: turn lengths vary; about 1,400
    tokens at the 8th round, as the rollout game's conversations on SmolLM2's tokenizer). Returns `store`'s
    arguments (a key/value cache of one small layer: planning does not depend on the model) and the prompts."""
    rng = random.Random(seed)
    system = [rng.randrange(1000) for _ in range(system_tokens)]

    def tokens(n: int) -> list[int]:
        return [rng.randrange(1000) for _ in range(n)]

    prompts, turns = [], []
    for _ in range(batch):
        ids = system + tokens(env_tokens)
        for _ in range(rounds - 1):
            ids += tokens(rng.randint(1, turn_tokens)) + tokens(env_tokens)
        prompts.append(ids)
        turns.append(tokens(rng.randint(1, turn_tokens)))
    width, generated = max(map(len, prompts)), max(map(len, turns))
    pads = [width - len(p) for p in prompts]
    sequences = torch.tensor([[0] * n + p + t + [0] * (generated - len(t)) for n, p, t in zip(pads, prompts, turns)])
    mask = torch.tensor([[0] * n + [1] * len(p) for n, p in zip(pads, prompts)])
    kv = torch.zeros(batch, 1, width + generated - 1, 8)
    cache = build_cache(["full"], width + generated, [(kv, kv.clone())])
    stored = {"cache": cache, "prompts": prompts, "valid_before": torch.zeros(batch, 0, dtype=torch.bool),
              "sequences": sequences, "attention_mask": mask, "kept": [len(t) for t in turns]}
    return stored, [p + t + tokens(env_tokens) for p, t in zip(prompts, turns)]


def planning(batches: tuple[int, ...] = (32, 64, 128, 256), rounds: int = 8, turn_tokens: int = 32,
             repeats: int = 7) -> dict[str, Any]:
    """CPU seconds to plan one call at the last round of `rounds`-round lock-step rollouts, per batch, keyed
    rows against the searching planner (`SearchingPrefixCache`): `match_s` finds each prompt's row (what the two
    differ in), `plan_s` is the whole `PrefixCache.plan` (with the masks and the cache copy both build alike).
    CPU time of this process (a shared machine's other jobs do not count), the fastest of `repeats`, the two
    planners alternated after one untimed call each. Both plans are compared and must be the same call."""
    out = []
    for batch in batches:
        stored, prompts = _last_round(batch, rounds, turn_tokens)
        caches = {"keyed": PrefixCache(max_bytes=2**40), "searching": SearchingPrefixCache(max_bytes=2**40)}
        best = {(name, k): float("inf") for name in caches for k in ("match_s", "plan_s")}
        plans = {}
        for name, cache in caches.items():
            cache.store(**stored)
            plans[name] = cache.plan(prompts, 0, torch.device("cpu"), turn_tokens)  # untimed: allocations warm
        for _ in range(repeats):
            for name, cache in caches.items():
                start = time.process_time()
                [cache._row_for(ids, i) for i, ids in enumerate(prompts)]
                middle = time.process_time()
                cache.plan(prompts, 0, torch.device("cpu"), turn_tokens)
                end = time.process_time()
                best[name, "match_s"] = min(best[name, "match_s"], middle - start)
                best[name, "plan_s"] = min(best[name, "plan_s"], end - middle)
        a, b = plans["keyed"], plans["searching"]
        same = all(torch.equal(getattr(a, f), getattr(b, f)) for f in ("input_ids", "attention_mask", "cache_valid"))
        out.append({"batch": batch, "prompt_tokens": sum(map(len, prompts)), "same_plan": same,
                    **{f"{name}_{k}": round(v, 5) for (name, k), v in best.items()},
                    "match_speedup": round(best["searching", "match_s"] / best["keyed", "match_s"], 1),
                    "plan_speedup": round(best["searching", "plan_s"] / best["keyed", "plan_s"], 2)})
    return {"rounds": rounds, "turn_tokens": turn_tokens, "repeats": repeats, "clock": "process CPU time",
            "batches": out}


def by_arch(episodes: int, rounds: int, max_new_tokens: int) -> dict[str, Any]:
    """Batched rollouts with KV reuse against re-encoding every round, per tiny architecture, in one run:
    `prefix_reuse_speedup` is each architecture's no-reuse time over its reuse time (the two arms alternate
    within an architecture, so a shared machine's load moves both alike)."""
    rows = [run(episodes=episodes, rounds=rounds, max_new_tokens=max_new_tokens, arch=arch,
                arms=("reuse", "no_reuse")) for arch in ARCHS]
    keep = ("batched_s", "batched_no_reuse_s", "prefix_reuse_speedup", "model_tokens", "prefix_cache")
    return {"rows": [{"arch": arch, **{k: row[k] for k in keep}} for row, arch in zip(rows, ARCHS)],
            "episodes": episodes, "rounds": rounds,
            "max_new_tokens": max_new_tokens, "threads": torch.get_num_threads()}


def bench_planning(quick: bool, gpu: bool) -> dict[str, Any]:
    """The suite's planning part: batch 32 to 256 (quick: 8 and 16); pure Python and CPU tensors, `gpu` unused."""
    return planning((8, 16), rounds=2, repeats=1) if quick else planning()


def bench(quick: bool, gpu: bool) -> dict[str, Any]:
    """The suite's rollout part: 64 episodes (quick: 8 short ones)."""
    if quick:
        return run(episodes=8, rounds=2, max_new_tokens=8, gpu=gpu, reference_episodes=4 if gpu else None)
    return run(episodes=64, gpu=gpu)


@dataclass
class RolloutConfig:
    """The keys of `python -m benchmarks.rollout` (command line or `--config` recipe)."""

    episodes: int = field(default=64, metadata={"help": "episodes of the batched arms"})
    model: str = field(default="tiny", metadata={"help": "a tiny random-weight model or the embedded SmolLM2",
                                                  "choices": ("tiny", "default")})
    rounds: int = field(default=8, metadata={"help": "rounds per episode"})
    max_new_tokens: int = field(default=32, metadata={"help": "the token budget of a turn"})
    gpu: bool = field(default=False, metadata={"help": "4B-shaped random bf16 model on cuda"})
    arch: str = field(default="llama", metadata={"help": "the tiny model's architecture", "choices": ARCHS})
    reference_episodes: int | None = field(
        default=None, metadata={"help": "episodes of the one-at-a-time arm, extrapolated to all (default: all; 4 "
                                         "with --gpu)"})
    threads: int = field(default=1, metadata={"help": "torch intra-op CPU threads (both arms)"})
    planning: bool = field(default=False, metadata={"help": "time only the prefix cache's planning (no model)"})
    by_arch: bool = field(default=False, metadata={"help": "KV reuse against re-encoding for every tiny architecture"})
    out: str | None = field(default=None, metadata={"help": "with --by_arch: the JSON file its rows are written to"})


def parser() -> RecipeParser:
    """The command line of the rollout benchmark."""
    return RecipeParser((RolloutConfig,), prog=PROG, description=__doc__.split("\n\n")[0])


def main(argv: list[str] | None = None) -> int:
    (args,) = parser().parse(sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(args.threads)
    if args.planning:
        result = planning()
        for b in result["batches"]:
            print(f"batch {b['batch']:>3}: rows found in {b['keyed_match_s']:.4f} s keyed, {b['searching_match_s']:.4f} s "
                  f"searching ({b['match_speedup']}x); whole plan {b['keyed_plan_s']:.3f} s against "
                  f"{b['searching_plan_s']:.3f} s ({b['plan_speedup']}x); same plan: {b['same_plan']}")
        print(json.dumps(result))
        return 0
    if args.by_arch:
        result = by_arch(args.episodes, args.rounds, args.max_new_tokens)
        for row in result["rows"]:
            print(f"{row['arch']:>8}: {row['batched_s']:.2f} s with KV reuse, {row['batched_no_reuse_s']:.2f} s "
                  f"re-encoding: {row['prefix_reuse_speedup']}x  {row['prefix_cache']}")
        if args.out:
            write_json_atomic(args.out, result)
        print(json.dumps(result))
        return 0
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
