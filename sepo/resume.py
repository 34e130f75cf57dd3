"""Train a transformers Trainer, resumed or not, to exactly its `max_steps`.

transformers' Trainer (5.16-5.17) does not compare the restored step with `max_steps` before it takes a step:
resumed from the checkpoint of step `max_steps` it trains step `max_steps + 1` (it stops only after a step).
That checkpoint is where a run resumes when a kill came after its last save: during the checkpoint's
evaluation, the final save or the model card. `train_to_max_steps` stops such a run before that extra step,
once the Trainer has restored the checkpoint (weights, optimizer, state) and every earlier callback has
finished the checkpoint's own work (SEPO's checkpoint evaluation re-runs one a kill cut short).
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments


class _AlreadyAtMaxSteps(Exception):
    """Raised out of `Trainer.train` when a resumed run has no step left to take."""


class _StopAtMaxSteps(TrainerCallback):
    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       **kwargs: Any) -> None:
        if state.max_steps > 0 and state.global_step >= state.max_steps:
            past = " (past it: max_steps was lowered)" if state.global_step > state.max_steps else ""
            if state.is_world_process_zero:
                print(f"[sepo] resumed at step {state.global_step}, max_steps {state.max_steps}{past}: nothing left "
                      "to train; the checkpoint's weights are the final ones", flush=True)
            raise _AlreadyAtMaxSteps


def train_to_max_steps(trainer: Any, resume_from_checkpoint: str | None) -> None:
    """`trainer.train(resume_from_checkpoint=...)`, except that a run resumed at its last step takes no further
    step: the model then holds the checkpoint's weights and `trainer.state` its state, as after training.
    The Trainer's closing summary (`train_loss`, `train_runtime` and `on_train_end`) is not run in that case."""
    trainer.add_callback(_StopAtMaxSteps())  # last: after the callbacks that finish the checkpoint's work
    try:
        trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    except _AlreadyAtMaxSteps:
        pass
