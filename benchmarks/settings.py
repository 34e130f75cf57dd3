"""A benchmark's game settings, read as plain data from `configs/benchmarks/<benchmark>.yaml`.

The benchmark modules name no game (issue 37: a game is one registration): which game a benchmark plays, its
parameters and its opponents are data in that file, beside the other recipes. A file's keys are the fields of
the benchmark's settings dataclass; an unknown or missing key is a one-line `UsageError` naming the file and key.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, TypeVar

import yaml

from sepo.config.checks import UsageError

CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "benchmarks"
T = TypeVar("T")


def settings_path(benchmark: str) -> Path:
    """The settings file of `benchmark` (its module name)."""
    return CONFIGS / f"{benchmark}.yaml"


def build(kind: type[T], data: Any, where: str) -> T:
    """`data` (a mapping) as a `kind` (a dataclass): every key must be one of its fields, every field without a
    default present; `where` (a file, or a file and section) starts the error."""
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a mapping of settings, got {type(data).__name__}")
    fields = dataclasses.fields(kind)  # type: ignore[arg-type]
    known = [f.name for f in fields]
    if unknown := [k for k in data if k not in known]:
        raise UsageError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(known)})")
    required = [f.name for f in fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]  # fmt: skip
    if missing := [k for k in required if k not in data]:
        raise UsageError(f"{where}: missing key {missing[0]!r}")
    return kind(**data)


def load_settings(kind: type[T], path: str | Path) -> T:
    """The settings in the YAML mapping at `path`, as a `kind` (a dataclass): every key must be one of its fields."""
    return build(kind, yaml.safe_load(Path(path).read_text(encoding="utf-8")), str(path))


def game_settings(kind: type[T], benchmark: str) -> T:
    """`benchmark`'s settings from its file under configs/benchmarks/."""
    return load_settings(kind, settings_path(benchmark))
