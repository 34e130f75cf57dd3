"""A full checkpoint from a trained model: a PEFT adapter merged into its base (PEFT's `merge_and_unload`), saved
with the base's processor files and the tokenizer (its chat template included). `sepo sft` saves its merged
warm start with it and `sepo export` a trained run's checkpoint.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from transformers import AutoProcessor

from sepo.files import replace_dir_atomic

WEIGHT_SUFFIXES = frozenset({".safetensors", ".bin", ".pt", ".pth", ".gguf"})


def processor_files(src: str) -> list[Path]:
    """Non-weight files of a local checkpoint worth carrying over (processor, templates, generation config)."""
    root = Path(src)
    if not root.is_dir():
        return []
    return [p for p in root.iterdir() if p.is_file() and p.suffix not in WEIGHT_SUFFIXES and not p.name.startswith(".")]


def write_merged(model: Any, tokenizer: Any, source: str, directory: Path) -> None:
    """Write the full checkpoint of `model` (a PEFT model is merged first) into `directory`: the processor files
    of `source` (the base: a directory or a hub id), then the weights and `tokenizer`, which win over them."""
    merged = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    for f in processor_files(source):  # first, so the files written below win
        shutil.copy2(f, directory / f.name)
    if not Path(source).is_dir():  # hub id: processor files through AutoProcessor, when the model has one
        try:
            AutoProcessor.from_pretrained(source).save_pretrained(directory)
        except (OSError, ValueError, TypeError):
            pass
    merged.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def merge_and_save(model: Any, tokenizer: Any, source: str, target: str | Path, card: str | None = None) -> Path:
    """Merge a PEFT adapter into its base and save a full checkpoint atomically (`write_merged`), with the model
    card `card` (README.md) when given."""

    def build(tmp: Path) -> None:
        write_merged(model, tokenizer, source, tmp)
        if card is not None:
            (tmp / "README.md").write_text(card)

    return replace_dir_atomic(build, target)
