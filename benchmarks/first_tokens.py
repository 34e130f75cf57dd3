"""Where a checkpoint's first answer token goes: at every decision state of a game's exact analysis, the most
probable first tokens of the model's answer and how much of the first token the legal actions' canonical answers
hold.

The canonical-answer mass (`HFBackend.choice_masses`) says how much probability the legal actions' canonical text
plus end-of-turn keeps; when it falls, this says what took it. At each state's training prompt (the prompt the
scored table reads) one forward pass gives the next-token distribution: its `--top` tokens, and `canonical_first`,
the probability of the first tokens of the legal actions' canonical text (each action tokenised alone, as the
rollout writes it). A first token the canonical answers do not start with (the card's name, say) is mass that no
canonical answer can win back after it.

    python -m benchmarks.first_tokens --model PATH (--game GAME [--game_params JSON] | --study RECIPE)
        [--adapter DIR] [--top 5] [--out FILE]

`--study` takes the game and its parameters from an organism study's recipe (configs/experiments/*/study.yaml), so
a table of the study's checkpoints asks what they were trained on (a make target writes a follow-up's tables).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from sepo.config.checks import UsageError
from sepo.config.recipes import RecipeParser
from sepo.config.subcommands import report_usage_errors
from sepo.files import write_json_atomic
from sepo.study.organism import game_params, load_recipe, organism_game

PROG = "python -m benchmarks.first_tokens"


def first_tokens(model: Any, tokenizer: Any, game: str, params: dict[str, Any], top: int) -> dict[str, Any]:
    """{state key: {"top": [[token text, probability], ...], "canonical_first": P(a canonical answer's first
    token)}} at every decision state of `game`'s exact analysis, in its state order."""
    # deferred: torch and the renderer load in seconds; a mistake on the command line is reported first
    import torch

    from sepo.eval.exact import require
    from sepo.rollout.chat import ChatRenderer

    renderer = ChatRenderer(tokenizer)
    out = {}
    for state in require(game).states(params):
        ids = renderer.prompt_ids(state.messages)
        with torch.no_grad():
            probs = torch.softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)
        firsts = {tokenizer.encode(a, add_special_tokens=False)[0] for a in state.legal}
        best = torch.topk(probs, top)
        out[state.key] = {"top": [[tokenizer.decode([int(i)]), round(float(p), 4)]
                                  for p, i in zip(best.values, best.indices)],
                          "canonical_first": round(float(sum(probs[t] for t in firsts)), 4)}
    return out


def load(model_path: str, adapter: str | None) -> tuple[Any, Any]:
    """The model at `model_path` (with the LoRA adapter at `adapter` over it, when given) in eval mode, and its
    tokenizer."""
    # deferred: transformers and peft take seconds to import
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sepo.config.models import resolve_model

    path = resolve_model(model_path)
    model = AutoModelForCausalLM.from_pretrained(path)
    if adapter:
        # deferred: peft loads only over an adapter
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    return model.eval(), AutoTokenizer.from_pretrained(path)


@dataclass
class FirstTokensConfig:
    """The keys of `python -m benchmarks.first_tokens`."""

    model: str = field(metadata={"help": "the model (a path, or a name `sepo train` resolves)"})
    game: str | None = field(default=None, metadata={"help": "a game with an exact analysis"})
    game_params: str = field(default="{}", metadata={"help": "the game's parameters, JSON"})
    study: str | None = field(default=None, metadata={
        "help": "an organism study's recipe: its game and parameters (instead of --game and --game_params)"})
    adapter: str | None = field(default=None, metadata={"help": "a LoRA adapter directory over the model"})
    top: int = field(default=5, metadata={"help": "first tokens listed per state"})
    out: str | None = field(default=None, metadata={"help": "also write the table here (JSON)"})


def game_of(args: FirstTokensConfig) -> tuple[str, dict[str, Any]]:
    """The game and its parameters: the study recipe's (`--study`), else `--game` and `--game_params`."""
    if (args.study is None) == (args.game is None):
        raise UsageError("give either --game (with --game_params) or --study")
    if args.study is None:
        return args.game, json.loads(args.game_params)
    recipe = load_recipe(args.study)
    return organism_game(recipe).name, game_params(recipe)


def main(argv: list[str] | None = None) -> int:
    (args,) = RecipeParser((FirstTokensConfig,), prog=PROG, description=__doc__.split("\n\n")[0]).parse(
        sys.argv[1:] if argv is None else argv)
    game, params = game_of(args)
    model, tokenizer = load(args.model, args.adapter)
    table = first_tokens(model, tokenizer, game, params, args.top)
    for key, row in table.items():
        tops = ", ".join(f"{t!r} {p:.3f}" for t, p in row["top"])
        print(f"{key:>4}: canonical first tokens {row['canonical_first']:.3f}; most probable: {tops}")
    if args.out:
        write_json_atomic(args.out, {"model": args.model, "adapter": args.adapter, "game": game,
                                     "game_params": params, "states": table})
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
