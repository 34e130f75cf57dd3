"""Where `sepo eval` keeps what it has played, so a rerun (after a crash or `kill -9`) resumes it.

    <output_dir>/episodes/<model>/<game>/<pool>.<opponent>.json   one unit's episode rows
    <output_dir>/episodes/<model>/<game>/<game>_exact.json         the game's exact phase (`sepo.eval.exact`)

Each file is written atomically (`sepo.files`) the moment its unit finishes, with the fingerprint of what
decides its content: the model (its path and the size and modification time of its weight and config files),
the game and its parameters, the unit, and the play settings (`EvalConfig.play_settings`). A rerun reuses a
file only when the fingerprint matches; anything else (a retrained checkpoint at the same path, another
temperature) is played again.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from sepo.files import write_json_atomic

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".json", ".model", ".gguf")


def model_stamp(model: str) -> list[Any]:
    """What identifies a model's weights without reading them: a local directory's weight and config files
    (name, size, mtime), or the name itself for a hub id or `default`."""
    path = Path(model)
    if not path.is_dir():
        return [model]
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in _WEIGHT_SUFFIXES)
    return [str(path.resolve()), *([p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files)]


def fingerprint(*parts: Any) -> str:
    """A short stable hash of JSON-able parts."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def safe_name(name: str) -> str:
    """A file-name-safe spelling of a label (labels are free text), unique by a hash suffix when changed."""
    clean = re.sub(r"[^A-Za-z0-9_.@-]+", "_", name).strip("._") or "model"
    return clean if clean == name else f"{clean}-{fingerprint(name)[:6]}"


def shard_path(output_dir: str | Path, label: str, game: str, name: str) -> Path:
    """The file of one stored unit (`name` is `<pool>.<opponent>` or `<game>_exact`)."""
    return Path(output_dir) / "episodes" / safe_name(label) / game / f"{safe_name(name)}.json"


def load_shard(path: Path, stamp: str) -> Any | None:
    """The stored data of a unit when its fingerprint is `stamp`, else None (missing, other settings, or
    unreadable: a file that cannot be parsed is played again, never trusted)."""
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return saved.get("data") if isinstance(saved, dict) and saved.get("fingerprint") == stamp else None


def save_shard(path: Path, stamp: str, data: Any) -> None:
    """Store one finished unit (atomic: a kill leaves the old file or the new one)."""
    write_json_atomic(path, {"fingerprint": stamp, "data": data}, indent=None)
