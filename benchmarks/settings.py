"""A benchmark's game settings, read as plain data from `configs/benchmarks/<benchmark>.yaml`.

The benchmark modules name no game (issue 37: a game is one registration): which game a benchmark plays, its
parameters and its opponents are data in that file, beside the other recipes. A file's keys are the fields of
the benchmark's settings dataclass, read by the recipe parser's `load_section`: an unknown or missing key, or a
value of the wrong type, is a one-line `UsageError` naming the file and key.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from sepo.config.recipes import load_section

CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "benchmarks"
T = TypeVar("T")


def settings_path(benchmark: str) -> Path:
    """The settings file of `benchmark` (its module name)."""
    return CONFIGS / f"{benchmark}.yaml"


def game_settings(kind: type[T], benchmark: str) -> T:
    """`benchmark`'s settings from its file under configs/benchmarks/."""
    return load_section(kind, settings_path(benchmark))
