"""The module jumps of one SEPO-GRPO step, from dataset row to loss: how many files a reader follows.

One training step of `SEPOTrainer` on a tiny CPU Llama (the game, rounds and one opponent per pool of
configs/benchmarks/step_trace.yaml, four rollouts against each opponent, HF generation) runs under `sys.setprofile`,
from the step's start to its end (a callback's `on_step_begin` and `on_step_end`). Only frames of the `sepo` package
count; TRL's, transformers', torch's and the games' (`envs`) frames are transparent (and so are comprehensions and
dataclasses' generated methods, which are part of the function they sit in or have no code in a file), so a `sepo`
function that TRL calls back is reached from the nearest `sepo` frame below it (the seam). Each distinct call
(caller function, callee function) counts once, however often and by whatever route it is made: a loop over rounds
or episodes that calls the same function from the same place is read once. A jump is such a call from one module
into another; a module's entries are the jumps into it.

    python -m benchmarks.step_trace [--out benchmarks/step_trace/trace.txt]

prints (and writes to `--out`) the jump count, each module's entries, and the jumps in the order they are first
taken. The counts before and after issue 37's reshape are in docs/training.md ("A step, file by file").
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from benchmarks.settings import game_settings
from sepo.config.recipes import RecipeParser
from sepo.config.subcommands import report_usage_errors

PROG = "python -m benchmarks.step_trace"
PACKAGE = "sepo"
TRANSPARENT = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>")  # part of the function they sit in

Frame = tuple[str, str]  # (module, function qualname)


@dataclass(frozen=True)
class StepSettings:
    """The traced step's games, their parameters and pool mix (configs/benchmarks/step_trace.yaml)."""

    games: list[str]
    game_params: dict[str, Any]
    pool_mix: dict[str, Any]


@dataclass
class Trace:
    """Distinct calls between `sepo` functions, (caller, callee), in the order first made."""

    calls: dict[tuple[Frame, Frame], None] = field(default_factory=dict)

    def jumps(self) -> list[tuple[Frame, Frame]]:
        """(caller, callee) of every distinct call from one module into another."""
        return [(a, b) for a, b in self.calls if a[0] != b[0]]

    def entries(self) -> Counter[str]:
        """Module -> the jumps into it."""
        return Counter(callee[0] for _, callee in self.jumps())

    def report(self) -> str:
        """The jump count, the entries per module (most first) and the jumps in order, as text."""
        jumps, entries = self.jumps(), self.entries()
        lines = [f"module jumps: {len(jumps)}", f"distinct calls: {len(self.calls)}",
                 f"most entries of one module: {max(entries.values(), default=0)}", "", "entries per module:"]
        lines += [f"  {n:3d}  {module}" for module, n in entries.most_common()]
        lines += ["", "jumps, in the order first taken (caller -> callee):"]
        lines += [f"  {a[0]}.{a[1]} -> {b[0]}.{b[1]}" for a, b in jumps]
        return "\n".join(lines) + "\n"


class Tracer:
    """`sys.setprofile` hook keeping the stack of `sepo` frames and recording each distinct call between them."""

    def __init__(self) -> None:
        self.trace, self.stack = Trace(), []

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            code = frame.f_code
            generated = "__create_fn__" in code.co_qualname  # a dataclass's generated method: no code in a file
            ours = module == PACKAGE or module.startswith(PACKAGE + ".")
            if ours and code.co_name not in TRANSPARENT and not generated:
                callee = (module, code.co_qualname)
                if self.stack:
                    self.trace.calls.setdefault((self.stack[-1][1], callee), None)
                self.stack.append((frame, callee))
        elif event == "return" and self.stack and self.stack[-1][0] is frame:
            self.stack.pop()


class StepTrace(TrainerCallback):
    """Profiles exactly one training step (the first)."""

    def __init__(self) -> None:
        self.tracer: Tracer | None = None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.tracer is None:
            self.tracer = Tracer()
            sys.setprofile(self.tracer)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        sys.setprofile(None)


def trace_step(workdir: Path) -> Trace:
    """One step of a tiny SEPO-GRPO run in `workdir`, traced."""
    # deferred: the trainer imports TRL (seconds); `--help` needs none of it
    from sepo.grpo.config import SEPOConfig
    from sepo.grpo.trainer import SEPOTrainer
    from sepo.tiny_models import save_tiny_model

    model = save_tiny_model(workdir / "model")
    step = game_settings(StepSettings, "step_trace")
    args = SEPOConfig(
        output_dir=str(workdir / "run"), use_cpu=True, bf16=False, report_to="none", max_steps=1, logging_steps=1,
        save_strategy="no", gradient_checkpointing=False, games=step.games, game_params=step.game_params,
        num_generations=4, pool_mix=step.pool_mix,
        per_device_train_batch_size=12, max_turn_tokens=8, max_completion_length=128, seed=0)
    tracer = StepTrace()
    trainer = SEPOTrainer(model=str(model), args=args, callbacks=[tracer])
    trainer.train()
    assert tracer.tracer is not None, "the step never began"
    return tracer.tracer.trace


@dataclass
class StepTraceConfig:
    """The keys of `python -m benchmarks.step_trace`."""

    out: str = field(default="benchmarks/step_trace/trace.txt", metadata={"help": "where the report is written"})


def main(argv: list[str] | None = None) -> int:
    (cfg,) = RecipeParser((StepTraceConfig,), prog=PROG, description=__doc__.split("\n\n")[0]).parse(
        sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        text = trace_step(Path(tmp)).report()
    Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
    Path(cfg.out).write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
