"""The LoRA target modules, defined once for `sepo train` and `sepo sft`.

Both commands put LoRA on the language model's attention projections only (q/k/v/o): Gemma 4 / Qwen 3.5
checkpoints carry vision and audio towers whose q/k/v/o projections (Gemma4ClippableLinear wrappers among
them) must stay untouched. `sepo sft` has it as its config's default; `sepo train` reads trl's ModelConfig,
whose default (None: PEFT's per-architecture choice) `SEPOModelConfig` replaces with the same regex, so the
recipes need not repeat it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import ModelConfig

LANGUAGE_MODEL_ATTENTION = r"^(?!.*(?:vision|audio|visual|multi_modal|embed_vision|embed_audio)).*\.(?:q_proj|k_proj|v_proj|o_proj)$"


@dataclass
class SEPOModelConfig(ModelConfig):
    """trl's ModelConfig, with LoRA on the language model's attention projections by default."""

    # a list, as ModelConfig declares it; its __post_init__ turns a one-item list into the item (the regex)
    lora_target_modules: list[str] | None = field(
        default_factory=lambda: [LANGUAGE_MODEL_ATTENTION],
        metadata={"help": "LoRA target modules: names, or one PEFT regex (default: q/k/v/o of the language model, "
                          "not of a vision or audio tower)"})  # fmt: skip
