"""User mistakes: the one exception for them and the checks that raise it.

A `UsageError` is a mistake in a command line or a recipe. Its message names the key, the value and what
is allowed; the `sepo` and `fmsp` commands print it as `<command>: error: <message>` and exit with status 2,
without a traceback (`--debug` or `SEPO_DEBUG=1` shows one). It is a `ValueError`, so library callers that
catch ValueError keep working. This module imports nothing heavy: every command's parser uses it.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs import GAMES


class UsageError(ValueError):
    """A mistake in the command line or a recipe; the message says which key, which value, what is allowed."""


def debug_enabled() -> bool:
    """True when errors should show their traceback (`--debug` sets SEPO_DEBUG=1)."""
    return os.environ.get("SEPO_DEBUG", "").lower() not in ("", "0", "false", "no")


# `sepo eval`'s per-game keys before one set served every game with an exact analysis: old key -> its new form
RETIRED_KEYS = {
    **{f"{game}_exact": f"exact_skip: [{game}] (or exact: false for every game)" for game in GAMES},
    **{f"{game}_rationale_samples": "rationale_samples" for game in GAMES},
}


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the shortest of `options` that `word` begins (abbreviations are not accepted),
    else the closest by spelling; '' when none is close. A retired key (`RETIRED_KEYS`) is told its new form."""
    if word.lstrip("-") in RETIRED_KEYS:
        return f" (renamed: use {RETIRED_KEYS[word.lstrip('-')]})"
    options = list(options)
    match = sorted((o for o in options if o.startswith(word) and o != word), key=len)[:1]
    if not match:  # spelling compared without an option's leading dashes, which every option shares
        bare = {o.lstrip("-"): o for o in options}
        match = [bare[m] for m in difflib.get_close_matches(word.lstrip("-"), list(bare), n=1, cutoff=0.6)]
    return f" (did you mean {match[0]!r}?)" if match else ""


def unknown_name(kind: str, value: Any, valid: Iterable[str]) -> UsageError:
    """The error for a name that is not one of `valid`: the closest match, then every valid name."""
    valid = list(valid)
    return UsageError(f"unknown {kind} {value!r}{did_you_mean(str(value), valid)}; choose one of: {', '.join(valid)}")


def check_choice(kind: str, value: Any, valid: Iterable[str]) -> None:
    """Raise `unknown_name` unless `value` is one of `valid`."""
    valid = list(valid)
    if value not in valid:
        raise unknown_name(kind, value, valid)


REPORT_TO: tuple[str, ...] = ("none", "wandb")


def check_report_to(value: Any) -> None:
    """The one rule for `report_to` in `sepo train`, `sepo sft` and `sepo eval`: none or wandb (a name or a list of
    them), the loggers every command writes its metrics to; checked before TRL reads it."""
    for item in [value] if value is None or isinstance(value, str) else list(value):
        if item is not None:
            check_choice("report_to", item, REPORT_TO)


PUSH_REFUSED = ("push_to_hub would upload the run directory: rng_key.json (the secret of the sandboxed opponents' "
                "randomness), best/ and the checkpoints with their optimizer state, checkpoint_eval/ and wandb/; train "
                "with push_to_hub false, then `sepo export RUN OUT --push_to_hub REPO` uploads the exported model "
                "and its card only")


def check_push_to_hub(value: bool) -> None:
    """The trainers' own Hub push is refused (`sepo train`, `sepo sft`): it uploads output_dir as it is. Sharing goes
    through `sepo export`, which uploads the files it wrote and nothing else."""
    if value:
        raise UsageError(PUSH_REFUSED)


def check_names(kind: str, values: Iterable[str], valid: Iterable[str]) -> list[str]:
    """A list option's names: split at commas too (`a,b c`), at least one, each one of `valid`;
    duplicates dropped, order kept."""
    valid = list(valid)
    names = list(dict.fromkeys(v.strip() for item in values for v in str(item).split(",") if v.strip()))
    require(bool(names), kind, list(values), f"at least one of: {', '.join(valid)}")
    for name in names:
        check_choice(kind, name, valid)
    return names


def first_games(count: int) -> list[str]:
    """The first `count` registered games (`envs.GAMES`, in registration order): what a default or a help text's
    example writes instead of a game's name, so that a game's registration alone decides them."""
    return list(GAMES)[:count]


