"""The `sepo` console script: one subcommand per stage, each implemented by its own module's `main(argv)`."""

from __future__ import annotations

import sys

from sepo.config import recipe_keys
from sepo.config.subcommands import Commands, dispatch

# subcommand -> (module, one-line help). Modules are imported lazily so `sepo --help` is instant.
COMMANDS: Commands = {
    "tournament": ("sepo.eval.tournament", "round robin among scripted strategies of one game"),
    "data": ("sepo.sft.data", "generate expert-transcript SFT datasets"),
    "sft": ("sepo.sft.train", "SFT warm-start with TRL SFTTrainer + LoRA, then merge"),
    "train": ("sepo.grpo.train", "SEPO-GRPO training on TRL GRPOTrainer"),
    "eval": ("sepo.eval.evaluate", "evaluate checkpoints against the pools (JSON, markdown, plots)"),
    "export": ("sepo.export.run", "a trained run's checkpoint as a plain (merged) model with its card; --push_to_hub"),
    "study": ("sepo.study.run", "the four-arm credit-assignment study"),
    "quickstart": ("sepo.quickstart", "data -> SFT -> SEPO-GRPO -> eval on the embedded model"),
    "tiny-model": ("sepo.tiny_models", "save a tiny random-weight model for a smoke test of a setup"),
}


def _precheck(command: str, argv: list[str]) -> None:
    """Unknown keys of `sepo train` / `sepo sft` / `sepo tiny-model` / `sepo study` (its recipe, its train
    block and arms, its eval block) before their modules import TRL or torch (sepo.config.recipe_keys)."""
    recipe_keys.check("sepo", command, argv)


def main(argv: list[str] | None = None) -> int:
    return dispatch("sepo", COMMANDS, argv, precheck=_precheck)


if __name__ == "__main__":
    sys.exit(main())
