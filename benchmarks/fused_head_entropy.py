"""What TRL's per-token entropy costs in the loss: the fused LM head with and without it, in one run.

TRL's GRPOTrainer asks its fused LM head (`trl.trainer.add_fused_lm_head`) for the entropy of every scored
position on every loss call. With `top_entropy_quantile: 1` and no entropy bonus (SEPO's recipes) it feeds only
the logged `entropy` metric, so it is work a run could skip. This times the loss's forward and backward both ways
on the embedded SmolLM2-135M (or `--model`): two copies of the model, one whose head computes log-probabilities
alone (the baseline) and one that adds the entropy, as TRL's trainer installs it. The backward reaches the
activations through every layer, as LoRA's does, and no weight gradient is kept. The two are alternated `--repeats`
times, so that a change in the machine's load falls on both, and the ratio is printed against the baseline.

    python -m benchmarks.fused_head_entropy [--model default] [--rows 48] [--length 48] [--scored 8] [--repeats 5]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from sepo.config.models import resolve_model
from sepo.config.provenance import load_average
from sepo.config.recipes import RecipeParser
from sepo.config.subcommands import report_usage_errors

PROG = "python -m benchmarks.fused_head_entropy"
HEADS = {"baseline": ("log_probs",), "entropy": ("log_probs", "entropy")}


def head_model(path: str, outputs: tuple[str, ...]) -> Any:
    """The model at `path`, frozen, with TRL's fused LM head computing `outputs`."""
    # deferred: transformers and trl take seconds to import; a mistake on the command line is reported first
    from transformers import AutoModelForCausalLM
    from trl.trainer import add_fused_lm_head

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    model.requires_grad_(False)
    add_fused_lm_head(model, outputs=outputs)
    return model


def loss_call(model: Any, input_ids: torch.Tensor, labels: torch.Tensor) -> tuple[float, torch.Tensor]:
    """(wall seconds, log-probabilities) of one forward and backward of the loss's log-probabilities (gradients to
    the inputs only)."""
    embeds = model.get_input_embeddings()(input_ids).detach().requires_grad_(True)
    start = time.perf_counter()
    out = model(inputs_embeds=embeds, labels=labels, fused_lm_head=True)
    out.log_probs.sum().backward()
    return time.perf_counter() - start, out.log_probs.detach()


def run(model_name: str, rows: int, length: int, scored: int, repeats: int, seed: int = 0) -> dict[str, Any]:
    """Seconds per loss call of both heads, alternated `repeats` times (after one warm-up call each), and whether
    the two heads give the same log-probabilities (so the comparison is of the same work plus the entropy)."""
    path = resolve_model(model_name)
    models = {name: head_model(path, outputs) for name, outputs in HEADS.items()}
    generator = torch.Generator().manual_seed(seed)
    vocab = models["baseline"].config.get_text_config().vocab_size
    input_ids = torch.randint(0, vocab, (rows, length), generator=generator)
    labels = input_ids.masked_fill(torch.arange(length) < length - scored, -100)  # the last `scored` are scored
    load = [load_average()]
    seconds: dict[str, list[float]] = {name: [] for name in models}
    warm = {name: loss_call(model, input_ids, labels)[1] for name, model in models.items()}
    for _ in range(repeats):
        for name, model in models.items():
            seconds[name].append(loss_call(model, input_ids, labels)[0])
    load.append(load_average())
    median = {name: statistics.median(values) for name, values in seconds.items()}
    return {"model": model_name, "rows": rows, "length": length, "scored_per_row": scored, "repeats": repeats,
            "seconds": seconds, "median_seconds": median, "ratio": round(median["entropy"] / median["baseline"], 3),
            "extra_ms": round(1e3 * (median["entropy"] - median["baseline"]), 1),
            "same_log_probs": bool(torch.equal(warm["baseline"], warm["entropy"])), "torch_threads":
            torch.get_num_threads(), "load_average_1min": load, "cores": os.cpu_count()}


@dataclass
class FusedHeadEntropyConfig:
    """The keys of `python -m benchmarks.fused_head_entropy`."""

    model: str = field(default="default", metadata={"help": "the model (default: the embedded SmolLM2-135M)"})
    rows: int = field(default=48, metadata={"help": "rows per loss call (the study's 6 groups x G 8)"})
    length: int = field(default=48, metadata={"help": "tokens per row"})
    scored: int = field(default=8, metadata={"help": "scored (completion) positions per row"})
    repeats: int = field(default=5, metadata={"help": "timed calls of each head, alternated"})


def main(argv: list[str] | None = None) -> int:
    (args,) = RecipeParser((FusedHeadEntropyConfig,), prog=PROG, description=__doc__.split("\n\n")[0]).parse(
        sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(1)  # as the study's workers (OMP_NUM_THREADS=1)
    result = run(args.model, args.rows, args.length, args.scored, args.repeats)
    median = result["median_seconds"]
    print(f"loss forward+backward: {median['baseline']:.3f} s with log-probabilities alone (baseline), "
          f"{median['entropy']:.3f} s with the entropy too: {result['ratio']}x, {result['extra_ms']} ms more per call; "
          f"load {result['load_average_1min'][0]:.1f} -> {result['load_average_1min'][1]:.1f}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
