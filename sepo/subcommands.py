"""Git-style subcommand dispatch shared by the `sepo` and `fmsp` console scripts.

Each subcommand is a module with `main(argv) -> int | None`, imported only when chosen so `--help` is instant.
"""

from __future__ import annotations

import importlib
import sys

Commands = dict[str, tuple[str, str]]  # subcommand -> (module, one-line help)


def usage(prog: str, commands: Commands) -> str:
    """The top-level help text: one line per subcommand."""
    width = max(len(name) for name in commands) + 2
    lines = [f"usage: {prog} <command> [options]   ({prog} <command> --help for details)", "", "commands:"]
    lines += [f"  {name:<{width}} {help_}" for name, (_, help_) in commands.items()]
    return "\n".join(lines)


def dispatch(prog: str, commands: Commands, argv: list[str] | None = None) -> int:
    """Run `argv[0]`'s module with the remaining arguments; unknown commands print the usage and return 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(prog, commands))
        return 0
    command, rest = argv[0], argv[1:]
    if command not in commands:
        print(f"{prog}: unknown command {command!r}\n\n{usage(prog, commands)}", file=sys.stderr)
        return 2
    module = importlib.import_module(commands[command][0])
    return int(module.main(rest) or 0)
