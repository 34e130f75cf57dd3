"""The `fmsp` console script: `fmsp run|eval|export [options]`, each implemented by a module's `main(argv)`."""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module, one-line help). Imported lazily so `fmsp --help` is instant.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("fmsp.run", "run or resume a vFMSP / NSSP / QDSP search (--config configs/fmsp/<recipe>.yaml)"),
    "eval": ("fmsp.evaluation", "Elo over a shared population and QD-score of finished runs"),
    "export": ("fmsp.export", "export chosen policies into SEPO opponent pools"),
}


def _usage() -> str:
    lines = ["usage: fmsp <command> [options]   (fmsp <command> --help for details)", "", "commands:"]
    lines += [f"  {name:<8} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"fmsp: unknown command {command!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[command][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
