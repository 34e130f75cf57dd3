"""The LoRA target modules are defined once (`sepo.lora.LANGUAGE_MODEL_ATTENTION`): every recipe in configs/
that trains with LoRA resolves to exactly that definition, through the parser its command uses, unless it is
listed below as naming targets of its own on purpose. A recipe that writes a diverging copy fails here."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sepo.lora import LANGUAGE_MODEL_ATTENTION

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"

# recipes whose LoRA targets differ from the definition on purpose, with the targets they resolve to
OWN_TARGETS = {
    "sepo/smoke_tiny.yaml": ["q_proj", "v_proj"],  # the tiny random-weight Llama of `sepo tiny-model`
    # the embedded model (no vision or audio tower) named module by module: the same modules as the regex
    "study/ipd_default.yaml": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "experiments/kuhn_default.yaml": ["q_proj", "k_proj", "v_proj", "o_proj"],
}
TRAIN = sorted(CONFIGS.glob("sepo/*.yaml")) + [CONFIGS / "quickstart" / "sepo.yaml"]  # sepo train
SFT = sorted(CONFIGS.glob("sft/*.yaml")) + [CONFIGS / "quickstart" / "sft.yaml"]  # sepo sft


def _name(path: Path) -> str:
    return path.relative_to(CONFIGS).as_posix()


def _flags(tmp_path: Path) -> list[str]:
    """A model directory that exists and has a config.json, as the path check asks (the recipes' checkpoints need
    not exist), and a fresh output_dir."""
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "config.json").write_text("{}")
    return ["--model_name_or_path", str(tmp_path / "model"), "--output_dir", str(tmp_path / "out")]


def _expected(path: Path) -> str | list[str]:
    return OWN_TARGETS.get(_name(path), LANGUAGE_MODEL_ATTENTION)


@pytest.mark.parametrize("recipe", TRAIN, ids=_name)
def test_train_recipes_resolve_to_the_one_definition(recipe, tmp_path):
    from sepo.grpo.train import parse

    _, model_args = parse(["--config", str(recipe), *_flags(tmp_path)])
    assert model_args.use_peft, _name(recipe)
    assert model_args.lora_target_modules == _expected(recipe), _name(recipe)


@pytest.mark.parametrize("recipe", SFT, ids=_name)
def test_sft_recipes_resolve_to_the_one_definition(recipe, tmp_path):
    from sepo.config.recipes import parse_config
    from sepo.sft.train import SEPOSFTConfig

    (config,) = parse_config((SEPOSFTConfig,), ["--config", str(recipe), *_flags(tmp_path)], prog="sepo sft")
    assert config.lora_target_modules == _expected(recipe), _name(recipe)


def test_study_recipes_with_lora_state_the_definition():
    """A study's `train:` map goes to trl's ModelConfig as written (no project default there): each study that
    trains with LoRA states its targets, and they are the definition (or listed in OWN_TARGETS)."""
    studies = [p for p in sorted(CONFIGS.rglob("*.yaml")) if "train" in (yaml.safe_load(p.read_text()) or {})]
    assert studies, "no study recipes found"
    for path in studies:
        train = yaml.safe_load(path.read_text())["train"]
        if train.get("use_peft"):
            targets = train.get("lora_target_modules")
            assert (targets[0] if isinstance(targets, list) and len(targets) == 1 else targets) == _expected(path), \
                _name(path)


def test_every_recipe_that_names_lora_targets_is_checked_here():
    """No recipe kind outside the lists above sets LoRA targets (it would go unchecked)."""
    checked = {*map(_name, TRAIN), *map(_name, SFT)}
    for path in sorted(CONFIGS.rglob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        if "lora_target_modules" in data:
            assert _name(path) in checked, _name(path)
    assert set(OWN_TARGETS) <= {_name(p) for p in CONFIGS.rglob("*.yaml")}  # no stale entry
