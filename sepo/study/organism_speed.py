"""Seconds per SEPO-GRPO step of an organism recipe, and where they go: a few steps of one arm, then the played
measure's cost per sample.

`python -m sepo.study.organism_speed --config configs/experiments/<study>/study.yaml --arm exploitability_descent
--steps 3 --out benchmarks/<study>/speed.json` (the Makefile's speed target) trains `--steps` steps of the arm (`sepo.study.organism.run_one`:
the real trainer, its exact evaluation at step 0 and at the end) from the recipe's model as it is, without the
warm start (the base model, or `--start`), logging every step, and writes:

- per step: wall and CPU seconds (this process, from one step's end to the next: generation, scoring, backward,
  optimizer, and the final exact evaluation in the last step), TRL's `step_time` and SEPO's sepo/time/* split
  (generation, rollout, advantages) and the adaptive exploiter's refresh;
- the played measure (`sepo.eval.played`) on the final weights with `--played-samples` per information set
  (in the last step's seconds): its wall seconds per sample;
- the load average before and after, and the machine's core count: on a shared machine wall seconds include
  other jobs' share, CPU seconds do not.
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sepo.config.recipes import RecipeParser
from sepo.config.subcommands import report_usage_errors
from sepo.files import write_json_atomic
from sepo.study.organism import load_recipe, model_name, pretrained, run_one, work_dir

PROG = "python -m sepo.study.organism_speed"


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def step_clock() -> Any:
    """A trainer callback that records each step's wall and CPU seconds (from the previous step's end, or the
    start of training) in its `steps` list."""
    # deferred: transformers takes seconds to import; the command line is parsed without it
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.steps: list[dict[str, float]] = []
            self._wall = self._cpu = 0.0

        def on_train_begin(self, args, state, control, **kw):
            self._wall, self._cpu = time.perf_counter(), cpu_seconds()

        def on_step_end(self, args, state, control, **kw):
            wall, cpu = time.perf_counter(), cpu_seconds()
            self.steps.append({"step": state.global_step, "wall_s": wall - self._wall, "cpu_s": cpu - self._cpu})
            self._wall, self._cpu = wall, cpu

    return StepClock()


@dataclass
class SpeedCommand:
    """The keys of `python -m sepo.study.organism_speed`."""

    config: str = field(metadata={"help": "the study recipe (configs/experiments/*/study.yaml)"})
    out: str = field(metadata={"help": "where the measurement goes (JSON)"})
    arm: str = field(default="exploitability_descent", metadata={"help": "the arm whose steps are timed"})
    steps: int = field(default=3, metadata={"help": "steps to time"})
    seed: int = field(default=0, metadata={"help": "training seed"})
    start: str | None = field(default=None, metadata={"help": "the weights to start from (default: the recipe's "
                                                                 "model, without its warm start)"})
    played_samples: int = field(default=8, metadata={"help": "played samples per information set for its cost"})
    threads: int | None = field(default=None, metadata={"help": "torch threads of the timed run (default: the "
                                                                  "recipe's train.torch_threads)"})


def timed_recipe(recipe: Mapping[str, Any], ns: SpeedCommand) -> dict[str, Any]:
    """The study recipe as the measurement runs it: evaluated at the start and after `ns.steps` only, logging
    every step, `ns.played_samples` played samples per information set, and `ns.threads` torch threads where
    given (the recipe's `torch_threads` otherwise; OMP_NUM_THREADS alone does not override it)."""
    played = {**(recipe.get("played") or {}), "samples": ns.played_samples}
    threads = {} if ns.threads is None else {"torch_threads": ns.threads}
    return {**recipe, "eval_every": ns.steps, "played": played,
            "train": {**recipe["train"], "logging_steps": 1, **threads}}


def main(argv: list[str] | None = None) -> int:
    (ns,) = RecipeParser((SpeedCommand,), prog=PROG, description=__doc__.split("\n\n")[0]).parse(
        sys.argv[1:] if argv is None else argv)
    recipe = timed_recipe(load_recipe(ns.config), ns)
    root = Path(recipe["output_dir"]) / "speed"
    start = ns.start or pretrained(recipe)
    if start is None:
        raise ValueError("the recipe builds its model (no model.name_or_path): give --start")
    load_before = os.getloadavg()
    clock = step_clock()
    out = root / f"{ns.arm}_seed_{ns.seed}.json"
    out.unlink(missing_ok=True)  # a fresh measurement each time: no finished run, no checkpoint to resume
    shutil.rmtree(work_dir(recipe, out), ignore_errors=True)
    run = run_one(recipe, ns.arm, ns.seed, ns.steps, out, start, callbacks=[clock])
    final = run["checkpoints"][-1]
    write_json_atomic(Path(ns.out), {
        "model": model_name(recipe), "start": start, "arm": ns.arm, "steps": ns.steps,
        "episodes_per_step": run["config"]["per_device_train_batch_size"],
        "note": "wall_s and cpu_s run from one step's end to the next (the first from the start of training, after "
                "the exact evaluation at step 0); the last step's include the final exact evaluation and the played "
                "measure (played.seconds). step_time is TRL's training step: the rollout (sepo/time/rollout_s: the "
                "exploiter refresh, generation and the rest of playing) and the loss's forward and backward. "
                + ("From --start (e.g. the warm start): the trained case" if ns.start else
                   "The base model, not the warm start: its turns run to the turn length and reach the fallback "
                   "more often"),
        "cores": os.cpu_count(), "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "torch_threads": recipe["train"].get("torch_threads"), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "per_step": [{**clock_row, **timing} for clock_row, timing in zip(clock.steps, run["timing"])],
        "wall_s_per_step": sum(r["wall_s"] for r in clock.steps) / len(clock.steps),
        "cpu_s_per_step": sum(r["cpu_s"] for r in clock.steps) / len(clock.steps),
        "played": {"samples_per_infoset": ns.played_samples, "seconds": final["played_s"],
                   "wall_s_per_sample": final["played_s"] / (len(final["policy"]) * ns.played_samples)},
        "final_checkpoint": {k: final[k] for k in ("exploitability", "canonical_mass", "played_gap")},
    })
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
