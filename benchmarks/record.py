"""`python -m benchmarks.record DIR --title T [--copy FILE ...] -- COMMAND ...`: run a command and record what
it measured, so a figure the README quotes comes from a committed file.

The command runs to completion (a failure records nothing and exits with its code); then `DIR/results.json`
holds the command line, its wall time, the machine, git commit, date and load average, plus the content of
every `--copy` file (JSON parsed, anything else as text), and `DIR/RESULTS.md` shows the same with every copied
markdown file inlined. The Makefile's `figures-*` targets are the commands behind the README's figures.

The options before `--` are read by the project's one recipe parser (`sepo.config.recipes.RecipeParser`, the keys of
`RecordConfig`); DIR, given first, is `--out_dir`.
"""

from __future__ import annotations

import json
import shlex
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

PROG = "python -m benchmarks.record"


@dataclass
class RecordConfig:
    """The keys of `python -m benchmarks.record` (before `--`; the command to run follows it)."""

    out_dir: str = field(metadata={"help": "the record's folder (or DIR, the first word)"})
    title: str = field(metadata={"help": "the record's title"})
    copy: list[str] = field(default_factory=list, metadata={
        "help": "an output file of the command, recorded with it (repeat for several)", "repeatable": True})


def record(out_dir: Path, title: str, command: list[str], copies: list[Path]) -> int:
    """Run `command`; on success record its wall time and the `copies` in `out_dir`. Returns its exit code."""
    load_before, t0 = load_average(), time.perf_counter()
    code = subprocess.run(command).returncode
    wall_s = time.perf_counter() - t0
    if code != 0:
        print(f"benchmarks.record: {shlex.join(command)} exited {code}; nothing recorded", file=sys.stderr)
        return code
    files: dict[str, Any] = {}
    markdown = [f"| command | wall s |\n|---|---|\n| `{shlex.join(command)}` | {wall_s:.1f} |"]
    for path in copies:
        text = path.read_text()
        files[str(path)] = json.loads(text) if path.suffix == ".json" else text
        if path.suffix == ".md":
            markdown.append(f"## {path}\n\n{text}")
    write_record(out_dir, title=title, command=shlex.join(command), wall_s=wall_s, load_before=load_before,
                 figures={"files": files}, markdown="\n\n".join(markdown))  # fmt: skip
    print(f"recorded in {out_dir}/RESULTS.md and results.json")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    options, command = argv[:split], argv[split + 1 :]
    if options and not options[0].startswith("-"):
        options = ["--out_dir", *options]  # `DIR --title T ...`, as the Makefile writes it
    (args,) = RecipeParser((RecordConfig,), prog=PROG, description=__doc__.splitlines()[0]).parse(options)
    if not command:
        raise UsageError(f"no command after --: {PROG} DIR --title T [--copy FILE ...] -- COMMAND ...")
    return record(Path(args.out_dir), args.title, command, [Path(p) for p in args.copy])


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
