"""Scale-out combinations that could only fail on the cluster, after the queue, are refused when the config is read:
one line, exit status 2, nothing written (`sepo.grpo.config.check_scale_out`), and `report_to` follows one rule in
every command (`sepo.config.checks.check_report_to`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sepo.cli import main as sepo

REPO = Path(__file__).resolve().parents[1]
TRAIN_RECIPE = str(REPO / "configs" / "sepo" / "ipd_default.yaml")
KUHN_RECIPE = str(REPO / "configs" / "sepo" / "kuhn_default.yaml")


def _train(tmp_path: Path, *flags: str, recipe: str = TRAIN_RECIPE) -> int:
    (tmp_path / "model").mkdir(exist_ok=True)  # passes the path check; nothing gets as far as loading it
    (tmp_path / "model" / "config.json").write_text("{}")
    return sepo(["train", "--config", recipe, "--model_name_or_path", str(tmp_path / "model"),
                 "--output_dir", str(tmp_path / "run"), *flags])


def _one_line_error(capsys, rc: int) -> str:
    captured = capsys.readouterr()
    assert rc == 2 and "Traceback" not in captured.err, captured
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("variable,value,name", [("ACCELERATE_USE_FSDP", "true", "FSDP"),
                                                 ("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3", "DeepSpeed ZeRO-3")])
def test_per_checkpoint_evaluation_with_sharded_parameters_is_refused(variable, value, name, monkeypatch, tmp_path,
                                                                      capsys):
    monkeypatch.setenv(variable, value)  # what `accelerate launch` sets for an FSDP or ZeRO-3 config
    err = _one_line_error(capsys, _train(tmp_path, "--save_strategy", "steps", "--save_steps", "1"))
    assert f"whose parameters {name} shards across ranks: set keep_best_by_safety: false" in err
    assert not (tmp_path / "run").exists()


def test_sharded_parameters_without_checkpoint_evaluation_pass_the_check(monkeypatch, tmp_path):
    from sepo.grpo.config import SEPOConfig

    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    SEPOConfig(output_dir=str(tmp_path / "a"), use_cpu=True, save_strategy="steps", keep_best_by_safety=False)
    SEPOConfig(output_dir=str(tmp_path / "b"), use_cpu=True, save_strategy="no")  # nothing saved, nothing evaluated
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")  # ZeRO-2 keeps whole parameters on every rank
    SEPOConfig(output_dir=str(tmp_path / "c"), use_cpu=True, save_strategy="steps")


def test_adaptive_exploiter_with_vllm_server_mode_is_refused(tmp_path, capsys):
    rc = _train(tmp_path, "--adaptive_exploiter", "true", "--use_vllm", "true", "--vllm_mode", "server",
                recipe=KUHN_RECIPE)
    err = _one_line_error(capsys, rc)
    assert "adaptive_exploiter refreshes the exact best response by scoring the policy's choices" in err
    assert "use vllm_mode: colocate, or use_vllm: false" in err


@pytest.mark.parametrize("command", ["train", "sft", "eval"])
def test_report_to_follows_one_rule_in_every_command(command, tmp_path, capsys):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")  # passes the path check; nothing loads it
    model = str(tmp_path / "model")
    argv = {
        "train": ["train", "--config", TRAIN_RECIPE, "--model_name_or_path", model],
        "sft": ["sft", "--config", str(REPO / "configs" / "sft" / "default.yaml"), "--model_name_or_path", model],
        "eval": ["eval", "--config", str(REPO / "configs" / "eval" / "kuhn.yaml"), "--models", f"M={model}"],
    }[command]
    err = _one_line_error(capsys, sepo([*argv, "--output_dir", str(tmp_path / "out"), "--report_to", "tensorboard"]))
    assert "unknown report_to 'tensorboard'; choose one of: none, wandb" in err
