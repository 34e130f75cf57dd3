"""`python -m benchmarks.startup [--out DIR] [--repeats N]`: how long every `sepo` and `fmsp` command takes to
reject a misspelt flag, against the named baseline of importing TRL's GRPOConfig (what a command that built TRL's
config first would pay before it could say anything).

Each command line runs `--repeats` times in a fresh process; the median wall time, the exit code and the first
line of the error are recorded in DIR (RESULTS.md, results.json) with the ratio to the baseline's median.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sepo.config.checks import UsageError
from sepo.config.provenance import load_average, write_record
from sepo.config.recipes import RecipeParser
from sepo.config.subcommands import report_usage_errors

TYPO = "--bogus_flag"
COMMANDS = [["sepo", c] for c in ("train", "sft", "eval", "data", "tournament", "study", "quickstart", "tiny-model")]
COMMANDS += [["fmsp", c] for c in ("run", "eval", "export", "match")]
BASELINE = [sys.executable, "-c", "from trl import GRPOConfig"]


def _timed(argv: list[str], repeats: int) -> dict[str, Any]:
    """Median wall seconds of `argv` over `repeats` fresh processes, its exit code and last stderr line."""
    seconds, proc = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True)
        seconds.append(time.perf_counter() - t0)
    lines = proc.stderr.strip().splitlines()
    return {"median_s": statistics.median(seconds), "runs_s": seconds, "exit": proc.returncode,
            "message": lines[-1] if lines else ""}


PROG = "python -m benchmarks.startup"


@dataclass
class StartupConfig:
    """The keys of `python -m benchmarks.startup` (command line or `--config` recipe)."""

    out: str = field(default="benchmarks/startup", metadata={"help": "the record"})
    repeats: int = field(default=3, metadata={"help": "fresh processes per command line"})

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise UsageError("--repeats must be >= 1")


def main(argv: list[str] | None = None) -> int:
    (args,) = RecipeParser((StartupConfig,), prog=PROG, description=__doc__.splitlines()[0]).parse(
        sys.argv[1:] if argv is None else argv)
    load_before, t0 = load_average(), time.perf_counter()
    baseline = _timed(BASELINE, args.repeats)
    rows = []
    for prog, command in COMMANDS:
        line = [sys.executable, "-m", f"{prog}.cli", command, TYPO, "1"]
        rows.append({"command": f"{prog} {command} {TYPO} 1", **_timed(line, args.repeats)})
        print(f"{rows[-1]['command']}: {rows[-1]['median_s']:.2f} s, exit {rows[-1]['exit']}", flush=True)
    lines = [f"Baseline: `python -c 'from trl import GRPOConfig'`, median {baseline['median_s']:.2f} s.", "",
             "| command | median s | / baseline | exit | message |", "|---|---|---|---|---|"]
    lines += [f"| `{r['command']}` | {r['median_s']:.2f} | {r['median_s'] / baseline['median_s']:.2f} | {r['exit']} | "
              f"{r['message']} |" for r in rows]  # fmt: skip
    write_record(Path(args.out), title="Start-up: a misspelt flag, rejected", command="python -m benchmarks.startup",
                 wall_s=time.perf_counter() - t0, load_before=load_before,
                 figures={"baseline": baseline, "commands": rows}, markdown="\n".join(lines))  # fmt: skip
    print(f"recorded in {args.out}/RESULTS.md and results.json")
    return 0 if all(r["exit"] == 2 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
