"""A study recipe and its arms: the shared training keys, each arm's overrides, where each arm trains."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sepo.config.checks import UsageError
from sepo.config.recipes import load_section
from sepo.eval.config import EvalConfig
from sepo.files import last_complete_checkpoint

ARM_ORDER = ("reward_only", "shared", "auxiliary", "per_pool")
EPISODES_FILE = "episodes.jsonl"
ARM_SUMMARY = "study_arm.json"
ARM_STARTED = "study_arm_started.json"  # the config digest of an (arm, seed) whose training has begun


@dataclass
class StudyConfig:
    """A study recipe: shared training keys, per-arm overrides, and the eval settings (see configs/study/)."""

    output_dir: str
    train: dict[str, Any]  # SEPOConfig + trl.ModelConfig keys shared by every arm
    arms: dict[str, dict[str, Any]]  # arm name -> overrides of `train` (credit, lambdas, pool_weights, ...)
    eval: dict[str, Any] = field(default_factory=dict)  # sepo.eval.evaluate.EvalConfig keys
    eval_base: bool = True  # evaluate the starting checkpoint too, as the row "base"
    seeds: list[int] | None = None  # training seeds, the same for every arm (paired); default [train.seed]

    def __post_init__(self) -> None:
        if self.seeds is None:
            self.seeds = [self.train.get("seed", 42)]  # 42: TrainingArguments' default seed
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"study config: `seeds` must be distinct and non-empty, got {self.seeds}")
        unknown = sorted(set(self.eval) - {f.name for f in dataclasses.fields(EvalConfig) if f.init})
        if unknown:  # found now, not when the study evaluates after training every arm
            raise ValueError(f"study config: unknown eval key(s) {unknown} (not `sepo eval` keys)")

    @classmethod
    def from_yaml(cls, path: str | Path) -> StudyConfig:
        """Read a recipe through the recipe parser (`load_section`): an unknown or missing key, or a value of the
        wrong type, is a one-line error naming the file, line and key."""
        cfg = load_section(cls, path)
        if not cfg.arms:
            raise UsageError(f"{path}: `arms` is empty")
        return cfg


def arm_dir(cfg: StudyConfig, arm: str, seed: int) -> Path:
    """Where an arm trains with one seed: its checkpoints, recorded rollouts and study_arm.json summary."""
    return Path(cfg.output_dir) / arm / f"seed_{seed}"


def run_label(cfg: StudyConfig, arm: str, seed: int) -> str:
    """The name of one trained (arm, seed) in the report: the arm's name when the study has one seed."""
    return arm if len(cfg.seeds) == 1 else f"{arm}/seed_{seed}"


def arm_keys(cfg: StudyConfig, arm: str, seed: int) -> dict[str, Any]:
    """The recipe keys of one (arm, seed): the shared train keys, the arm's overrides, the seed."""
    return {**cfg.train, **cfg.arms[arm], "seed": seed}


def arm_configs(cfg: StudyConfig, arm: str, seed: int) -> tuple[Any, Any]:
    """(SEPOConfig, ModelConfig) of one (arm, seed): its recipe keys and its own output dir, each value read as
    the type its field declares by the recipe parser, as `sepo train` reads a recipe (a YAML "3e-5" becomes
    the number 3e-5)."""
    # deferred: trl, sepo.grpo (torch, transformers, trl) and sepo.config.recipes (transformers) take seconds to
    # import; only building the arms' configs needs them
    from trl import ModelConfig

    from sepo.config.recipes import RecipeParser
    from sepo.grpo.config import SEPOConfig

    if "seed" in cfg.arms[arm]:
        raise ValueError(f"arm {arm!r}: `seed` is set by the study's `seeds`, not per arm")
    if "resume_from_checkpoint" in arm_keys(cfg, arm, seed):
        raise ValueError(f"arm {arm!r}: drop `resume_from_checkpoint`; the study resumes an (arm, seed) a kill "
                         "cut short from its last complete checkpoint itself")
    keys = {**arm_keys(cfg, arm, seed), "output_dir": str(arm_dir(cfg, arm, seed))}
    keys.setdefault("run_name", "study-" + run_label(cfg, arm, seed).replace("/", "-"))
    sepo_fields = {f.name for f in dataclasses.fields(SEPOConfig) if f.init}
    model_fields = {f.name for f in dataclasses.fields(ModelConfig) if f.init}
    unknown = sorted(set(keys) - sepo_fields - model_fields)
    if unknown:
        raise ValueError(f"arm {arm!r}: unknown training key(s) {unknown} (not SEPOConfig / ModelConfig fields)")
    parser = RecipeParser([SEPOConfig, ModelConfig], prog=f"sepo study, arm {arm}")
    parser.apply(keys, source=f"arm {arm!r}")
    args, model_args = parser.parse([])
    return args, model_args


def arm_digest(cfg: StudyConfig, arm: str, seed: int) -> str:
    """A fingerprint of everything that defines one (arm, seed)'s training (its merged recipe keys)."""
    merged = arm_keys(cfg, arm, seed)
    return hashlib.sha256(json.dumps(merged, sort_keys=True, default=str).encode()).hexdigest()[:16]


def finished_arm(cfg: StudyConfig, arm: str, seed: int) -> dict[str, Any] | None:
    """The summary of an (arm, seed) already trained with the same recipe keys (so a rerun resumes the study)."""
    path = arm_dir(cfg, arm, seed) / ARM_SUMMARY
    if not path.is_file():
        return None
    summary = json.loads(path.read_text())
    return summary if summary.get("config_digest") == arm_digest(cfg, arm, seed) else None


def resume_point(cfg: StudyConfig, arm: str, seed: int) -> str | None:
    """The last complete checkpoint of an (arm, seed) whose training began with the same recipe keys and was
    cut short (so a rerun resumes it there); None when there is none, or when it began with other keys, which
    then train afresh."""
    path = arm_dir(cfg, arm, seed) / ARM_STARTED
    if not path.is_file() or json.loads(path.read_text()).get("config_digest") != arm_digest(cfg, arm, seed):
        return None
    return last_complete_checkpoint(path.parent)


