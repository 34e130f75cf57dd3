"""`FMSPConfig`: one flat dataclass per FMSP run, loaded from a YAML recipe plus `--key value` overrides.

Recipes use flat keys, the way TRL's scripts read theirs, and are read by `sepo.recipes` (the same parser,
help and errors as every `sepo` command); a recipe plus the seed fully determines a run with a deterministic
FM, and the resolved config is saved in the run directory. `fm_policies_path` names files shipped with the
recipe: a relative value in the recipe resolves against the recipe's directory.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from envs.sandbox import SandboxConfig
from fmsp.domains import DOMAINS
from fmsp.embeddings import EMBEDDERS
from fmsp.fm import FM_PROVIDERS
from sepo.checks import (
    COUNT,
    NON_NEGATIVE_INT,
    POSITIVE,
    Range,
    check_choice,
    check_output_dir,
    check_ranges,
    first_games,
)
from sepo.files import write_text_atomic
from sepo.provenance import PROVENANCE_KEY, run_provenance

VARIANTS = ("vfmsp", "nssp", "qdsp", "open_loop")  # open_loop: the paper's baseline (no context)
REPORT_TO = ("none", "wandb")

# counts, sizes and limits of a run
FMSP_RANGES = {
    "iterations": NON_NEGATIVE_INT,
    "seed": NON_NEGATIVE_INT,
    "fm_temperature": Range(0),
    "fm_max_tokens": COUNT,
    "fm_timeout_s": POSITIVE,
    "fm_max_retries": NON_NEGATIVE_INT,
    "max_consecutive_fm_errors": NON_NEGATIVE_INT,
    "fm_price_prompt_per_1k": Range(0),
    "fm_price_completion_per_1k": Range(0),
    "embedder_dimensions": Range(1, integer=True, optional=True),
    "context_neighbors": NON_NEGATIVE_INT,
    "judge_neighbors": NON_NEGATIVE_INT,
    "max_repairs": NON_NEGATIVE_INT,
    "eval_opponents": COUNT,
    "max_code_chars": COUNT,
    "sandbox_timeout_s": POSITIVE,
    "sandbox_call_timeout_s": POSITIVE,
    "sandbox_cpu_s": COUNT,
    "sandbox_memory_mb": COUNT,
    "torch_threads": Range(1, integer=True, optional=True),
}


@dataclass
class FMSPConfig:
    """Everything one FMSP search run needs."""

    _RECIPE_PATH_FIELDS = ("fm_policies_path",)  # shipped with the recipe: resolved against its directory

    domain: str = field(default="car_tag", metadata={"help": f"car_tag, gandalf, or a SEPO game ({', '.join(first_games(2))}, ...)"})
    domain_config: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "the domain's parameters, e.g. {n_games: 20, max_steps: 300}"}
    )
    variant: str = field(default="qdsp", metadata={"help": f"search variant: {', '.join(VARIANTS)}"})
    iterations: int = field(default=20, metadata={"help": "search iterations (one new policy attempt each)"})
    seed: int = field(default=0, metadata={"help": "seed of the search (sampling, opponents, FM double)"})
    output_dir: str = field(default="runs/fmsp", metadata={"help": "run directory (state, archives, logs)"})
    resume: bool = field(default=True, metadata={"help": "continue a run found in output_dir"})

    # foundation model (generation, repair and judge)
    fm_provider: str = field(
        default="openai", metadata={"help": "openai | local_transformers | scripted_test_double"}
    )
    fm_model: str = field(default="gpt-4o", metadata={"help": "model name (API) or path / hub id (local)"})
    fm_base_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible endpoint (openai provider)"})
    fm_api_key: str | None = field(default=None, metadata={"help": "API key (default: OPENAI_API_KEY)"})
    fm_temperature: float = field(default=0.8, metadata={"help": "FM sampling temperature"})
    fm_max_tokens: int = field(default=2048, metadata={"help": "max tokens per FM answer"})
    fm_timeout_s: float = field(default=120.0, metadata={"help": "seconds per FM request"})
    fm_max_retries: int = field(default=4, metadata={"help": "retries of a failed FM request"})
    max_consecutive_fm_errors: int = field(
        default=3, metadata={"help": "stop the run (exit 1, resumable) after this many iterations in a row fail "
                                    "for an FM error; they are redone on resume (0: never stop)"}
    )
    fm_price_prompt_per_1k: float = field(default=0.0, metadata={"help": "USD per 1k prompt tokens (cost log)"})
    fm_price_completion_per_1k: float = field(
        default=0.0, metadata={"help": "USD per 1k completion tokens (cost log)"}
    )
    fm_device: str | None = field(
        default=None, metadata={"help": "local_transformers: device; null: cuda when available, else cpu"}
    )
    fm_dtype: str | None = field(
        default=None, metadata={"help": "local_transformers: dtype; null: bfloat16 on cuda, float32 on cpu"}
    )
    fm_policies_path: str | None = field(
        default=None, metadata={"help": "scripted_test_double: directory of policy files it replays"}
    )
    fm_judge_answers: list[str] = field(
        default_factory=lambda: ["Decision: Yes"],
        metadata={"help": "scripted_test_double: the judge's answers, in turn"},
    )

    # embeddings
    embedder: str = field(default="sentence_transformers", metadata={"help": "sentence_transformers | openai"})
    embedder_model: str | None = field(
        default=None, metadata={"help": "model name; null: packaged all-MiniLM-L6-v2 / text-embedding-3-small"}
    )
    embedder_dimensions: int | None = field(
        default=64, metadata={"help": "openai only: embedding size; null keeps the model's own"}
    )
    embedder_base_url: str | None = field(
        default=None, metadata={"help": "openai only: endpoint; default OPENAI_BASE_URL / api.openai.com"}
    )
    embedder_api_key: str | None = field(default=None, metadata={"help": "openai only: default OPENAI_API_KEY"})

    # search
    use_judge: bool | None = field(
        default=None, metadata={"help": "novelty judge; null: on for nssp and qdsp, off for vfmsp and open_loop"}
    )
    search_sides: list[str] | None = field(
        default=None, metadata={"help": "sides the FM writes for, in turn; null: both (e.g. [attacker])"}
    )
    context_neighbors: int = field(default=3, metadata={"help": "archive neighbours shown to the FM"})
    judge_neighbors: int = field(default=3, metadata={"help": "neighbours the judge compares against"})
    max_repairs: int = field(default=3, metadata={"help": "repair attempts of code that fails to run"})
    eval_opponents: int = field(
        default=5, metadata={"help": "current opponents each candidate also plays (recorded; quality uses the "
                                    "baselines)"}
    )
    max_code_chars: int = field(default=3000, metadata={"help": "longest policy code accepted"})

    # sandbox (every policy in its own contained process; see envs.sandbox)
    sandbox_timeout_s: float = field(
        default=120.0, metadata={"help": "wall-clock seconds of one policy process: one match or one unit test"}
    )
    sandbox_call_timeout_s: float = field(
        default=10.0, metadata={"help": "wall-clock seconds of one request (a step of all games, one act)"}
    )
    sandbox_cpu_s: int = field(default=120, metadata={"help": "RLIMIT_CPU of a policy process (seconds)"})
    sandbox_memory_mb: int = field(default=2048, metadata={"help": "RLIMIT_AS of a policy process (MB)"})
    unsafe_sandbox: bool = field(
        default=False,
        metadata={"help": "run even where an isolation layer is missing (the present ones still apply)"},
    )
    rng_key: str = field(default="", metadata={"help": "secret key of the policies' rngs and the episode deals "
                                                       "(envs.sandbox.rng); empty: made once per run and kept in "
                                                       "output_dir/rng_key.json"})

    # logging
    report_to: str = field(default="none", metadata={"help": "none | wandb"})
    wandb_project: str = field(default="fmsp", metadata={"help": "wandb project"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    torch_threads: int | None = field(
        default=None, metadata={"help": "torch intra-op threads of the embedder and a local FM (unset: torch's "
                                        "default); 1 on a shared small machine"})

    def __post_init__(self) -> None:
        check_ranges(self, FMSP_RANGES)
        check_choice("domain", self.domain, DOMAINS)
        check_choice("variant", self.variant, VARIANTS)
        check_choice("fm_provider", self.fm_provider, FM_PROVIDERS)
        check_choice("embedder", self.embedder, EMBEDDERS)
        check_choice("report_to", self.report_to, REPORT_TO)
        check_output_dir("output_dir", self.output_dir)

    @property
    def judge_enabled(self) -> bool:
        return self.variant in ("nssp", "qdsp") if self.use_judge is None else self.use_judge

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def sandbox_config(self) -> SandboxConfig:
        """The sandbox keys as an `envs.sandbox.SandboxConfig`."""
        return SandboxConfig(call_timeout_s=self.sandbox_call_timeout_s, total_timeout_s=self.sandbox_timeout_s,
                             cpu_limit_s=self.sandbox_cpu_s, memory_mb=self.sandbox_memory_mb,
                             unsafe=self.unsafe_sandbox, **({"rng_key": self.rng_key} if self.rng_key else {}))  # fmt: skip


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> FMSPConfig:
    """Read a flat-key YAML recipe and apply overrides, through the command line's checks (unknown keys get a
    "did you mean", values are checked against their types and ranges)."""
    # deferred: sepo.recipes imports transformers' argument parser (~1.4 s)
    from sepo.recipes import load_config as load

    return load(FMSPConfig, path, overrides)


def save_config(config: FMSPConfig, path: str | Path) -> None:
    """The run's resolved config as a recipe (`load_config` reads it back), with the run's provenance."""
    write_text_atomic(path, yaml.safe_dump({**config.to_dict(), PROVENANCE_KEY: run_provenance()}, sort_keys=False))
