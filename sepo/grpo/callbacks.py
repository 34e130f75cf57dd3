"""Trainer callbacks for SEPO-GRPO runs: keep the checkpoint with the best safety score J.

The method picked its final checkpoint by safety score (late training can collapse toward defection),
so every save compares the mean logged `sepo/safety` since the previous save with the best so far and
copies a better checkpoint to `output_dir/best` (atomically), recording the choice in `best.json`.
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
        self.last_save_step = state.global_step  # a resumed run starts counting from its checkpoint

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        step = state.global_step
        score = safety_since(state.log_history, self.last_save_step, step)
        self.last_save_step = step
        if score is None or not state.is_world_process_zero:
            return
        out = Path(args.output_dir)
        best_file = out / BEST_FILE
        best = json.loads(best_file.read_text()) if best_file.is_file() else None
        if best is not None and best["safety"] >= score:
            return
        checkpoint = out / f"checkpoint-{step}"
        if not checkpoint.is_dir():
            return
        replace_dir_atomic(lambda tmp: shutil.copytree(checkpoint, tmp, dirs_exist_ok=True), out / BEST_DIR)
        write_json_atomic(best_file, {"step": step, "safety": score, "checkpoint": str(checkpoint)})
