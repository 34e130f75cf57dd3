"""Trainer callbacks for SEPO-GRPO runs: keep the checkpoint with the best safety score J.

The method picked its final checkpoint by safety score (late training can collapse toward defection),
so every save compares the mean logged `sepo/safety` since the previous save with the best so far and
copies a better checkpoint to `output_dir/best` (atomically), recording the choice in `best.json`.

The record that decides is `best/best.json`, swapped in with the directory it describes, so a kill cannot
separate the two; `output_dir/best.json` is its copy for readers, written after the swap and restored from it
when training (re)starts.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from sepo.files import replace_dir_atomic, write_json_atomic

SAFETY_KEY = "sepo/safety"
BEST_DIR = "best"
BEST_FILE = "best.json"


def safety_since(log_history: list[dict], after_step: int, upto_step: int) -> float | None:
    """Mean logged safety score over steps in (after_step, upto_step], None if none was logged."""
    values = [h[SAFETY_KEY] for h in log_history if SAFETY_KEY in h and after_step < h.get("step", 0) <= upto_step]
    return sum(values) / len(values) if values else None


class BestSafetyCallback(TrainerCallback):
    """On every save, keep a copy of the checkpoint whose recent mean safety score J is the best so far."""

    def __init__(self) -> None:
        self.last_save_step = 0

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        self.last_save_step = step = state.global_step  # a resumed run starts counting from its checkpoint
        if step == 0 or not state.is_world_process_zero:
            return
        # Resuming: a kill may have come after the checkpoint was saved but before (or while) this callback
        # judged it, or between the swap of best/ and the copy of its record. Judging it again is idempotent.
        if args.save_strategy == "steps" and state.save_steps:
            previous = (step - 1) // int(state.save_steps) * int(state.save_steps)
            keep_if_best(Path(args.output_dir), step, safety_since(state.log_history, previous, step))
        record = Path(args.output_dir) / BEST_DIR / BEST_FILE
        if record.is_file():
            write_json_atomic(Path(args.output_dir) / BEST_FILE, json.loads(record.read_text()))

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        step = state.global_step
        score = safety_since(state.log_history, self.last_save_step, step)
        self.last_save_step = step
        if state.is_world_process_zero:
            keep_if_best(Path(args.output_dir), step, score)


def keep_if_best(out: Path, step: int, score: float | None) -> None:
    """Copy `checkpoint-<step>` to `best/` if `score` beats the recorded best; the record `best/best.json` is
    swapped in with the copy, then copied to `best.json`."""
    record = out / BEST_DIR / BEST_FILE
    best = json.loads(record.read_text()) if record.is_file() else None
    checkpoint = out / f"checkpoint-{step}"
    if score is None or (best is not None and best["safety"] >= score) or not checkpoint.is_dir():
        return
    choice = {"step": step, "safety": score, "checkpoint": str(checkpoint)}

    def build(tmp: Path) -> None:
        shutil.copytree(checkpoint, tmp, dirs_exist_ok=True)
        write_json_atomic(tmp / BEST_FILE, choice)

    replace_dir_atomic(build, out / BEST_DIR)
    write_json_atomic(out / BEST_FILE, choice)
