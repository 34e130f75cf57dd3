"""`sepo sft`: the SFT warm-start stage — TRL `SFTTrainer` + PEFT LoRA on expert transcripts, then merge.

The lesson the method's authors recorded: SFT must install the game's structure (card-conditioned play, the
answer format) before RL can improve it. Rows are conversational prompt–completion pairs (one per assistant
turn, full history in the prompt), so the loss is completion-only for every chat template, including Gemma 4's
which has no generation markers. At the end the adapter is merged and a full checkpoint is saved with the
same architecture class and processor files, ready for `sepo train` and vLLM.

    sepo sft --config configs/sft/default.yaml [--key value ...]
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import transformers
from peft import LoraConfig
from transformers import AutoConfig, AutoTokenizer
from trl import SFTConfig  # loads torch, transformers and peft: importing them here costs nothing more

from envs import GAMES
from sepo.backends.hf import resolve_dtype
from sepo.config.checks import (
    COUNT,
    OPTIONAL_COUNT,
    POSITIVE,
    TRAINER_RANGES,
    Range,
    check_names,
    check_output_dir,
    check_push_to_hub,
    check_ranges,
    check_report_to,
    first_games,
)
from sepo.config.models import check_model, resolve_model
from sepo.config.provenance import PROVENANCE_KEY, run_provenance
from sepo.config.recipes import fall_back_to_fp32, parse_config, prepare_machine
from sepo.export.card import ModelCardCallback, final_card, merged_card
from sepo.export.merge import merge_and_save
from sepo.files import resolve_resume, write_text_atomic
from sepo.lora import LANGUAGE_MODEL_ATTENTION
from sepo.progress import StepProgress
from sepo.resume import train_to_max_steps
from sepo.sft.data import build_dataset

# the warm-start stage's own counts and sizes, checked with TRL's
SFT_RANGES = {
    **TRAINER_RANGES,
    "episodes_scale": POSITIVE,
    "data_seed_value": Range(0, integer=True),
    "lora_r": COUNT,
    "lora_alpha": POSITIVE,
    "lora_dropout": Range(0, 1, high_open=True),
    "max_train_rows": OPTIONAL_COUNT,
    "torch_threads": OPTIONAL_COUNT,
}


@dataclass
class SEPOSFTConfig(SFTConfig):
    """SFTConfig plus what the warm-start stage needs: the model, the data, LoRA and the merged output."""

    _VALID_DICT_FIELDS = SFTConfig._VALID_DICT_FIELDS + ["game_params"]  # JSON strings from the CLI become dicts

    model_name_or_path: str = field(default="default", metadata={"help": "path, hub id, or `default` (embedded)"})
    dataset_path: str | None = field(
        default=None, metadata={"help": "a `sepo data` output directory (datasets save_to_disk); None: generate"}
    )
    games: list[str] = field(
        default_factory=lambda: list(GAMES),
        metadata={"help": "games to generate data for when dataset_path is None (default: every registered game)"},
    )
    episodes_scale: float = field(
        default=1.0,
        metadata={"help": "scale of the method's episode counts when generating (docs/references.md#sft-demonstrators)"},
    )
    game_params: dict[str, Any] | str | None = field(
        default=None,
        metadata={"help": f"per-game parameters when generating, e.g. {{{first_games(1)[0]}: {{num_rounds: 4}}}}"},
    )
    data_seed_value: int = field(default=0, metadata={"help": "seed of the generated transcripts"})
    use_peft: bool = field(default=True, metadata={"help": "train a LoRA adapter (merged at the end)"})
    lora_r: int = field(default=32, metadata={"help": "LoRA rank"})
    lora_alpha: int = field(default=64, metadata={"help": "LoRA alpha (the adapter is scaled by alpha / r)"})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout"})
    lora_target_modules: str = field(default=LANGUAGE_MODEL_ATTENTION, metadata={"help": "PEFT regex"})
    merged_dir: str | None = field(default=None, metadata={"help": "where the merged model goes (default output_dir/merged)"})
    max_train_rows: int | None = field(default=None, metadata={"help": "cap on training rows (quick runs)"})
    torch_threads: int | None = field(
        default=None, metadata={"help": "torch intra-op threads per process (unset: torch's default); 1 on a "
                                        "shared small machine, where OpenMP spin-waiting slows every thread"})

    def __post_init__(self) -> None:
        check_ranges(self, SFT_RANGES)
        check_report_to(self.report_to)
        check_push_to_hub(self.push_to_hub)
        fall_back_to_fp32(self)
        super().__post_init__()

        self.games = check_names("game", self.games, GAMES)
        check_output_dir("output_dir", self.output_dir)
        if self.merged_dir is not None:
            check_output_dir("merged_dir", self.merged_dir)


def load_model_and_tokenizer(name_or_path: str, dtype: str | None = None) -> tuple[Any, Any]:
    """Load a causal LM with the architecture class its checkpoint names (e.g. Gemma4ForConditionalGeneration),
    and its tokenizer (left padding for generation)."""
    path = resolve_model(name_or_path, key="model_name_or_path")
    config = AutoConfig.from_pretrained(path)
    arch = (config.architectures or ["AutoModelForCausalLM"])[0]
    model_cls = getattr(transformers, arch, None) or transformers.AutoModelForCausalLM
    model = model_cls.from_pretrained(path, dtype=resolve_dtype(dtype))
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def _datasets(config: SEPOSFTConfig):
    # deferred: datasets takes seconds to import; only reading or building the dataset needs it
    from datasets import load_from_disk

    if config.dataset_path:
        dd = load_from_disk(config.dataset_path)
    else:
        dd = build_dataset(config.games, seed=config.data_seed_value, episodes_scale=config.episodes_scale,
                           game_params=dict(config.game_params or {}))
    train, valid = dd["train"], dd.get("validation")
    if config.max_train_rows is not None and len(train) > config.max_train_rows:
        train = train.shuffle(seed=config.seed).select(range(config.max_train_rows))
    keep = ["prompt", "completion", "chat_template_kwargs"]
    train = train.remove_columns([c for c in train.column_names if c not in keep])
    if valid is not None:
        valid = valid.remove_columns([c for c in valid.column_names if c not in keep])
    return train, valid


def run_sft(config: SEPOSFTConfig) -> Path:
    """Train, merge and save; returns the merged checkpoint directory."""
    # deferred: the trainer pulls in datasets (~0.6 s more than SFTConfig); only training needs it
    from trl import SFTTrainer

    from sepo.grpo.trl_seam import score_labelled_positions_only

    dtype = (config.model_init_kwargs or {}).get("dtype") if isinstance(config.model_init_kwargs, dict) else None
    model, tokenizer = load_model_and_tokenizer(config.model_name_or_path, dtype=dtype)
    train, valid = _datasets(config)
    peft_config = (
        LoraConfig(
            r=config.lora_r,
            lora_alpha=config.lora_alpha,
            lora_dropout=config.lora_dropout,
            target_modules=config.lora_target_modules,
            task_type="CAUSAL_LM",
        )
        if config.use_peft
        else None
    )
    if valid is None or config.eval_strategy == "no":
        valid = None
    score_labelled_positions_only()  # the answer-only loss scores a few positions per row: on a CPU, only those
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=train,
        eval_dataset=valid,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[ModelCardCallback(config.model_name_or_path), StepProgress("sft")],
    )
    train_to_max_steps(trainer, resolve_resume(config.resume_from_checkpoint, config.output_dir))
    trainer.save_model(config.output_dir)  # the adapter (or full model) for the record
    write_text_atomic(Path(config.output_dir, "sepo_sft_config.json"),
                      json.dumps({**config.to_dict(), PROVENANCE_KEY: run_provenance()}, indent=2, default=str))
    merged_dir = Path(config.merged_dir or Path(config.output_dir) / "merged")
    if trainer.accelerator.is_main_process:
        card = merged_card(final_card(trainer, config.model_name_or_path), merged_dir)
        merge_and_save(trainer.accelerator.unwrap_model(trainer.model), tokenizer,
                       _source_path(config.model_name_or_path), merged_dir, card=card)
    trainer.accelerator.wait_for_everyone()
    return merged_dir


def _source_path(name_or_path: str) -> str:
    return resolve_model(name_or_path)


def main(argv: list[str] | None = None) -> int:
    (config,) = parse_config((SEPOSFTConfig,), argv, prog="sepo sft", description=__doc__.split("\n\n")[0])
    check_model("model_name_or_path", config.model_name_or_path)
    prepare_machine(config)
    merged = run_sft(config)
    print(f"merged checkpoint: {merged}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
