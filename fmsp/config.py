"""`FMSPConfig`: one flat dataclass per FMSP run, loaded from a YAML recipe plus `--key value` overrides.

Recipes use flat keys, the way TRL's scripts read theirs; a recipe plus the seed fully determines a run with
a deterministic FM, and the resolved config is saved in the run directory.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from envs.sandbox import SandboxConfig

VARIANTS = ("vfmsp", "nssp", "qdsp", "open_loop")  # open_loop: the paper's baseline (no context)


@dataclass
class FMSPConfig:
    """Everything one FMSP search run needs."""

    domain: str = "car_tag"
    domain_config: dict[str, Any] = field(default_factory=dict)
    variant: str = "qdsp"
    iterations: int = 20
    seed: int = 0
    output_dir: str = "runs/fmsp"
    resume: bool = True  # continue a run found in output_dir

    # foundation model (generation, repair and judge)
    fm_provider: str = "openai"  # openai | local_transformers | scripted_test_double
    fm_model: str = "gpt-4o"
    fm_base_url: str | None = None
    fm_api_key: str | None = None
    fm_temperature: float = 0.8
    fm_max_tokens: int = 2048
    fm_timeout_s: float = 120.0
    fm_max_retries: int = 4
    fm_price_prompt_per_1k: float = 0.0
    fm_price_completion_per_1k: float = 0.0
    fm_device: str | None = None  # local_transformers: None = cuda when available, else cpu
    fm_dtype: str | None = None  # local_transformers: None = bfloat16 on cuda, float32 on cpu
    fm_policies_path: str | None = None  # scripted_test_double: directory of policy files
    fm_judge_answers: list[str] = field(default_factory=lambda: ["Decision: Yes"])

    # embeddings
    embedder: str = "sentence_transformers"  # sentence_transformers | openai
    embedder_model: str | None = None  # None: packaged all-MiniLM-L6-v2 / text-embedding-3-small
    embedder_dimensions: int | None = 64  # openai only; null keeps the model's own size
    embedder_base_url: str | None = None  # openai only; default OPENAI_BASE_URL / api.openai.com
    embedder_api_key: str | None = None  # openai only; default OPENAI_API_KEY

    # search
    use_judge: bool | None = None  # None: True for nssp/qdsp, False for vfmsp and open_loop
    search_sides: list[str] | None = None  # sides the FM writes for, in turn; None = both (e.g. [attacker])
    context_neighbors: int = 3
    judge_neighbors: int = 3
    max_repairs: int = 3
    eval_opponents: int = 5  # current opponents each candidate also plays (recorded; quality uses the baselines)
    max_code_chars: int = 3000

    # sandbox (every policy in its own contained process; see envs.sandbox)
    sandbox_timeout_s: float = 120.0  # wall clock of one policy process: one match or one unit test
    sandbox_call_timeout_s: float = 10.0  # wall clock of one request (a step of all games, one act)
    sandbox_cpu_s: int = 120  # RLIMIT_CPU of a policy process
    sandbox_memory_mb: int = 2048  # RLIMIT_AS of a policy process
    unsafe_sandbox: bool = False  # run even where an isolation layer is missing (the present ones still apply)

    # logging
    report_to: str = "none"  # none | wandb
    wandb_project: str = "fmsp"
    progress: bool = True

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"unknown variant {self.variant!r}; valid: {', '.join(VARIANTS)}")
        if self.report_to not in ("none", "wandb"):
            raise ValueError(f"report_to must be 'none' or 'wandb', got {self.report_to!r}")
        if self.iterations < 0 or self.max_repairs < 0:
            raise ValueError("iterations and max_repairs must be >= 0")

    @property
    def judge_enabled(self) -> bool:
        return self.variant in ("nssp", "qdsp") if self.use_judge is None else self.use_judge

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def sandbox_config(self) -> SandboxConfig:
        """The sandbox keys as an `envs.sandbox.SandboxConfig`."""
        return SandboxConfig(call_timeout_s=self.sandbox_call_timeout_s, total_timeout_s=self.sandbox_timeout_s,
                             cpu_limit_s=self.sandbox_cpu_s, memory_mb=self.sandbox_memory_mb,
                             unsafe=self.unsafe_sandbox)  # fmt: skip


def _field_names() -> list[str]:
    return [f.name for f in dataclasses.fields(FMSPConfig)]


def parse_overrides(argv: list[str]) -> dict[str, Any]:
    """`--key value` / `--key=value` pairs; values are parsed as YAML scalars (so 3, true, null, [a, b] work).
    A bare `--flag` (last, or followed by another `--key`) means true, e.g. `--unsafe-sandbox`."""
    overrides: dict[str, Any] = {}
    items = list(argv)
    while items:
        token = items.pop(0)
        if not token.startswith("--"):
            raise ValueError(f"expected --key value, got {token!r}")
        key, eq, value = token[2:].partition("=")
        if not eq:
            value = "true" if not items or items[0].startswith("--") else items.pop(0)
        overrides[key.replace("-", "_")] = yaml.safe_load(value)
    return overrides


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> FMSPConfig:
    """Read a flat-key YAML recipe, apply overrides, validate names (unknown keys list the valid ones)."""
    data: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"config file {path} does not exist")
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a recipe is a mapping of flat keys")
    data.update(overrides or {})
    unknown = sorted(set(data) - set(_field_names()))
    if unknown:
        raise ValueError(f"unknown config key(s) {', '.join(unknown)}; valid: {', '.join(_field_names())}")
    return FMSPConfig(**data)


def save_config(config: FMSPConfig, path: str | Path) -> None:
    from sepo.files import write_text_atomic

    write_text_atomic(path, yaml.safe_dump(config.to_dict(), sort_keys=False))
