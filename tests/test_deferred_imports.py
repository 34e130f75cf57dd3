"""Imports stay at module top; one inside a function says why it is deferred.

The packages import at their top, except heavy or optional dependencies (and the project modules that load
them) kept out of start-up so a command's mistakes are reported in seconds. Each such import statement inside
a function carries a `# deferred: <reason>` comment: on its first line, in the comment lines directly above it,
or on an earlier statement of the run of import statements it belongs to (consecutive statements of one body,
with only blank lines or comments between them; any other statement ends the run). Module-level
`if TYPE_CHECKING:` blocks and other module-level imports are not in functions and need nothing. Read with `ast`
and the source lines, without importing anything.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sepo", "fmsp", "envs", "benchmarks")
REASON = re.compile(r"#\s*deferred:\s*\S")
BODIES = ("body", "orelse", "finalbody")


def _has_reason(lines: list[str], line: int) -> bool:
    """A `# deferred: <reason>` on source line `line` (1-based) or in the comment lines right above it."""
    if REASON.search(lines[line - 1]):
        return True
    above = line - 2
    while above >= 0 and lines[above].lstrip().startswith("#"):
        if REASON.search(lines[above]):
            return True
        above -= 1
    return False


def _import_runs(function: ast.AST) -> Iterator[list[ast.stmt]]:
    """Every run of consecutive import statements, at any depth inside `function`."""
    for node in ast.walk(function):
        for name in BODIES:
            body = getattr(node, name, None)
            if not isinstance(body, list):
                continue
            run: list[ast.stmt] = []
            for statement in [*body, None]:
                if isinstance(statement, ast.Import | ast.ImportFrom):
                    run.append(statement)
                elif run:
                    yield run
                    run = []


def unexplained(source: str, filename: str) -> list[int]:
    """The lines of the import statements inside functions of `source` that have no stated reason: none on the
    statement, nor on an earlier statement of its run."""
    lines = source.splitlines()
    found = set()
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for run in _import_runs(node):
                stated = False
                for statement in run:
                    stated = stated or _has_reason(lines, statement.lineno)
                    if not stated:
                        found.add(statement.lineno)
    return sorted(found)


def test_the_reader_finds_unexplained_imports_in_functions():
    """The checker itself, on a made-up module: what counts as stated, and what does not."""
    source = (
        "from typing import TYPE_CHECKING\n"  # 1: module level
        "if TYPE_CHECKING:\n"
        "    import torch\n"  # 3: module level, fine
        "def f():\n"
        "    import json\n"  # 5: no reason
        "    # deferred: trl costs seconds;\n"
        "    #   only training needs it\n"
        "    import trl\n"  # 8: reason in the block above
        "\n"
        "    from sepo import recipes\n"  # 10: same run as line 8
        "    x = 1\n"
        "    import yaml\n"  # 12: a statement ended the run
        "    import numpy  # deferred: in-line reason\n"  # 13: covers itself, not line 12 before it
        "    y = 2\n"
        "    # deferred:\n"
        "    import os\n"  # 16: a reason must say something
        "    class C:\n"
        "        def g(self):\n"
        "            if x:\n"
        "                from a import (  # deferred: the reason on the first line\n"  # 20: nested, multi-line
        "                    b,\n"
        "                )\n"
        "            else:\n"
        "                import c\n"  # 24: nested, no reason
    )
    assert unexplained(source, "made_up.py") == [5, 12, 16, 24]


def test_every_import_inside_a_function_states_why_it_is_deferred():
    missing = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for line in unexplained(path.read_text(), str(path)):
                missing.append(f"  {path.relative_to(ROOT)}:{line}")
    assert not missing, ("imports inside functions without a `# deferred: <reason>` comment (move them to the "
                         "module top, or say why they wait):\n" + "\n".join(missing))
