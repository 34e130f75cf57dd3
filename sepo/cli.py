"""The `sepo` console script: one subcommand per stage, each implemented by its own module's `main(argv)`."""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module, one-line help). Modules are imported lazily so `sepo --help` is instant.
COMMANDS: dict[str, tuple[str, str]] = {
    "tournament": ("sepo.tournament", "round robin among scripted strategies of one game"),
    "data": ("sepo.sft_data", "generate expert-transcript SFT datasets"),
    "sft": ("sepo.sft", "SFT warm-start with TRL SFTTrainer + LoRA, then merge"),
    "train": ("sepo.train", "SEPO-GRPO training on TRL GRPOTrainer"),
    "eval": ("sepo.evaluate", "evaluate checkpoints against the pools (JSON, markdown, plots)"),
    "study": ("sepo.study", "the four-arm credit-assignment study"),
    "quickstart": ("sepo.quickstart", "data -> SFT -> SEPO-GRPO -> eval on the embedded model"),
    "bench": ("sepo.bench", "the performance suite (ratios against named baselines)"),
}


def _usage() -> str:
    lines = ["usage: sepo <command> [options]   (sepo <command> --help for details)", "", "commands:"]
    lines += [f"  {name:<12} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"sepo: unknown command {command!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[command][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
