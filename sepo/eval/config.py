"""EvalConfig: what `sepo eval` evaluates and how, checked when it is built (an error names key, value, range)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import envs
from envs.tabular import exact_games
from sepo.backends import BACKENDS
from sepo.config.checks import (
    COUNT,
    NON_NEGATIVE_INT,
    OPTIONAL_COUNT,
    Range,
    UsageError,
    check_choice,
    check_names,
    check_ranges,
    check_report_to,
    first_games,
    require,
)
from sepo.generation import SamplingSpec
from sepo.pools import POOL_NAMES
from sepo.rollout.choice import TURN_DECODES

EVAL_RANGES = {
    "episodes_per_opponent": COUNT, "batch_episodes": COUNT, "max_turn_tokens": COUNT,
    "rationale_samples": COUNT, "bootstrap_resamples": Range(100, 1_000_000, integer=True),
    "seed": NON_NEGATIVE_INT, "torch_threads": OPTIONAL_COUNT,
    "confidence": Range(0, 1, low_open=True, high_open=True), "top_p": Range(0, 1, low_open=True),
}  # fmt: skip
TEMPERATURE = Range(0, 100, low_open=True)  # checked only when sampling


def _as_list(values: str | list[str] | None) -> list[str]:
    """`games: a` (one name, or `a,b`) and `games: [a, b]` alike (names are split by `check_names`)."""
    return [values] if isinstance(values, str) else list(values or [])


@dataclass
class EvalConfig:
    """What to evaluate and how. Models are `path`, a hub id, `default`, a LoRA adapter directory (its
    base comes from adapter_config.json), each optionally labelled `Label=spec`; `checkpoints` adds every
    `checkpoint-<step>` directory of a training run, labelled `step-<step>`."""

    _DEPRECATED_KEYS = {"pools_dir": "pool_dir"}  # the name `sepo train` and `fmsp export` use

    models: list[str] = field(default_factory=lambda: ["default"], metadata={"help": "[Label=]model specs"})
    checkpoints: str | None = field(
        default=None,
        metadata={"help": "a training output_dir: evaluate every checkpoint-<step> in it (instead of --models) "
                          "and write checkpoints.json / checkpoints.png"},
    )
    games: list[str] = field(default_factory=lambda: first_games(1), metadata={
        "help": f"games ({','.join(first_games(2))} or {' '.join(first_games(2))}; default: the first registered)"})
    game_params: dict[str, Any] | str | None = field(default=None, metadata={
        "help": f"per-game parameters, e.g. {{{first_games(1)[0]}: {{num_rounds: 4}}}} (JSON on the CLI)"})
    episodes_per_opponent: int = field(default=16, metadata={"help": "episodes per (pool, opponent), >= 1"})
    batch_episodes: int = field(
        default=16, metadata={"help": "opponents are played in lock-step batches of at least this many "
                                      "episodes (whole opponents; a batch is what a rerun resumes), >= 1"})
    pools: list[str] = field(default_factory=lambda: list(POOL_NAMES), metadata={"help": "pools to play"})
    temperature: float = field(default=0.8, metadata={"help": "sampling temperature, > 0"})
    top_p: float = field(default=0.95, metadata={"help": "nucleus sampling, in (0, 1]"})
    greedy: bool = field(default=False, metadata={"help": "greedy decoding instead of sampling"})
    max_turn_tokens: int = field(default=96, metadata={"help": "new tokens per model turn before the fallback"})
    turn_decode: str = field(default="free", metadata={
        "help": f"{' | '.join(TURN_DECODES)}: the model's own text, parsed (the fallback where it does not parse), "
                "or each turn drawn among the legal actions' answers by their scored probabilities, as a run "
                "trained with turn_decode choice plays (sepo.rollout.choice; top_p must be 1)"})
    seed: int = field(default=0, metadata={"help": "seeds every episode and every sampling call"})
    backend: str = field(default="hf", metadata={"help": "hf | vllm | openai"})
    base_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible endpoint (backend openai)"})
    dtype: str | None = field(default=None, metadata={"help": "model dtype, e.g. bfloat16 (default: as saved)"})
    pool_dir: str | None = field(default=None, metadata={"help": "extra pool members (an `fmsp export` dir)"})
    unsafe_sandbox: bool = field(default=False, metadata={"help": "play pool_dir members even where a sandbox "
                                                                  "isolation layer is missing"})
    rng_key: str = field(default="", metadata={"help": "secret key of sandboxed pool members' rngs; empty: made "
                                                       "once, kept in output_dir/rng_key.json"})
    use_eval_lambdas: bool = field(default=True, metadata={"help": "the game's evaluation λ where it has them"})
    exact: bool = field(default=True, metadata={
        "help": "score each game's policy at every decision state where the game registers an exact analysis "
                "(envs.tabular) and report its exact exploitability"})
    exact_skip: list[str] = field(default_factory=list, metadata={
        "help": "games whose exact phase is skipped although `exact` is on"})
    rationale_samples: int = field(default=4, metadata={
        "help": "sampled rationales per decision state where the exact phase scores after reasoning, >= 1"})
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
        self.models = _as_list(self.models)
        self.games = check_names("game", _as_list(self.games), envs.GAMES)
        self.pools = check_names("pool", _as_list(self.pools), POOL_NAMES)
        skip = _as_list(self.exact_skip)
        self.exact_skip = check_names("exact_skip", skip, exact_games()) if skip else []
        if isinstance(self.game_params, str):
            try:
                self.game_params = json.loads(self.game_params)
            except json.JSONDecodeError as exc:
                raise UsageError(f"game_params={self.game_params!r} is not JSON: {exc}") from None
        self.game_params = dict(self.game_params or {})
        for game in self.game_params:
            require(game in self.games, "game_params", game, f"a game of games {self.games}")
        check_choice("backend", self.backend, BACKENDS)
        check_report_to(self.report_to)
        check_ranges(self, EVAL_RANGES)
        if not self.greedy:
            TEMPERATURE.check("temperature", self.temperature)
        check_choice("turn_decode", self.turn_decode, TURN_DECODES)
        if self.turn_decode == "choice" and self.top_p < 1.0:
            raise UsageError(f"turn_decode choice draws from the answers' whole probabilities; top_p {self.top_p} "
                             "does not apply: set top_p 1.0")

    def runs_exact(self, game: str) -> bool:
        """Whether `game`'s exact phase is asked for (`exact` on, `game` not in `exact_skip`)."""
        return self.exact and game not in self.exact_skip

    def sampling(self) -> SamplingSpec:
        """The decoding settings of every model turn (each call's seed is derived from `seed`)."""
        return SamplingSpec(temperature=self.temperature, top_p=self.top_p, greedy=self.greedy,
                            max_new_tokens=self.max_turn_tokens, seed=self.seed)

    def play_settings(self) -> dict[str, Any]:
        """The keys that decide what is played (not how it is reported): a rerun reuses an opponent's
        episodes only when these are unchanged."""
        keys = ("episodes_per_opponent", "batch_episodes", "temperature", "top_p", "greedy", "max_turn_tokens",
                "seed", "backend", "base_url", "dtype", "pool_dir", "enable_thinking")
        settings = {k: getattr(self, k) for k in keys}
        settings["pools_dir"] = settings.pop("pool_dir")  # its stored name: evaluations stored before stay valid
        if self.turn_decode != "free":  # a key only where it is set: evaluations stored before stay valid
            settings["turn_decode"] = self.turn_decode
        return settings
