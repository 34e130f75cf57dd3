"""Generation backends behind `sepo.generation.GenerationBackend`: the one registry, built by name.

    hf        transformers `generate`, batched and left-padded (sepo.backends.hf); also the trainer's engine
              over its live policy
    vllm      an in-process vLLM engine (sepo.backends.vllm)
    openai    an OpenAI-compatible endpoint, e.g. a served model (sepo.backends.openai_api)
    trl_vllm  TRL's own vLLM engine of a training run, colocate or server (sepo.backends.trl_vllm)

`make_backend` loads a model by name (`sepo eval --backend`, the names in `BACKENDS`); `trainer_backend_class` is
the class whose `from_trainer` wraps the engine a trainer holds (the names in `TRAINER_BACKENDS`, chosen by
`trainer_engine`), looked up once per run. Each class is imported only when it is looked up (vLLM and openai are
optional).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from sepo.generation import GenerationBackend


@dataclass(frozen=True)
class Engine:
    """Where a backend class lives, and how it is built: `from_model(name, **kwargs)` loads a model by name,
    `from_trainer(end_of_turn_id, tokenizer=, **engine)` wraps a trainer's engine."""

    module: str
    cls: str
    by_name: bool = False
    in_trainer: bool = False


ENGINES: dict[str, Engine] = {
    "hf": Engine("sepo.backends.hf", "HFBackend", by_name=True, in_trainer=True),
    "vllm": Engine("sepo.backends.vllm", "VLLMBackend", by_name=True),
    "openai": Engine("sepo.backends.openai_api", "OpenAIBackend", by_name=True),
    "trl_vllm": Engine("sepo.backends.trl_vllm", "TRLVLLMBackend", in_trainer=True),
}
BACKENDS = tuple(name for name, engine in ENGINES.items() if engine.by_name)  # `sepo eval --backend`
TRAINER_BACKENDS = tuple(name for name, engine in ENGINES.items() if engine.in_trainer)


def backend_class(kind: str) -> type:
    """The class registered as `kind` (imported now)."""
    if kind not in ENGINES:
        raise ValueError(f"unknown backend {kind!r}; choose one of: {', '.join(ENGINES)}")
    engine = ENGINES[kind]
    return getattr(importlib.import_module(engine.module), engine.cls)


def make_backend(kind: str, model: str, **kwargs: Any) -> GenerationBackend:
    """Build backend `kind` for `model` (a path, hub id, `default`, or for `openai` a served model name)."""
    if kind not in BACKENDS:
        raise ValueError(f"unknown backend {kind!r}; choose one of: {', '.join(BACKENDS)}")
    return backend_class(kind).from_model(model, **kwargs)


def trainer_engine(use_vllm: bool) -> str:
    """The backend a training run generates with: TRL's vLLM engine when the run uses vLLM, else HF generate
    over the live policy."""
    return "trl_vllm" if use_vllm else "hf"


def trainer_backend_class(kind: str) -> type:
    """The class of trainer backend `kind` (imported now): its `from_trainer(end_of_turn_id, **engine)` wraps a
    trainer's engine (`engine`: what the trainer's seam hands over for it: its text `tokenizer`, and e.g. the
    unwrapped policy `model` for `hf`), stopping at the trainer's renderer's `end_of_turn_id`."""
    if kind not in TRAINER_BACKENDS:
        raise ValueError(f"unknown trainer backend {kind!r}; choose one of: {', '.join(TRAINER_BACKENDS)}")
    return backend_class(kind)
