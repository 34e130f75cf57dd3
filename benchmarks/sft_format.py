"""`python -m benchmarks.sft_format [--runs DIR] [--out DIR]`: the quick start's SFT recipe and its variants,
each judged by the answer-format check (the share of decisions that parse strictly, no fallback).

Every variant is `sepo sft --config configs/quickstart/sft.yaml` plus its overrides, then `sepo eval` of the SFT
model alone with the quick start's eval recipe on the development seed DEV_SEED: 5 episodes per opponent, 140
decisions. The quick start itself reports on another seed (its stage 4), so the recipe is not chosen on the seed
it is reported on. A variant whose outputs are complete in `--runs` is read, not run again. The table (SFT wall
time, strict share with the eval's interval, how the other turns ended, and the strict share by round after a
strict or a failed turn) goes to `--out` (RESULTS.md, results.json), with the share of padding in batches of 4
of the recipe's rows.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from sepo.config.models import resolve_model
from sepo.config.provenance import load_average, write_record
from sepo.config.recipes import RecipeParser, read_recipe
from sepo.config.subcommands import report_usage_errors
from sepo.files import write_json_atomic
from sepo.sft.data import build_dataset

DEV_SEED = 100
RECIPES = Path(__file__).resolve().parent.parent / "configs" / "quickstart"
# name -> overrides of configs/quickstart/sft.yaml (the committed recipe is whichever these lines say it is)
VARIANTS: dict[str, list[str]] = {
    "v0 batch 4, 16 steps": ["--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1",
                             "--max_steps", "16"],
    "v1 batch 1x4, 16 steps": ["--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "4",
                               "--max_steps", "16"],
    "v2 batch 4, 32 steps": ["--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1",
                             "--max_steps", "32"],
    "v3 batch 1x4, 16 steps, lr 2e-3": ["--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "4",
                                        "--max_steps", "16", "--learning_rate", "2.0e-3"],
    "v4 batch 1x4, 24 steps": ["--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "4",
                               "--max_steps", "24"],
    "v5 batch 1x4, 32 steps": ["--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "4",
                               "--max_steps", "32"],
}  # fmt: skip


def _run(command: list[str], log: Path) -> float:
    """Run a `sepo` command with its output in `log`; its wall seconds (a failure raises)."""
    t0 = time.perf_counter()
    with log.open("w") as out:
        subprocess.run([sys.executable, "-m", "sepo.cli", *command], stdout=out, stderr=subprocess.STDOUT, check=True)
    return time.perf_counter() - t0


def run_variant(runs: Path, name: str, overrides: list[str]) -> dict[str, Any]:
    """Train and check one variant (or read what a finished run left); returns its row of the table."""
    folder = runs / name.split()[0]
    folder.mkdir(parents=True, exist_ok=True)
    timing = folder / "timing.json"
    if not timing.is_file():
        sft_s = _run(["sft", "--config", str(RECIPES / "sft.yaml"), "--output_dir", str(folder / "sft"), *overrides],
                     folder / "sft.log")  # fmt: skip
        write_json_atomic(timing, {"sft_s": sft_s})
    results = folder / "fmt" / "results.json"
    if not (results.is_file() and json.loads(results.read_text())["complete"]):
        _run(["eval", "--config", str(RECIPES / "eval.yaml"), "--models", f"SFT={folder / 'sft' / 'merged'}",
              "--output_dir", str(folder / "fmt"), "--episodes_per_opponent", "5", "--seed", str(DEV_SEED)],
             folder / "eval.log")  # fmt: skip
    (game,) = read_recipe(RECIPES / "eval.yaml")[0]["games"]  # the quick start evaluates one game
    result = json.loads(results.read_text())["results"]["SFT"][game]
    failure = result["metrics"]["parse_failure_rate"]
    return {"variant": name, "overrides": overrides, "sft_s": json.loads(timing.read_text())["sft_s"],
            "strict_rate": 1 - failure["value"], "ci": [1 - failure["ci"][1], 1 - failure["ci"][0]],
            "decisions": result["decisions"], **by_round(folder / "fmt")}


def by_round(eval_dir: Path) -> dict[str, Any]:
    """Strict share of the first decision, and of later ones after a strict or a failed turn (the history the
    model reads holds its own earlier turns), from the stored episodes."""
    counts = {"first": [0, 0], "after_strict": [0, 0], "after_failure": [0, 0]}
    for path in sorted((eval_dir / "episodes").rglob("*.json")):
        for row in json.loads(path.read_text())["data"]:
            previous = None
            for turn in row["turns"]:
                key = "first" if previous is None else ("after_strict" if previous else "after_failure")
                counts[key][0] += turn["parsed"]
                counts[key][1] += 1
                previous = turn["parsed"]
    return {k: {"strict": s, "of": n} for k, (s, n) in counts.items()}


def padding_share(batch_size: int, seed: int = 0) -> dict[str, Any]:
    """How much of a batch of the quick start's SFT rows is padding when every row is padded to the batch's
    longest (TRL's collator): each row's prompt and completion rendered with the embedded model's chat
    template, the training rows in one shuffled order, cut into batches of `batch_size`."""
    recipe, _ = read_recipe(RECIPES / "sft.yaml")
    rows = build_dataset(recipe["games"], seed=recipe.get("data_seed_value", 0),
                         episodes_scale=recipe["episodes_scale"], game_params=recipe["game_params"])["train"]
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("default"))
    texts = [tokenizer.apply_chat_template(r["prompt"] + r["completion"], tokenize=False) for r in rows]
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    random.Random(seed).shuffle(lengths)
    batches = [lengths[i : i + batch_size] for i in range(0, len(lengths), batch_size)]
    padded = sum(max(b) * len(b) for b in batches)
    return {"batch_size": batch_size, "rows": len(lengths), "tokens": sum(lengths), "padded_tokens": padded,
            "padding_share": 1 - sum(lengths) / padded, "shortest": min(lengths), "longest": max(lengths)}


def _share(c: dict[str, int]) -> str:
    return f"{c['strict']}/{c['of']}" if c["of"] else "–"


PROG = "python -m benchmarks.sft_format"


@dataclass
class SFTFormatConfig:
    """The keys of `python -m benchmarks.sft_format` (command line or `--config` recipe)."""

    runs: str = field(default="runs/figures/sft_format", metadata={"help": "the variants' outputs"})
    out: str = field(default="benchmarks/quickstart/sft_format", metadata={"help": "the record"})


def main(argv: list[str] | None = None) -> int:
    (args,) = RecipeParser((SFTFormatConfig,), prog=PROG, description=__doc__.splitlines()[0]).parse(
        sys.argv[1:] if argv is None else argv)
    runs, out = Path(args.runs), Path(args.out)
    load_before, t0 = load_average(), time.perf_counter()
    rows = []
    for name, overrides in VARIANTS.items():
        rows.append(run_variant(runs, name, overrides))
        print(f"{name}: strict {rows[-1]['strict_rate']:.3f} in {rows[-1]['sft_s']:.0f} s of SFT", flush=True)
    lines = [f"Answer-format check on the development seed {DEV_SEED} (140 decisions per variant).", "",
             "| variant | SFT s | strict share [95% CI] | first decision | after a strict turn | after a failed turn |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['variant']} | {r['sft_s']:.0f} | {r['strict_rate']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] | "
              f"{_share(r['first'])} | {_share(r['after_strict'])} | {_share(r['after_failure'])} |" for r in rows]
    padding = padding_share(4)
    lines += ["", f"Padding: the {padding['rows']} training rows are {padding['shortest']}-{padding['longest']} "
              f"tokens; in batches of 4 padded to the longest, {padding['padding_share']:.0%} of the tokens a "
              "forward pass computes are padding (none with one row per forward pass)."]
    lines += ["", "SFT s: the wall time of each variant's `sepo sft` (loading, tokenising, training, merging). The "
              "variants ran one after another while other jobs shared the 2 cores, so the times are indicative; "
              "the quick start's own record times the recipe it runs."]
    write_record(out, title="The quick start's SFT recipe: answer format by variant",
                 command="python -m benchmarks.sft_format", wall_s=time.perf_counter() - t0, load_before=load_before,
                 figures={"dev_seed": DEV_SEED, "variants": rows, "padding_batch_4": padding},
                 markdown="\n".join(lines))  # fmt: skip
    print(f"recorded in {out}/RESULTS.md and results.json")
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
