"""The study's recorded rollouts: written by a trainer rollout hook, read back as the objective's terms."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sepo.eval.episodes import terms_from_dict
from sepo.files import write_text_atomic

__all__ = ["RolloutRecorder", "read_batches", "terms_from_dict"]  # terms_from_dict: how the study reads episodes


class RolloutRecorder:
    """A SEPOTrainer rollout hook that appends every generation batch (each episode's record and, for
    credit shared / auxiliary, the records of its probe episodes) to a JSONL file, one line per batch.

    A run resumed from the checkpoint of `resume_step` keeps the batches generated before that step (the ones
    the checkpoint trained on) and drops the rest, which the resumed run generates again. (With generation every
    k > 1 optimizer steps, a resume between two generations generates at the resume step: TRL does not save its
    buffered batch.)"""

    def __init__(self, path: Path, resume_step: int = 0) -> None:
        kept = _lines_before(path, resume_step) if resume_step else []
        self.path, self.batches = path, len(kept)
        write_text_atomic(path, "".join(kept))

    def __call__(self, trainer: Any, results: list[tuple[Any, Any, list[Any]]]) -> None:
        line = {
            "batch": self.batches,
            "step": trainer.state.global_step,
            "num_generations": trainer.num_generations,
            "episodes": [{**record.to_dict(), "probes": [p.to_dict() for p in probes]}
                         for record, _, probes in results],
        }
        with self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")
        self.batches += 1


def _lines_before(path: Path, step: int) -> list[str]:
    """The recorded lines of the batches generated before optimizer step `step`. A line a kill cut short can
    only be the last one, generated after them, so the lines are read up to the first incomplete one."""
    kept = []
    for line in path.read_text().splitlines(keepends=True) if path.is_file() else []:
        if not line.endswith("\n") or json.loads(line)["step"] >= step:
            break
        kept.append(line)
    return kept


def read_batches(path: Path) -> list[dict[str, Any]]:
    """The recorded generation batches of one arm."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


