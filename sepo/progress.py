"""One printed line per optimizer step of `sepo sft` and `sepo train`, so a slow or stalled run says why.

Transformers' progress bar redraws one line in place, which a log file or CI keeps as one unreadable line,
and it says nothing about the machine. `StepProgress` prints, after every step on the main process: the step
and the steps to go, the step's seconds, the mean over this run's steps, an estimate of the time left (the
mean times the steps to go), and the machine's 1-minute load average against its cores (a step that takes
100 times the idle figure on a shared machine shows its cause beside it).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from sepo.config.provenance import load_average


def duration(seconds: float) -> str:
    """`42 s`, `3.5 min` or `1.2 h`: the estimate's unit follows its size."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class StepProgress(TrainerCallback):
    """Print `label step k/n: s this step, mean s/step, about T left; load L on C cores` after every step.

    A resumed run counts its mean from the step it resumed at. `clock` and `load` are the time and load sources
    (time.perf_counter and the 1-minute load average)."""

    def __init__(self, label: str, out: TextIO | None = None, clock: Callable[[], float] = time.perf_counter,
                 load: Callable[[], float] = load_average) -> None:
        self.label, self.out, self.clock, self.load = label, out, clock, load
        self.start = self.last = 0.0
        self.first_step = 0

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       **kwargs: Any) -> None:
        self.start = self.last = self.clock()
        self.first_step = state.global_step

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> None:
        now = self.clock()
        step_s, self.last = now - self.last, now
        if not state.is_world_process_zero:
            return
        done = state.global_step - self.first_step
        mean = (now - self.start) / max(done, 1)
        left = max(state.max_steps - state.global_step, 0)
        print(f"{self.label} step {state.global_step}/{state.max_steps}: {step_s:.1f} s, mean {mean:.1f} s/step, "
              f"about {duration(left * mean)} left; load {self.load():.1f} on {os.cpu_count()} cores",
              file=self.out or sys.stdout, flush=True)
