"""Seconds per SEPO-GRPO step of a model organism with and without gradient checkpointing, in one run.

TRL turns gradient checkpointing on by default; the organism's runs now train without it unless the recipe
names it (`sepo.study.organism.run_keys`). This times the same run both ways: one arm of the organism recipe
that configs/benchmarks/organism_step.yaml names, from the organism's initial weights (a step costs the same
whatever the weights), `--steps` steps through `sepo.study.organism.run_one`, the two settings alternated
`--repeats` times so that a change in the machine's load falls on both. Each run gives two figures: seconds per
step with the exact evaluations and the final played measure included (as in the study's s/step), and the steps
alone (the run's wall time less its evaluations). The study's own s/step figures are in the curves.md beside its record.

    python -m benchmarks.organism_step [--arm exploitability_descent] [--steps 20] [--repeats 2] [--settings FILE]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from benchmarks.settings import settings_path
from sepo.config.provenance import load_average
from sepo.config.recipes import RecipeParser, load_section
from sepo.config.subcommands import report_usage_errors
from sepo.study.organism import build_model, load_recipe, run_one

PROG = "python -m benchmarks.organism_step"
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class OrganismStepSettings:
    """Which organism is timed (configs/benchmarks/organism_step.yaml)."""

    recipe: str  # the organism's study recipe, relative to the repository root


def run(recipe_path: Path, arm: str = "exploitability_descent", steps: int = 20, repeats: int = 2,
        seed: int = 1001) -> dict[str, Any]:
    """s/step of `arm` of the organism recipe at `recipe_path` with gradient checkpointing off (the organism's
    setting now) and on (TRL's default)."""
    recipe = load_recipe(recipe_path)
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    load = [load_average()]
    with tempfile.TemporaryDirectory() as tmp:
        start = build_model(Path(tmp) / "init", 0)
        for k in range(repeats):
            for setting in runs:
                keys = {**recipe, "train": {**recipe["train"], "gradient_checkpointing": setting == "on"}}
                runs[setting].append(run_one(keys, arm, seed, steps, Path(tmp) / f"{setting}_{k}.json", str(start)))
    load.append(load_average())
    out: dict[str, Any] = {"arm": arm, "steps": steps, "repeats": repeats}
    for key, speedup in (("seconds_per_step", "speedup"), ("train_seconds_per_step", "train_speedup")):
        values = {setting: [r[key] for r in records] for setting, records in runs.items()}
        best = {setting: min(v) for setting, v in values.items()}
        out.update({key: values, f"best_{key}": best, speedup: round(best["on"] / best["off"], 2)})
    return {**out, "load_average_1min": load, "cores": os.cpu_count()}


@dataclass
class OrganismStepConfig:
    """The keys of `python -m benchmarks.organism_step`."""

    arm: str = field(default="exploitability_descent", metadata={"help": "an arm of the organism recipe"})
    steps: int = field(default=20, metadata={"help": "GRPO steps per timed run"})
    repeats: int = field(default=2, metadata={"help": "timed runs of each setting, alternated"})
    settings: str = field(default=str(settings_path("organism_step")), metadata={"help": "the organism (YAML)"})


def main(argv: list[str] | None = None) -> int:
    (args,) = RecipeParser((OrganismStepConfig,), prog=PROG, description=__doc__.split("\n\n")[0]).parse(
        sys.argv[1:] if argv is None else argv)
    settings = load_section(OrganismStepSettings, args.settings)
    torch.set_num_threads(1)  # as the study's workers (OMP_NUM_THREADS=1)
    result = run(ROOT / settings.recipe, args.arm, args.steps, args.repeats)
    best = result["best_seconds_per_step"]
    train = result["best_train_seconds_per_step"]
    print(f"{args.arm}: {best['off']:.3f} s/step without gradient checkpointing, {best['on']:.3f} s/step with it "
          f"({result['speedup']}x), the exact evaluations included; the steps alone {train['off']:.3f} against "
          f"{train['on']:.3f} ({result['train_speedup']}x); load {result['load_average_1min'][0]:.1f} -> "
          f"{result['load_average_1min'][1]:.1f}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
