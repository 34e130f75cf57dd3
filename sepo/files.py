"""Atomic file writes: the one way this project replaces a file.

A reader (or a run resumed after `kill -9`) sees either the old file or the new one, never a torn write:
the content goes to a temporary file in the same directory, is flushed and fsynced, then `os.replace`d over
the target. Parent directories are created; a failed write leaves no temporary file behind.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any


def write_atomic(path: str | Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Replace `path` with what `write(fh)` writes to a binary file handle."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Replace `path` with `text` (UTF-8)."""
    return write_atomic(path, lambda fh: fh.write(text.encode("utf-8")))


def write_json_atomic(path: str | Path, data: Any, indent: int | None = 2) -> Path:
    """Replace `path` with `data` as strict JSON (NaN and infinities are an error, not bare `NaN`)."""
    return write_text_atomic(path, json.dumps(data, indent=indent, allow_nan=False) + "\n")


def write_jsonl_atomic(path: str | Path, rows: Iterable[Any]) -> Path:
    """Replace `path` with one JSON line per row."""
    return write_text_atomic(path, "".join(json.dumps(row, allow_nan=False) + "\n" for row in rows))


def replace_dir_atomic(build: Callable[[Path], None], target: str | Path) -> Path:
    """Build a directory with `build(tmp_dir)` next to `target`, then swap it in (the old one is removed only
    after the new one is complete)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        build(tmp)
        if target.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
            os.replace(target, trash / target.name)
            os.replace(tmp, target)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


# --- reading back after a kill --------------------------------------------------------------------------------
CHECKPOINT_STATE = "trainer_state.json"  # transformers' Trainer writes it last into a checkpoint directory
RUN_CONFIG = "sepo_config.json"  # `sepo train` writes its resolved config there in output_dir


def set_aside(path: str | Path) -> Path | None:
    """Rename a non-empty directory to `<name>.replaced-<UTC time>` beside it (nothing is deleted), so a run
    can start afresh at `path`; returns the new path, or None when there was nothing to move."""
    path = Path(path)
    if not path.is_dir() or not any(path.iterdir()):
        return None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return path.rename(path.with_name(f"{path.name}.replaced-{stamp}"))


def complete_checkpoints(output_dir: str | Path) -> list[Path]:
    """The `checkpoint-<step>` directories of a transformers Trainer run that were completely written, by step.

    The Trainer writes a checkpoint's files in place (weights, optimizer, scheduler, RNG state, then
    `trainer_state.json` last), so a process killed while saving leaves a directory without a readable
    trainer state; resuming from it fails ("Can't find a valid checkpoint"). Such directories are left out.
    """
    root = Path(output_dir)
    if not root.is_dir():
        return []
    steps = sorted(
        (int(p.name.split("-", 1)[1]), p)
        for p in root.iterdir()
        if p.is_dir() and p.name.startswith("checkpoint-") and p.name.split("-", 1)[1].isdigit()
    )
    complete = []
    for _, path in steps:
        try:
            json.loads((path / CHECKPOINT_STATE).read_text())
        except (OSError, ValueError):
            continue
        complete.append(path)
    return complete


def last_complete_checkpoint(output_dir: str | Path) -> str | None:
    """The newest complete checkpoint in `output_dir` (see `complete_checkpoints`), None when there is none."""
    complete = complete_checkpoints(output_dir)
    return str(complete[-1]) if complete else None


def resolve_resume(value: str | bool | None, output_dir: str | Path) -> str | None:
    """A `resume_from_checkpoint` setting as the training CLIs take it: `true`/`auto` -> the last complete
    checkpoint in `output_dir` (None, i.e. a fresh start, when there is none); `false`/`none`/empty -> None;
    anything else is a checkpoint path, returned as given."""
    if value is None or value is False or str(value).lower() in ("false", "none", ""):
        return None
    if value is True or str(value).lower() in ("true", "auto"):
        return last_complete_checkpoint(output_dir)
    return str(value)
