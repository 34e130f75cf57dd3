"""Where `sepo eval` of one game's exact evaluation spends its time, and the exact phase's action scoring against
the implementation it replaced.

The game, its `sepo eval` recipe and the output file are settings (configs/benchmarks/exact_eval.yaml; the game
must have an exact analysis, `GameSpec.exact`). The timed command is `sepo eval --config <its recipe> --models
Base=default --episodes_per_opponent 1`, in three phases: the rollouts (every pool opponent x 1 episode, one
lock-step batch), the exact phase's reasoning samples (every decision state x the recipe's rationale samples) and
the scoring of every legal action after each sample. The scoring is timed twice on the same prompts and choices:
`score_actions` as it is (each prompt encoded once, every tokenisation of every action scored on a copy of its
key/value cache) and the previous implementation, kept here as the named baseline (every tokenisation of every
action appended to the prompt and the whole sequence encoded, 32 sequences per pass). Both must give the same
probabilities (checked).

    python -m benchmarks.exact_eval [--threads 1] [--settings configs/benchmarks/exact_eval.yaml] [--out FILE]

One torch thread by default: on small shared machines OpenMP spin-waiting otherwise dominates the timings.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from benchmarks.settings import settings_path
from envs.tabular import exact_games
from sepo.backends.hf_decoding import action_variants, score_actions
from sepo.config.checks import UsageError
from sepo.config.provenance import git_sha, machine_info
from sepo.config.recipes import RecipeParser, load_section
from sepo.config.subcommands import report_usage_errors
from sepo.eval.config import EvalConfig
from sepo.eval.episodes import batches, play_batch, units
from sepo.eval.evaluate import load_backend
from sepo.eval.exact import reasoning_prompts, require
from sepo.files import write_json_atomic
from sepo.pools import POOL_NAMES, load_pools

PROG = "python -m benchmarks.exact_eval"


@dataclass(frozen=True)
class ExactEvalSettings:
    """Which game's exact evaluation is timed (configs/benchmarks/exact_eval.yaml)."""

    game: str  # a registered game with an exact analysis
    eval_config: str  # its `sepo eval` recipe, quoted in the record's command
    out: str  # the record's default path


@torch.no_grad()
def reencode_scores(model: Any, tokenizer: Any, prompts: list[list[int]], choices: list[list[str]], eot: int,
                    batch_size: int = 32) -> list[list[float]]:
    """The baseline: every tokenisation of every choice appended to its prompt, each sequence encoded whole."""
    rows = [(i, j, [*p, *v, eot], len(v) + 1) for i, (p, acts) in enumerate(zip(prompts, choices))
            for j, a in enumerate(acts) for v in action_variants(tokenizer, p, a)]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eot
    out = [[float("-inf")] * len(acts) for acts in choices]
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        width = max(len(r[2]) for r in chunk)
        keep = max(r[3] for r in chunk) + 1
        ids = torch.tensor([[pad] * (width - len(r[2])) + r[2] for r in chunk])
        attn = torch.tensor([[0] * (width - len(r[2])) + [1] * len(r[2]) for r in chunk])
        logits = model(input_ids=ids, attention_mask=attn, position_ids=(attn.cumsum(-1) - 1).clamp(min=0),
                       logits_to_keep=keep).logits
        logps = torch.log_softmax(logits[:, :-1].float(), -1)
        tok_lp = logps.gather(-1, ids[:, width - keep + 1 :].unsqueeze(-1)).squeeze(-1)
        for b, (i, j, _, n) in enumerate(chunk):
            out[i][j] = float(torch.logaddexp(torch.tensor(out[i][j]), tok_lp[b, -n:].sum()))
    return [torch.softmax(torch.tensor(row, dtype=torch.float64), 0).tolist() for row in out]