def check_recipe_file(path: str | Path) -> Path:
    """A `--config` recipe must be a file: the one message for the quick start-up check and the full parser."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"recipe {str(path)!r}: no such file")
    return path


def require(ok: bool, key: str, value: Any, allowed: str) -> None:
    """Raise `<key> must be <allowed>, got <value>` unless `ok`."""
    if not ok:
        raise UsageError(f"{key} must be {allowed}, got {value!r}")


def _number(value: float) -> str:
    """1000000 as 1000000 (not 1e+06), 0.5 as 0.5."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True)
class Range:
    """The values a number may take: [low, high] (either end open or absent), optionally an integer, None, or
    a few special values (e.g. max_steps -1 = "train num_train_epochs epochs")."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    optional: bool = False
    special: tuple[float, ...] = ()

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        if self.low is not None and self.high is not None:
            low, high = "(" if self.low_open else "[", ")" if self.high_open else "]"
            text = f"{kind} in {low}{_number(self.low)}, {_number(self.high)}{high}"
        elif self.low is not None:
            text = f"{kind} {'>' if self.low_open else '>='} {_number(self.low)}"
        elif self.high is not None:
            text = f"{kind} {'<' if self.high_open else '<='} {_number(self.high)}"
        else:
            text = kind
        extras = [_number(v) for v in self.special] + (["null"] if self.optional else [])
        return text + (f" (or {', '.join(extras)})" if extras else "")

    def admits(self, value: Any) -> bool:
        if value is None:
            return self.optional
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            return False
        if value in self.special:
            return True
        if self.integer and not float(value).is_integer():
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def check(self, key: str, value: Any) -> None:
        require(self.admits(value), key, value, self.describe())


COUNT = Range(1, integer=True)  # a number of things: at least one
OPTIONAL_COUNT = Range(1, integer=True, optional=True)
NON_NEGATIVE_INT = Range(0, integer=True)
NON_NEGATIVE = Range(0)
POSITIVE = Range(0, low_open=True)
PROBABILITY = Range(0, 1)

# Counts, sizes and step numbers of transformers' TrainingArguments and TRL's GRPOConfig / SFTConfig that a
# recipe sets. Each is checked only where the config has it.
TRAINER_RANGES: Mapping[str, Range] = {
    "per_device_train_batch_size": COUNT,
    "per_device_eval_batch_size": COUNT,
    "gradient_accumulation_steps": COUNT,
    "eval_accumulation_steps": OPTIONAL_COUNT,
    "num_train_epochs": POSITIVE,
    "max_steps": Range(1, integer=True, special=(-1,)),
    "logging_steps": POSITIVE,
    "save_steps": POSITIVE,
    "eval_steps": Range(0, low_open=True, optional=True),
    "save_total_limit": Range(0, integer=True, optional=True),
    "warmup_steps": NON_NEGATIVE,
    "learning_rate": NON_NEGATIVE,
    "weight_decay": NON_NEGATIVE,
    "max_grad_norm": NON_NEGATIVE,
    "dataloader_num_workers": NON_NEGATIVE_INT,
    "seed": NON_NEGATIVE_INT,
    # TRL GRPOConfig
    "num_generations": Range(2, integer=True, optional=True),  # a group baseline needs two rollouts
    "num_generations_eval": OPTIONAL_COUNT,
    "max_completion_length": OPTIONAL_COUNT,
    "generation_batch_size": OPTIONAL_COUNT,
    "steps_per_generation": OPTIONAL_COUNT,
    "num_iterations": COUNT,
    "temperature": POSITIVE,
    "top_p": Range(0, 1, low_open=True),
    "beta": NON_NEGATIVE,
    "epsilon": NON_NEGATIVE,
    # TRL SFTConfig
    "max_length": OPTIONAL_COUNT,
}


def check_ranges(config: Any, ranges: Mapping[str, Range]) -> None:
    """Check every key of `ranges` that `config` has; the first value out of range raises a UsageError."""
    for key, allowed in ranges.items():
        if hasattr(config, key):
            allowed.check(key, getattr(config, key))


def check_output_dir(key: str, path: str | Path) -> None:
    """An output directory must be a directory or not exist yet (nor lie under a file)."""
    target = Path(path)
    for existing in (target, *target.parents):
        if existing.exists():
            if existing.is_dir():
                return
            where = "is a file" if existing == target else f"lies under {str(existing)!r}, which is a file"
            raise UsageError(f"{key} {str(path)!r} {where}; give a directory (it is created if missing)")
