"""Generation backends behind `sepo.generation.GenerationBackend`, built by name.

    hf      transformers `generate`, batched and left-padded (sepo.backends.hf)
    vllm    an in-process vLLM engine (sepo.backends.vllm)
    openai  an OpenAI-compatible endpoint, e.g. a served model (sepo.backends.openai_api)
"""

from __future__ import annotations

import importlib
from typing import Any

from sepo.generation import GenerationBackend

BACKENDS: dict[str, tuple[str, str]] = {
    "hf": ("sepo.backends.hf", "HFBackend"),
    "vllm": ("sepo.backends.vllm", "VLLMBackend"),
    "openai": ("sepo.backends.openai_api", "OpenAIBackend"),
}


def make_backend(kind: str, model: str, **kwargs: Any) -> GenerationBackend:
    """Build backend `kind` for `model` (a path, hub id, `default`, or for `openai` a served model name)."""
    if kind not in BACKENDS:
        raise ValueError(f"unknown backend {kind!r}; choose one of: {', '.join(BACKENDS)}")
    module, cls = BACKENDS[kind]
    return getattr(importlib.import_module(module), cls).from_model(model, **kwargs)
