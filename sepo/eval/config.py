"""EvalConfig: what `sepo eval` evaluates and how, checked when it is built (an error names key, value, range)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import envs
from sepo.backends.base import SamplingSpec
from sepo.pools import POOL_NAMES

BACKENDS = ("hf", "vllm", "openai")


def check_int(key: str, value: Any, low: int, high: int | None = None) -> None:
    """Raise a ValueError naming key, value and allowed range unless `value` is an int in [low, high]."""
    allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
    too_high = high is not None and isinstance(value, int) and value > high
    if isinstance(value, bool) or not isinstance(value, int) or value < low or too_high:
        raise ValueError(f"{key}={value!r} is out of range: allowed {allowed}")


def check_float(key: str, value: Any, low: float, high: float, low_open: bool, high_open: bool) -> None:
    """Raise a ValueError naming key, value and allowed interval unless `value` is a finite number in it."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ValueError(f"{key}={value!r} is out of range: allowed a number in {interval}")


def _split_names(values: str | list[str] | None) -> list[str]:
    """`--games ipd,kuhn`, `--games ipd kuhn` and `games: ipd` alike."""
    items = [values] if isinstance(values, str) else list(values or [])
    return [name for item in items for name in str(item).split(",") if name]


@dataclass
class EvalConfig:
    """What to evaluate and how. Models are `path`, a hub id, `default`, a LoRA adapter directory (its
    base comes from adapter_config.json), each optionally labelled `Label=spec`; `checkpoints` adds every
    `checkpoint-<step>` directory of a training run, labelled `step-<step>`."""

    models: list[str] = field(default_factory=lambda: ["default"], metadata={"help": "[Label=]model specs"})
    checkpoints: str | None = field(
        default=None,
        metadata={"help": "a training output_dir: evaluate every checkpoint-<step> in it (instead of --models) "
                          "and write checkpoints.json / checkpoints.png"},
    )
    games: list[str] = field(default_factory=lambda: ["ipd"], metadata={"help": "games (ipd,kuhn or ipd kuhn)"})
    game_params: dict[str, Any] | str | None = field(
        default=None, metadata={"help": "per-game parameters, e.g. {ipd: {num_rounds: 4}} (JSON on the CLI)"}
    )
    episodes_per_opponent: int = field(default=16, metadata={"help": "episodes per (pool, opponent), >= 1"})
    batch_episodes: int = field(
        default=16, metadata={"help": "opponents are played in lock-step batches of at least this many "
                                      "episodes (whole opponents; a batch is what a rerun resumes), >= 1"})
    pools: list[str] = field(default_factory=lambda: list(POOL_NAMES), metadata={"help": "pools to play"})
    temperature: float = field(default=0.8, metadata={"help": "sampling temperature, > 0"})
    top_p: float = field(default=0.95, metadata={"help": "nucleus sampling, in (0, 1]"})
    greedy: bool = field(default=False, metadata={"help": "greedy decoding instead of sampling"})
    max_turn_tokens: int = field(default=96, metadata={"help": "new tokens per model turn before the fallback"})
    seed: int = field(default=0, metadata={"help": "seeds every episode and every sampling call"})
    backend: str = field(default="hf", metadata={"help": "hf | vllm | openai"})
    base_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible endpoint (backend openai)"})
    dtype: str | None = field(default=None, metadata={"help": "model dtype, e.g. bfloat16 (unset: as saved)"})
    pools_dir: str | None = field(default=None, metadata={"help": "extra pool members (an `fmsp export` dir)"})
    unsafe_sandbox: bool = field(default=False, metadata={"help": "play pools_dir members even where a sandbox "
                                                                  "isolation layer is missing"})
    use_eval_lambdas: bool = field(default=True, metadata={"help": "the game's evaluation λ where it has them"})
    kuhn_exact: bool = field(default=True, metadata={"help": "measure the Kuhn policy and its exploitability"})
    kuhn_rationale_samples: int = field(default=4, metadata={"help": "sampled rationales per info set, >= 1"})
    bootstrap_resamples: int = field(default=1000, metadata={"help": "bootstrap resamples per interval"})
    confidence: float = field(default=0.95, metadata={"help": "confidence level of every interval, in (0, 1)"})
    save_transcripts: bool = field(default=False, metadata={"help": "every episode to transcripts/*.jsonl"})
    resume: bool = field(default=True, metadata={"help": "reuse opponents played before with these settings"})
    torch_threads: int | None = field(
        default=None, metadata={"help": "torch intra-op threads (unset: torch's default); 1 on a shared small "
                                        "machine, where OpenMP spin-waiting slows every thread"})
    enable_thinking: bool = field(default=False, metadata={"help": "chat-template thinking for action turns"})
    output_dir: str = field(default="runs/eval", metadata={"help": "results, tables, plots, episodes/"})
    report_to: str = field(default="none", metadata={"help": "none | wandb"})
    wandb_project: str = field(default="sepo", metadata={"help": "wandb project (report_to wandb)"})
    progress: bool = field(default=True, metadata={"help": "progress bars with totals for every phase"})

    def __post_init__(self) -> None:
        self.models = [self.models] if isinstance(self.models, str) else list(self.models or [])
        self.games = _split_names(self.games)
        self.pools = _split_names(self.pools)
        if isinstance(self.game_params, str):
            try:
                self.game_params = json.loads(self.game_params)
            except json.JSONDecodeError as exc:
                raise ValueError(f"game_params={self.game_params!r} is not JSON: {exc}") from None
        self.game_params = dict(self.game_params or {})
        if not self.games:
            raise ValueError("games is empty: name at least one of " + ", ".join(envs.GAMES))
        for game in self.games:
            if game not in envs.GAMES:
                raise envs.UnknownNameError(f"unknown game {game!r}; choose one of: {', '.join(envs.GAMES)}")
        for game in self.game_params:
            if game not in self.games:
                raise ValueError(f"game_params names game {game!r}, which is not in games {self.games}")
        if not self.pools:
            raise ValueError("pools is empty: name at least one of " + ", ".join(POOL_NAMES))
        for pool in self.pools:
            if pool not in POOL_NAMES:
                raise envs.UnknownNameError(f"unknown pool {pool!r}; choose one of: {', '.join(POOL_NAMES)}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend={self.backend!r} is unknown; choose one of: {', '.join(BACKENDS)}")
        if self.report_to not in ("none", "wandb"):
            raise ValueError(f"report_to={self.report_to!r} is unknown; choose one of: none, wandb")
        check_int("episodes_per_opponent", self.episodes_per_opponent, 1)
        check_int("batch_episodes", self.batch_episodes, 1)
        check_int("max_turn_tokens", self.max_turn_tokens, 1)
        check_int("kuhn_rationale_samples", self.kuhn_rationale_samples, 1)
        check_int("bootstrap_resamples", self.bootstrap_resamples, 100, 1_000_000)
        check_int("seed", self.seed, 0)
        if self.torch_threads is not None:
            check_int("torch_threads", self.torch_threads, 1)
        check_float("confidence", self.confidence, 0.0, 1.0, True, True)
        check_float("top_p", self.top_p, 0.0, 1.0, True, False)
        if not self.greedy:
            check_float("temperature", self.temperature, 0.0, 100.0, True, False)

    def sampling(self) -> SamplingSpec:
        """The decoding settings of every model turn (each call's seed is derived from `seed`)."""
        return SamplingSpec(temperature=self.temperature, top_p=self.top_p, greedy=self.greedy,
                            max_new_tokens=self.max_turn_tokens, seed=self.seed)

    def play_settings(self) -> dict[str, Any]:
        """The keys that decide what is played (not how it is reported): a rerun reuses an opponent's
        episodes only when these are unchanged."""
        keys = ("episodes_per_opponent", "batch_episodes", "temperature", "top_p", "greedy", "max_turn_tokens",
                "seed", "backend", "base_url", "dtype", "pools_dir", "enable_thinking")
        return {k: getattr(self, k) for k in keys}
