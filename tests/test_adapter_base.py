"""A trained adapter records its base model as an absolute path (`sepo.config.models.resolve_model`, which `sepo train`
and `sepo sft` load through), so the run loads from any directory; a relative base would be taken for a hub id."""

from __future__ import annotations

import json
from pathlib import Path

from sepo.config.models import resolve_model
from sepo.tiny_models import save_tiny_model


def test_an_adapter_trained_from_a_relative_path_loads_from_another_directory(tmp_path, monkeypatch):
    from peft import AutoPeftModelForCausalLM, LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    work = tmp_path / "work"
    save_tiny_model(work / "base", "llama")
    monkeypatch.chdir(work)
    path = resolve_model("base")  # as a recipe names it: relative to where `sepo train` runs
    assert path == str((work / "base").resolve())
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(path), LoraConfig(r=2, target_modules=["q_proj"]))
    model.save_pretrained("run")
    recorded = json.loads((work / "run" / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert Path(recorded).is_absolute() and Path(recorded) == (work / "base").resolve()
    monkeypatch.chdir(tmp_path)  # another directory, where `base` means nothing
    loaded = AutoPeftModelForCausalLM.from_pretrained(str(work / "run"))
    assert loaded.peft_config["default"].base_model_name_or_path == recorded


def test_hub_ids_and_the_default_alias_are_not_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
