"""`sepo quickstart`: the whole pipeline on the embedded model, on a CPU (about 10 min on 2 idle cores).

    stage 1  SFT warm-start on demonstrator transcripts            (sepo sft   --config configs/quickstart/sft.yaml)
    stage 2  a few SEPO-GRPO steps from the SFT checkpoint          (sepo train --config configs/quickstart/sepo.yaml)
    stage 3  Base vs SFT vs SEPO against every pool opponent        (sepo eval  --config configs/quickstart/eval.yaml)
    stage 4  the SFT model's answer format on other seeds           (sepo eval, the same recipe, SFT only)

Each stage is the same command a user would type, run in-process with the recipe in configs/quickstart/.
Stage 4 checks what the warm start is for, the answer format: the share of the SFT model's decisions that
parse strictly (no fallback), on at least FORMAT_DECISIONS decisions from seeds the table does not use.
`--scale ci` shortens every stage for continuous integration; the outputs land in runs/quickstart/ (`--out`), so
a run leaves the checkout clean. `--record DIR` also records the table, the format check and the stage timings
in DIR (RESULTS.md, results.json): `make figures-quickstart` records in benchmarks/quickstart/full/, the files
the README quotes. `--torch_threads N` sets torch's CPU threads in every stage (1 on a busy shared machine);
the SFT and GRPO stages print a line per step with the time left and the machine's load (`sepo.progress`).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sepo.checks import OPTIONAL_COUNT, check_choice, check_output_dir, check_ranges
from sepo.eval import evaluate
from sepo.files import CHECKPOINT_STATE, last_complete_checkpoint
from sepo.models import resolve_model
from sepo.provenance import load_average, write_record
from sepo.recipes import RecipeParser

REPO = Path(__file__).resolve().parent.parent
RECIPES = REPO / "configs" / "quickstart"

# Per-scale overrides of the committed recipes (full = the recipes as they are). "format" is added to "eval"'s
# for stage 4: a seed the table (seed 0) does not use, and enough episodes for FORMAT_DECISIONS decisions.
SCALES: dict[str, dict[str, list[str]]] = {
    "full": {"sft": [], "sepo": [], "eval": [], "format": ["--seed", "1", "--episodes_per_opponent", "5"]},
    "ci": {
        "sft": ["--max_steps", "4", "--episodes_scale", "0.05"],
        "sepo": ["--max_steps", "1", "--save_steps", "1", "--max_turn_tokens", "24",
                 "--pool_mix", '{"training": 1, "exploit": 1}', "--gradient_accumulation_steps", "2"],
        # one episode against every opponent of every pool: J needs the collusive pool's c beside e and x
        "eval": ["--episodes_per_opponent", "1", "--max_turn_tokens", "24"],
        "format": ["--seed", "1", "--pools", "training", "exploit"],  # the answer format: any opponent will do
    },
}
FORMAT_GOAL = 0.80  # the share of strict parses the warm start must reach ...
FORMAT_DECISIONS = 128  # ... measured on at least this many decisions (the full scale plays 140)


def _recipe(name: str) -> str:
    path = RECIPES / f"{name}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"quickstart recipe {path} is missing (run from a checkout of the repository)")
    return str(path)


def _stage(number: int, title: str) -> float:
    print(f"\n==== [{number}/4] {title} ====", flush=True)
    return time.perf_counter()


@dataclass
class QuickstartConfig:
    """The keys of `sepo quickstart` (command line or `--config` recipe); the checks run when it is built."""

    scale: str = field(default="full", metadata={"help": "ci: a shortened run", "choices": sorted(SCALES)})
    out: str = field(default="runs/quickstart", metadata={"help": "output root"})
    record: str | None = field(
        default=None,
        metadata={"help": "also record the table and timings in this directory (the README's: "
                          "benchmarks/quickstart/<scale>); default: not recorded"})

    torch_threads: int | None = field(
        default=None, metadata={"help": "torch intra-op CPU threads in every stage (unset: torch's default, one "
                                        "per core); 1 on a busy shared machine, where OpenMP spin-waiting slows "
                                        "every thread"})

    def __post_init__(self) -> None:
        check_choice("scale", self.scale, sorted(SCALES))  # a recipe's value (argparse checks the flag's)
        check_output_dir("--out", self.out)
        check_ranges(self, {"torch_threads": OPTIONAL_COUNT})


def stage_overrides(args: QuickstartConfig) -> dict[str, list[str]]:
    """Each stage's command-line additions to its recipe: the scale's, plus `--torch_threads` where it is set
    (`format` is added to `eval`'s for stage 4)."""
    threads = ["--torch_threads", str(args.torch_threads)] if args.torch_threads else []
    scale = SCALES[args.scale]
    return {"sft": scale["sft"] + threads, "sepo": scale["sepo"] + threads, "eval": scale["eval"] + threads,
            "format": scale["format"]}


def parser() -> RecipeParser:
    """The command line of `sepo quickstart`."""
    return RecipeParser((QuickstartConfig,), prog="sepo quickstart", description=__doc__.split("\n\n")[0])


def record_dir(args: QuickstartConfig) -> Path | None:
    """Where the run is recorded: only where `--record` says (a user's run writes under `--out` alone)."""
    return Path(args.record) if args.record else None


def main(argv: list[str] | None = None) -> int:
    (args,) = parser().parse(argv)
    scale = stage_overrides(args)
    out = Path(args.out)

    # deferred: the SFT and SEPO-GRPO stages import trl, peft and torch (seconds); `sepo quickstart --help` and a
    # mistyped flag are answered without them
    from sepo.grpo import train
    from sepo.sft import train as sft

    load_before, seconds = load_average(), {}
    t0 = time.perf_counter()
    print("preparing the embedded default model (SmolLM2-135M-Instruct; converted once, then cached)", flush=True)
    base = resolve_model("default")
    seconds["prepare_model"] = time.perf_counter() - t0

    t = _stage(1, "SFT warm-start on demonstrator transcripts")
    sft_dir = out / "sft"
    sft.main(["--config", _recipe("sft"), "--output_dir", str(sft_dir), *scale["sft"]])
    merged = sft_dir / "merged"
    seconds["sft"] = time.perf_counter() - t
    print(f"stage 1 done in {seconds['sft']:.0f} s: {merged}", flush=True)

    t = _stage(2, "SEPO-GRPO steps against the training / exploit / collusive pools")
    sepo_dir = out / "sepo"
    train.main(["--config", _recipe("sepo"), "--model_name_or_path", str(merged), "--output_dir", str(sepo_dir),
                *scale["sepo"]])
    seconds["sepo"] = time.perf_counter() - t
    print(f"stage 2 done in {seconds['sepo']:.0f} s: {sepo_dir}", flush=True)

    t = _stage(3, "evaluation: Base vs SFT vs SEPO")
    code = evaluate.main(["--config", _recipe("eval"), "--output_dir", str(out / "eval"),
                          "--models", f"Base={base}", f"SFT={merged}", f"SEPO={sepo_dir}", *scale["eval"]])
    seconds["eval"] = time.perf_counter() - t
    print(f"stage 3 done in {seconds['eval']:.0f} s", flush=True)

    t = _stage(4, "the SFT model's answer format, on seeds the table does not use")
    if code == 0:
        code = evaluate.main(["--config", _recipe("eval"), "--output_dir", str(out / "format"),
                              "--models", f"SFT={merged}", *scale["eval"], *scale["format"]])
    seconds["format"] = time.perf_counter() - t
    seconds["total"] = time.perf_counter() - t0
    if code == 0:
        print(f"stage 4 done in {seconds['format']:.0f} s: {format_line(answer_format_of(out / 'format'))}")
    print(f"\nquick start finished in {seconds['total'] / 60:.1f} min; table and plots in {out / 'eval'}")
    record = record_dir(args)
    if code == 0 and record is not None:
        command = ("sepo quickstart" + (f" --scale {args.scale}" if args.scale != "full" else "")
                   + (f" --torch_threads {args.torch_threads}" if args.torch_threads else "") + f" --record {record}")
        write_quickstart_record(record, command, out, seconds, load_before)
        print(f"recorded in {record}/RESULTS.md and results.json")
    return code


def _step_timings(sepo_dir: Path) -> list[dict[str, Any]]:
    """Per-step timings from the GRPO run's trainer state (step time, SEPO's generation/rollout seconds)."""
    checkpoint = last_complete_checkpoint(sepo_dir)
    if checkpoint is None:
        return []
    history = json.loads((Path(checkpoint) / CHECKPOINT_STATE).read_text())["log_history"]
    return [{k: v for k, v in h.items() if k == "step" or k == "step_time" or k.startswith("sepo/time/")}
            for h in history if "sepo/time/generation_s" in h]


def answer_format_of(format_dir: Path) -> dict[str, Any]:
    """Stage 4's measurement from its results.json: the SFT model's strict-parse share with the eval's
    interval (one minus the parse-failure rate's), and how its turns ended (`sepo.eval.answer_format`)."""
    saved = json.loads((format_dir / "results.json").read_text())
    [(game, result)] = saved["results"]["SFT"].items()  # the quick start plays one game
    failure = result["metrics"]["parse_failure_rate"]
    ci = failure["ci"] and [1 - failure["ci"][1], 1 - failure["ci"][0]]
    return {"game": game, "seed": saved["config"]["seed"], "strict_rate": 1 - failure["value"], "ci": ci,
            **result["answer_format"], "goal": {"strict_rate": FORMAT_GOAL, "decisions": FORMAT_DECISIONS}}


def format_line(f: dict[str, Any]) -> str:
    """One line: the strict share with its interval, the decisions, the goal, and how the failures ended."""
    ci = f" [{f['ci'][0]:.3f}, {f['ci'][1]:.3f}]" if f["ci"] else ""
    goal = f"goal ≥ {FORMAT_GOAL:.2f} on ≥ {FORMAT_DECISIONS} decisions: "
    if f["decisions"] < FORMAT_DECISIONS:
        goal += "too few decisions to tell"
    else:
        goal += "met" if f["strict_rate"] >= FORMAT_GOAL else "not met"
    return (f"SFT strict answers {f['strict_rate']:.3f}{ci} of {f['decisions']} decisions ({goal}); "
            f"of the others, {f['token_limit']} cut at the token limit and {f['ended_unparsed']} ended without one")


TOY_SCALE = ("What this scale can show: that every stage runs on the embedded model and what each one writes; "
             "whether the warm start teaches the answer format (stage 4). What it cannot: whether SEPO-GRPO "
             "improves J. Two GRPO steps on a 135M model move it little, and with 2 episodes per opponent the "
             "intervals are wide (with 1, as at CI scale, there are none). The method's evidence is the model "
             "organism study (docs/*_organism.md).")


def write_quickstart_record(record: Path, command: str, out: Path, seconds: dict[str, float],
                            load_before: float) -> Path:  # fmt: skip
    """Record the evaluation table (the eval stage's results.md and results.json), the format check (stage 4)
    and the stage timings."""
    steps = _step_timings(out / "sepo")
    lines = ["| stage | seconds |", "|---|---|"] + [f"| {k} | {v:.0f} |" for k, v in seconds.items()]
    lines += ["", "GRPO steps (from the trainer log):", "", "| step | step s | generation s | rollout s |", "|---|---|---|---|"]
    lines += [f"| {h['step']} | {h.get('step_time', float('nan')):.1f} | {h['sepo/time/generation_s']:.1f} | "
              f"{h.get('sepo/time/rollout_s', float('nan')):.1f} |" for h in steps]  # fmt: skip
    answers = answer_format_of(out / "format")
    failing = answers["failing_examples"]
    lines += ["", f"## Answer format (stage 4, seed {answers['seed']})", "", format_line(answers) + ".", "",
              "Failing texts, as the model wrote them:" if failing else "No failing text.", "",
              *(f"- {text!r}" for text in failing), "", "## Evaluation table (the eval stage's results.md)", "",
              TOY_SCALE, ""]
    table = (out / "eval" / "results.md").read_text()
    figures = {"stages_s": seconds, "grpo_steps": steps, "answer_format": answers,
               "eval": json.loads((out / "eval" / "results.json").read_text())}
    return write_record(record, title="Quick start: Base vs SFT vs SEPO on the embedded model", command=command,
                        wall_s=seconds["total"], load_before=load_before, figures=figures,
                        markdown="\n".join(lines) + "\n" + table)


if __name__ == "__main__":
    sys.exit(main())