def bench(settings: ExactEvalSettings, threads: int = 1) -> dict[str, Any]:
    """Time the three phases of the command's work on the settings' game and the scoring baseline; returns the
    figures."""
    game = settings.game
    states = require(game).states(None)
    torch.set_num_threads(threads)
    cfg = EvalConfig(models=["default"], games=[game], episodes_per_opponent=1, progress=False)
    backend, renderer = load_backend("default", cfg)
    sampling = cfg.sampling()
    pools = load_pools(game)
    factories = {n: (lambda n=n: pools.make(n)) for pool in POOL_NAMES for n in pools.names(pool)}
    (batch,) = batches(units(game, pools), 1, cfg.batch_episodes)
    start = time.perf_counter()
    rows = play_batch(batch, 1, cfg.seed, {}, backend, renderer, sampling, factories)
    rollout_s = time.perf_counter() - start

    samples = cfg.rationale_samples  # the eval recipe's key, as sepo.eval.evaluate reads it
    start = time.perf_counter()
    scored = [p.ids for s in range(samples) for p in reasoning_prompts(backend, renderer, sampling, s, game)]
    legal = [list(s.legal) for s in states] * samples
    samples_s = time.perf_counter() - start
    eot, model, tok = renderer.end_of_turn_id, backend.model, backend.tokenizer
    start = time.perf_counter()
    ours = score_actions(model, tok, scored, legal, eot)
    ours_s = time.perf_counter() - start
    start = time.perf_counter()
    reference = reencode_scores(model, tok, scored, legal, eot)
    reference_s = time.perf_counter() - start
    max_diff = max(abs(a - b) for r1, r2 in zip(ours, reference) for a, b in zip(r1, r2))
    continuations = sum(len(action_variants(tok, p, a)) for p, acts in zip(scored, legal) for a in acts)
    return {
        "command": f"sepo eval --config {settings.eval_config} --models Base=default --episodes_per_opponent 1",
        "threads": threads,
        "rollout_s": rollout_s,
        "rollout_decisions": sum(len(r["turns"]) for unit_rows in rows.values() for r in unit_rows),
        "exact_samples_s": samples_s,
        "scored_prompts": len(scored),
        "scored_continuations": continuations,
        "mean_prompt_tokens": sum(map(len, scored)) / len(scored),
        "scoring_s": ours_s,
        "scoring_reencode_s": reference_s,
        "scoring_speedup": reference_s / ours_s,
        "scoring_max_abs_prob_diff": max_diff,
    }


@dataclass
class ExactEvalConfig:
    """The keys of `python -m benchmarks.exact_eval` (command line or `--config` recipe)."""

    threads: int = field(default=1, metadata={"help": "torch intra-op CPU threads"})
    settings: str = field(default=str(settings_path("exact_eval")),
                          metadata={"help": "the game, its eval recipe and the default output (YAML)"})
    out: str = field(default="", metadata={"help": "where the figures are written (JSON); default: the settings' out"})


def parser() -> RecipeParser:
    """The command line of the exact evaluation benchmark."""
    return RecipeParser((ExactEvalConfig,), prog=PROG, description=__doc__.split("\n\n")[0])


def main(argv: list[str] | None = None) -> int:
    (args,) = parser().parse(sys.argv[1:] if argv is None else argv)
    settings = load_section(ExactEvalSettings, args.settings)
    if settings.game not in exact_games():
        raise UsageError(f"{args.settings}: game {settings.game!r} has no exact analysis (games with one: "
                         f"{', '.join(exact_games())})")
    args.out = args.out or settings.out
    figures = bench(settings, args.threads)
    write_json_atomic(Path(args.out), {"git_sha": git_sha(), "machine": machine_info(),
                                 "load_average_1min": os.getloadavg()[0], **figures})
    total = figures["rollout_s"] + figures["exact_samples_s"] + figures["scoring_s"]
    print(f"rollouts {figures['rollout_s']:.1f} s, reasoning samples {figures['exact_samples_s']:.1f} s, scoring "
          f"{figures['scoring_s']:.1f} s (re-encoding baseline {figures['scoring_reencode_s']:.1f} s, "
          f"{figures['scoring_speedup']:.1f}x; max |Δp| {figures['scoring_max_abs_prob_diff']:.1e}); "
          f"total {total:.1f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
