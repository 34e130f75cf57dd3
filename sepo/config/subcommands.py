"""Git-style subcommand dispatch shared by the `sepo` and `fmsp` console scripts.

Each subcommand is a module with `main(argv) -> int | None`, imported only when chosen so `--help` is instant.
A user mistake (`sepo.config.checks.UsageError`) is printed as `<prog> <command>: error: <message>` with exit
status 2 and no traceback; `--debug` (before the command, or after it where the command has no `debug` key of
its own) or SEPO_DEBUG=1 lets the traceback through.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version

from envs.sandbox.text import safe_text
from sepo import __version__
from sepo.config.checks import UsageError, debug_enabled, did_you_mean

Commands = dict[str, tuple[str, str]]  # subcommand -> (module, one-line help)


def usage(prog: str, commands: Commands) -> str:
    """The top-level help text: one line per subcommand."""
    width = max(len(name) for name in commands) + 2
    lines = [f"usage: {prog} <command> [options]   ({prog} <command> --help for details)", "", "commands:"]
    lines += [f"  {name:<{width}} {help_}" for name, (_, help_) in commands.items()]
    lines += ["", "options:", f"  {'--version':<{width}} print the version and exit",
              f"  {'--debug':<{width}} show the full traceback of an error (same as SEPO_DEBUG=1)"]
    return "\n".join(lines)


def version() -> str:
    try:
        return package_version("sepo-fmsp")
    except PackageNotFoundError:  # a source tree that was never installed
        return __version__


def dispatch(prog: str, commands: Commands, argv: list[str] | None = None,
             precheck: Callable[[str, list[str]], None] | None = None) -> int:  # fmt: skip
    """Run `argv[0]`'s module with the remaining arguments. No command prints the usage and returns 2, as does
    an unknown one; a UsageError from the command is printed and returns 2. `precheck(command, arguments)`
    runs before the command's module is imported (a mistake found there costs no heavy import)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = bool(argv) and argv[0] == "--debug"
    while argv and argv[0] == "--debug":
        argv.pop(0)
    if not argv:
        print(usage(prog, commands), file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        print(usage(prog, commands))
        return 0
    if argv[0] == "--version":
        print(f"{prog} {version()}")
        return 0
    command, rest = argv[0], argv[1:]
    if command not in commands:
        print(f"{prog}: unknown command {command!r}{did_you_mean(command, commands)}\n\n{usage(prog, commands)}",
              file=sys.stderr)
        return 2

    def run() -> int | None:
        if precheck is not None:
            precheck(command, rest)
        return importlib.import_module(commands[command][0]).main(rest)

    return report_usage_errors(f"{prog} {command}", run, debug)


def report_usage_errors(prog: str, run: Callable[[], int | None], debug: bool = False) -> int:
    """`run()`'s exit status; a UsageError it raises is printed as `<prog>: error: <message>` and returns 2
    (`debug` or SEPO_DEBUG=1: the traceback instead). The subcommands get it from `dispatch`; a module run
    as `python -m <module>` wraps its `main` in it."""
    try:
        return int(run() or 0)
    except UsageError as exc:
        if debug or debug_enabled():  # a command's own --debug flag sets SEPO_DEBUG while parsing
            raise
        # a message may quote a policy's or a manifest's words (e.g. a pool member's smoke-test failure)
        print(f"{prog}: error: {safe_text(str(exc), 8000, multiline=True)}", file=sys.stderr)
        return 2
