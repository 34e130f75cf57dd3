"""`python -m benchmarks.record DIR --title T [--copy FILE ...] -- COMMAND ...`: run a command and record what
it measured, so a figure the README quotes comes from a committed file.

The command runs to completion (a failure records nothing and exits with its code); then `DIR/results.json`
holds the command line, its wall time, the machine, git commit, date and load average, plus the content of
every `--copy` file (JSON parsed, anything else as text), and `DIR/RESULTS.md` shows the same with every copied
markdown file inlined. The Makefile's `figures-*` targets are the commands behind the README's figures.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sepo.provenance import load_average, write_record


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
    if "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="python -m benchmarks.record", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--title", required=True)
    parser.add_argument("--copy", type=Path, action="append", default=[], help="an output file of the command")
    args = parser.parse_args(argv[:split])
    command = argv[split + 1 :]
    if not command:
        parser.error("no command after --")
    return record(args.out_dir, args.title, command, args.copy)


if __name__ == "__main__":
    sys.exit(main())
