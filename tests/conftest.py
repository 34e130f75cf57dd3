"""Shared fixtures: offline environment, tiny random-weight models saved once per session."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory) -> dict[str, str]:
    """One saved tiny model directory per architecture: {"llama": path, "qwen3_5": path, "gemma4": path}."""
    from sepo.tiny_models import ARCHS, save_tiny_model

    root = tmp_path_factory.mktemp("tiny_models")
    return {arch: str(save_tiny_model(root / arch, arch)) for arch in ARCHS}


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_model_dirs) -> str:
    """The tiny Llama (ChatML template) directory."""
    return tiny_model_dirs["llama"]


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op torch thread for a module: on a shared 2-core machine OpenMP spin-waiting under load makes
    tiny-model matmuls ~100x slower with two threads. Restored after the module."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


pytest_plugins = ("timing_plugin",)  # `--record-timing DIR` (make test-timing)


def pytest_addoption(parser):
    parser.addoption("--fuzz-10k", action="store_true",
                     help="fuzz 10,000 model outputs per game (tests/test_fuzz_outputs.py; make fuzz)")  # fmt: skip
