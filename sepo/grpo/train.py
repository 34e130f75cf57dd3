"""`sepo train --config configs/sepo/<game>_<model>.yaml [--key value ...]`: SEPO-GRPO on TRL's GRPOTrainer.

The recipe is a flat TRL-style YAML of SEPOConfig + trl.ModelConfig keys (plus an optional `env:` map);
command-line flags override it. The resolved config is written to `<output_dir>/sepo_config.json` and a
run resumes from the newest complete checkpoint in output_dir with `--resume_from_checkpoint true`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import wandb
from transformers import AutoTokenizer, TrainerCallback
from trl import ModelConfig, get_peft_config

from envs.sandbox.rng import persist_run_rng_key
from sepo.config.checks import UsageError
from sepo.config.models import check_model, resolve_model
from sepo.config.provenance import PROVENANCE_KEY, run_provenance
from sepo.config.recipes import parse_config, prepare_machine
from sepo.export.card import ModelCardCallback, final_card
from sepo.files import RUN_CONFIG, resolve_resume, write_json_atomic
from sepo.grpo.config import SEPOConfig
from sepo.grpo.groups import group_specs, run_pools, training_groups
from sepo.grpo.trainer import SEPOTrainer
from sepo.lora import SEPOModelConfig
from sepo.progress import StepProgress
from sepo.resume import train_to_max_steps


def parse(argv: list[str] | None) -> tuple[SEPOConfig, ModelConfig]:
    """Parse `--config` YAML plus overrides into (SEPOConfig, ModelConfig); mistakes are UsageErrors."""
    args, model_args = parse_config((SEPOConfig, SEPOModelConfig), argv, prog="sepo train",
                                    description=__doc__.split("\n\n")[0])
    if not model_args.model_name_or_path:
        raise UsageError("set model_name_or_path (a checkpoint directory, a hub id, or `default`)")
    check_model("model_name_or_path", model_args.model_name_or_path)
    check_pool_mix(args)
    return args, model_args


def check_pool_mix(args: SEPOConfig) -> None:
    """The opponents `pool_mix` and `pool_dir` name exist in their pools (before any model is loaded, and
    before anything is written). This check loads the pools once more than the run does: a sandboxed member
    keeps the rng key of its load, and the run's key is recorded in output_dir only after the checks."""
    try:
        group_specs(args, run_pools(args).training)
    except ValueError as exc:  # PoolError included: a name, pool or pool_dir the pools reject
        raise UsageError(f"pool_mix / pool_dir: {exc}") from exc


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)


def save_resolved_config(args: SEPOConfig, model_args: ModelConfig) -> Path:
    """Write the fully resolved config next to the run's outputs (atomic), with the run's provenance."""
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = {
        "sepo": {k: _jsonable(v) for k, v in args.to_dict().items()},
        "model": {f.name: _jsonable(getattr(model_args, f.name)) for f in dataclasses.fields(model_args)},
        PROVENANCE_KEY: run_provenance(),
    }
    path = out / RUN_CONFIG
    write_json_atomic(path, data)
    return path


def build_trainer(args: SEPOConfig, model_args: ModelConfig, rollout_hooks: Sequence[Any] = (),
                  callbacks: Sequence[TrainerCallback] = ()) -> SEPOTrainer:
    """The one way a SEPOTrainer is built for a parsed recipe (what `train` runs, and a measurement of one step):
    the machine set up (`prepare_machine`), the run's secret rng key recorded in output_dir (rank 0) or reused on
    resume, the run's pools loaded once, and the model loaded by TRL from model_name_or_path. `rollout_hooks`
    see every rollout batch (see `SEPOTrainer`); `callbacks` are added to the model card's and the printed step
    progress."""
    prepare_machine(args)
    # the secret key of sandboxed pool members' rngs: recorded in output_dir once (rank 0), reused on resume
    persist_run_rng_key(args.output_dir, args.rng_key, create=os.environ.get("RANK", "0") == "0")
    model_init_kwargs = dict(args.model_init_kwargs or {})
    if model_args.dtype and "dtype" not in model_init_kwargs:
        model_init_kwargs["dtype"] = model_args.dtype
    if model_args.attn_implementation:
        model_init_kwargs.setdefault("attn_implementation", model_args.attn_implementation)
    args.model_init_kwargs = model_init_kwargs or None
    path = resolve_model(model_args.model_name_or_path, key="model_name_or_path")
    # A text tokenizer (not the multimodal processor of Gemma 4 / Qwen 3.5) keeps TRL on its text-only path.
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    return SEPOTrainer(model=path, args=args, groups=training_groups(args),  # the run's one load of its pools
                       processing_class=tokenizer, peft_config=get_peft_config(model_args),
                       callbacks=[ModelCardCallback(model_args.model_name_or_path), StepProgress("sepo-grpo"),
                                  *callbacks],
                       rollout_hooks=rollout_hooks)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    train(*parse(list(sys.argv[1:] if argv is None else argv)))
    return 0


def train(args: SEPOConfig, model_args: ModelConfig, rollout_hooks: Sequence[Any] = (),
          callbacks: Sequence[TrainerCallback] = ()) -> Any:
    """Run a parsed recipe to the end (resuming when `resume_from_checkpoint` says so), save the model and its
    card; returns the trainer. What `sepo train`, each arm of `sepo study` and each organism run run
    (`callbacks`: the organisms' exact evaluation)."""
    trainer = build_trainer(args, model_args, rollout_hooks=rollout_hooks, callbacks=callbacks)
    if trainer.accelerator.is_main_process:
        save_resolved_config(args, model_args)
    train_to_max_steps(trainer, resolve_resume(args.resume_from_checkpoint, args.output_dir))
    trainer.save_model(args.output_dir)
    if "wandb" in (args.report_to or []) and trainer.accelerator.is_main_process:
        wandb.finish()  # flush the run (summary and history) before the process exits
    if trainer.accelerator.is_main_process:
        final_card(trainer, model_args.model_name_or_path)
    return trainer


if __name__ == "__main__":
    sys.exit(main())
