"""The loss's forward and backward on one real rollout batch of an organism recipe, two ways: TRL's single pass
(the baseline) and the shared-prefix pass (`sepo.grpo.shared_prefix`, the config's `share_prompt_prefix`), in
CPU seconds, with their ratio and how far apart their LoRA gradients are.

`python -m sepo.study.loss_speed --config configs/experiments/<study>/study.yaml --rows 48
--out benchmarks/<study>/loss_speed.json` (the Makefile's speed target) builds the arm's trainer (`sepo.grpo.train.build_trainer`, the recipe's
model without its warm start), plays and scores one batch of `--rows` rollouts (`--rows` / G groups; the
rollout's exploiter refresh and generation are timed too), then runs the loss (TRL's `compute_loss`) and its
backward on that batch `--repeats` times each way, alternating, and keeps each way's fastest (CPU seconds of this
process: other jobs on a shared machine do not count, but they do slow a pass down, so the fastest of a few is the
least disturbed), and writes the batch's shape (distinct prompts, padded prompt and completion widths, real
tokens), the seconds, the ratio and the largest gradient difference.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sepo.config.recipes import RecipeParser
from sepo.config.subcommands import report_usage_errors
from sepo.files import write_json_atomic
from sepo.study.organism import load_recipe, model_name, pretrained, run_keys
from sepo.study.organism_speed import cpu_seconds

PROG = "python -m sepo.study.loss_speed"


@dataclass
class LossSpeedCommand:
    """The keys of `python -m sepo.study.loss_speed`."""

    config: str = field(metadata={"help": "the study recipe (configs/experiments/*/study.yaml)"})
    out: str = field(metadata={"help": "where the measurement goes (JSON)"})
    arm: str = field(default="exploitability_descent", metadata={"help": "the arm whose batch is measured"})
    rows: int = field(default=48, metadata={"help": "rollouts in the batch (a multiple of the recipe's G; the "
                                                     "recipe's own batch is 48)"})
    repeats: int = field(default=2, metadata={"help": "loss passes each way (the fastest is kept)"})
    seed: int = field(default=0, metadata={"help": "training seed"})


def loss_pass(trainer: Any, inputs: dict[str, Any], share: bool) -> tuple[float, dict[str, Any]]:
    """(CPU seconds, LoRA gradients) of one loss forward (TRL's `compute_loss`) and backward."""
    trainer.args.share_prompt_prefix = share
    model = trainer.model
    model.zero_grad()
    t0 = cpu_seconds()
    trainer.compute_loss(model, inputs).backward()
    seconds = cpu_seconds() - t0
    return seconds, {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def main(argv: list[str] | None = None) -> int:
    (ns,) = RecipeParser((LossSpeedCommand,), prog=PROG, description=__doc__.split("\n\n")[0]).parse(
        sys.argv[1:] if argv is None else argv)
    recipe = load_recipe(ns.config)
    start = pretrained(recipe)
    if start is None:
        raise ValueError("the recipe builds its model (no model.name_or_path): this measures a pretrained one")
    # deferred: torch, transformers and the trainer take seconds to import; the command line is parsed first
    from sepo.grpo.config import SEPOConfig
    from sepo.grpo.train import build_trainer
    from sepo.lora import SEPOModelConfig

    keys = {**run_keys(recipe, ns.arm, ns.seed, 1, str(Path(recipe["output_dir"]) / "loss_speed"), start),
            "per_device_train_batch_size": ns.rows}
    parser = RecipeParser([SEPOConfig, SEPOModelConfig], prog=PROG)
    parser.apply(keys, source=f"arm {ns.arm!r}")
    args, model_args = parser.parse([])
    load_before = os.getloadavg()
    trainer = build_trainer(args, model_args)  # machine set-up and rng key included, as a run's
    trainer.model.train()
    t0 = cpu_seconds()
    inputs = trainer.scored_batch()
    rollout_s = cpu_seconds() - t0
    seconds: dict[bool, list[float]] = {True: [], False: []}
    grads = {}
    for _ in range(ns.repeats):
        for share in (False, True):
            s, grads[share] = loss_pass(trainer, inputs, share)
            seconds[share].append(s)
    plain, shared = grads[False], grads[True]
    prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
    write_json_atomic(Path(ns.out), {
        "model": model_name(recipe), "start": start, "arm": ns.arm, "lora_r": model_args.lora_r,
        "rows": ns.rows, "num_generations": args.num_generations,
        "distinct_prompts": len({tuple(r) for r in prompt_ids.tolist()}),
        "prompt_width": prompt_ids.size(1), "completion_width": inputs["completion_ids"].size(1),
        "prompt_tokens": sorted({int(n) for n in prompt_mask.sum(1)}),
        "completion_tokens": sorted(int(n) for n in inputs["completion_mask"].sum(1)),
        "rollout_cpu_s": rollout_s,
        "loss_cpu_s": {"single_pass": min(seconds[False]), "shared_prefix": min(seconds[True])},
        "loss_cpu_s_all": {"single_pass": seconds[False], "shared_prefix": seconds[True]},
        "speedup": min(seconds[False]) / min(seconds[True]),
        "lora_grads": {"max_abs_diff": max(float((plain[n] - shared[n]).abs().max()) for n in plain),
                       "max_abs": max(float(g.abs().max()) for g in plain.values())},
        "cores": os.cpu_count(), "torch_threads": args.torch_threads,
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "note": "CPU seconds of this process for TRL's compute_loss and its backward on one scored batch (the "
                "fastest of the repeats); rollout_cpu_s: the batch's exploiter refresh, generation and scoring",
    })
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
