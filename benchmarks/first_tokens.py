"""Where a checkpoint's first answer token goes: at every decision state of a game's exact analysis, the most
probable first tokens of the model's answer and how much of the first token the legal actions' canonical answers
hold.

The canonical-answer mass (`HFBackend.choice_masses`) says how much probability the legal actions' canonical text
plus end-of-turn keeps; when it falls, this says what took it. At each state's training prompt (the prompt the
scored table reads) one forward pass gives the next-token distribution: its `--top` tokens, and `canonical_first`,
the probability of the first tokens of the legal actions' canonical text (each action tokenised alone, as the
rollout writes it). A first token the canonical answers do not start with (the card's name, say) is mass that no
canonical answer can win back after it.

`--nudge_lr LR` also asks where one update sends the first token: at every state and for every legal action, one
AdamW step of rate LR on a LoRA adapter (fresh from the study's LoRA keys, or the `--adapter` given) that raises
that action's first token alone, then the next-token distribution again. The table lists the non-canonical tokens
that gained the most probability: if an update towards a canonical answer also raises some other token (the card's
name, say), training the canonical answers alone moves mass to it, with no credit to that token at all.

    python -m benchmarks.first_tokens --model PATH (--game GAME [--game_params JSON] | --study RECIPE [--followup NAME])
        [--adapter DIR] [--top 5] [--nudge_lr LR] [--out FILE]

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
from sepo.study.organism import game_params, load_recipe, organism_game, selected_followups, with_game_params

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


def nudges(model: Any, tokenizer: Any, game: str, params: dict[str, Any], lr: float, top: int) -> dict[str, Any]:
    """{state key: {action: {"first": [its first token, P before, P after], "canonical_first": [before, after],
    "gainers": [[token, P before, P after], ...]}}}: for every legal action at every decision state of `game`'s
    exact analysis, one AdamW step of rate `lr` on `model`'s trainable (LoRA) parameters that maximises the log
    probability of the action's first canonical token at the state's training prompt, from the same starting
    weights each time; `gainers` are the `top` tokens outside every legal action's first token whose probability
    rose the most. Dropout is off."""
    # deferred: torch and the renderer load in seconds; a mistake on the command line is reported first
    import torch

    from sepo.eval.exact import require
    from sepo.rollout.chat import ChatRenderer

    renderer = ChatRenderer(tokenizer)
    model.eval()  # no dropout: every step is the same function of its starting weights (PEFT leaves train mode on)
    trainable = [p for p in model.parameters() if p.requires_grad]
    start = [p.detach().clone() for p in trainable]

    def probs_at(ids: list[int]) -> Any:
        with torch.no_grad():
            return torch.softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)

    out = {}
    for state in require(game).states(params):
        ids = renderer.prompt_ids(state.messages)
        firsts = {a: tokenizer.encode(a, add_special_tokens=False)[0] for a in state.legal}
        before = probs_at(ids)
        row = {}
        for action, token in firsts.items():
            with torch.no_grad():
                for p, p0 in zip(trainable, start):
                    p.copy_(p0)
            optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=0.0)
            loss = -torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)[token]
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            after = probs_at(ids)
            gain = after - before
            gain[list(firsts.values())] = float("-inf")
            row[action] = {
                "first": [tokenizer.decode([token]), float(before[token]), float(after[token])],
                "canonical_first": [float(sum(before[t] for t in firsts.values())),
                                    float(sum(after[t] for t in firsts.values()))],
                "gainers": [[tokenizer.decode([int(i)]), float(before[i]), float(after[i])]
                            for i in torch.topk(gain, top).indices]}
        with torch.no_grad():
            for p, p0 in zip(trainable, start):
                p.copy_(p0)
        out[state.key] = row
    return out


def canonical_fell(nudged: dict[str, Any]) -> list[str]:
    """"state action" for every nudge after which the legal actions' first tokens held less probability than
    before: a step towards one canonical answer that gave mass to text no canonical answer starts with."""
    return [f"{key} {action}" for key, row in nudged.items() for action, n in row.items()
            if n["canonical_first"][1] < n["canonical_first"][0]]


def trainable_lora(model: Any, recipe: dict[str, Any] | None) -> Any:
    """`model` with a fresh LoRA adapter built as `sepo train` builds it (trl's `get_peft_config` of the study
    recipe's `train` LoRA keys; `SEPOModelConfig`'s defaults without a recipe), at a fixed initialisation."""
    # deferred: trl, peft and torch take seconds to import
    import torch
    from peft import get_peft_model
    from trl import get_peft_config

    from sepo.lora import SEPOModelConfig

    keys = ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")
    train = (recipe or {}).get("train", {})
    config = SEPOModelConfig(use_peft=True, **{k: train[k] for k in keys if k in train})
    torch.manual_seed(0)
    return get_peft_model(model, get_peft_config(config))


def load(model_path: str, adapter: str | None, trainable: bool = False) -> tuple[Any, Any]:
    """The model at `model_path` (with the LoRA adapter at `adapter` over it, when given: `trainable` to update it)
    in eval mode, and its tokenizer."""
    # deferred: transformers and peft take seconds to import
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sepo.config.models import resolve_model

    path = resolve_model(model_path)
    model = AutoModelForCausalLM.from_pretrained(path)
    if adapter:
        # deferred: peft loads only over an adapter
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter, is_trainable=trainable)
    return model.eval(), AutoTokenizer.from_pretrained(path)


@dataclass
class FirstTokensConfig:
    """The keys of `python -m benchmarks.first_tokens`."""

    model: str = field(metadata={"help": "the model (a path, or a name `sepo train` resolves)"})
    game: str | None = field(default=None, metadata={"help": "a game with an exact analysis"})
    game_params: str = field(default="{}", metadata={"help": "the game's parameters, JSON"})
    study: str | None = field(default=None, metadata={
        "help": "an organism study's recipe: its game and parameters (instead of --game and --game_params)"})
    followup: str | None = field(default=None, metadata={
        "help": "with --study: the game's parameters as this follow-up of the recipe runs it"})
    adapter: str | None = field(default=None, metadata={"help": "a LoRA adapter directory over the model"})
    top: int = field(default=5, metadata={"help": "first tokens listed per state"})
    nudge_lr: float | None = field(default=None, metadata={
        "help": "also take one AdamW step of this rate towards each legal action's first token, and list what else "
                "gained"})  # fmt: skip
    out: str | None = field(default=None, metadata={"help": "also write the table here (JSON)"})


def game_of(args: FirstTokensConfig) -> tuple[str, dict[str, Any], dict[str, Any] | None]:
    """The game, its parameters and the study's recipe: the study recipe's (`--study`; as its follow-up
    `--followup` runs them, when given), else `--game` and `--game_params` with no recipe."""
    if (args.study is None) == (args.game is None):
        raise UsageError("give either --game (with --game_params) or --study")
    if args.study is None:
        if args.followup is not None:
            raise UsageError("--followup needs --study")
        return args.game, json.loads(args.game_params), None
    recipe = load_recipe(args.study)
    if args.followup is not None:
        recipe = with_game_params(recipe, selected_followups(recipe, [args.followup])[args.followup].get("game_params"))
    return organism_game(recipe).name, game_params(recipe), recipe


def main(argv: list[str] | None = None) -> int:
    (args,) = RecipeParser((FirstTokensConfig,), prog=PROG, description=__doc__.split("\n\n")[0]).parse(
        sys.argv[1:] if argv is None else argv)
    game, params, recipe = game_of(args)
    if args.nudge_lr is not None and not args.nudge_lr > 0:
        raise UsageError(f"--nudge_lr must be positive, got {args.nudge_lr}")
    model, tokenizer = load(args.model, args.adapter, trainable=args.nudge_lr is not None)
    table = first_tokens(model, tokenizer, game, params, args.top)
    for key, row in table.items():
        tops = ", ".join(f"{t!r} {p:.3f}" for t, p in row["top"])
        print(f"{key:>4}: canonical first tokens {row['canonical_first']:.3f}; most probable: {tops}")
    written = {"model": args.model, "adapter": args.adapter, "game": game, "game_params": params, "states": table}
    if args.nudge_lr is not None:
        nudged = nudges(model if args.adapter else trainable_lora(model, recipe), tokenizer, game, params,
                        args.nudge_lr, args.top)
        for key, row in nudged.items():
            for action, n in row.items():
                gainers = ", ".join(f"{t!r} {b:.4f}->{a:.4f}" for t, b, a in n["gainers"][:3])
                print(f"{key:>4} towards {action}: {n['first'][0]!r} {n['first'][1]:.4f}->{n['first'][2]:.4f}; "
                      f"gained most: {gainers}")
        fell = canonical_fell(nudged)
        print(f"a step towards one canonical answer lowered the canonical answers' first-token share in {len(fell)} "
              f"of {sum(map(len, nudged.values()))}: {', '.join(fell)}")
        written |= {"nudge_lr": args.nudge_lr, "nudges": nudged, "canonical_fell": fell}
    if args.out:
        write_json_atomic(args.out, written)
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
