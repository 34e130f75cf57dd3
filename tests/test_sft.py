"""The SFT stage on a tiny model: LoRA trains, the loss falls, the merged checkpoint reloads with its class."""

import json
from pathlib import Path

import pytest
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from sepo.sft.data import main as data_main
from sepo.sft.train import LANGUAGE_MODEL_ATTENTION, SEPOSFTConfig, main, run_sft


@pytest.fixture(scope="module")
def ipd_dataset(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("sft_data")
    assert data_main(["--games", "ipd", "--out", str(out), "--episodes-scale", "0.05", "--seed", "1"]) == 0
    assert (out / "train.jsonl").is_file() and (out / "stats.json").is_file()
    return str(out / "dataset")


def _config(model_dir, data, out, **kw) -> SEPOSFTConfig:
    base = dict(
        output_dir=str(out), model_name_or_path=model_dir, dataset_path=data, max_steps=30,
        per_device_train_batch_size=4, gradient_accumulation_steps=1, learning_rate=5e-3, lora_r=8, lora_alpha=16,
        logging_steps=5, save_steps=15, save_strategy="steps", report_to="none", use_cpu=True, bf16=False,
        gradient_checkpointing=False, max_length=512, seed=0, eval_strategy="no",
    )
    base.update(kw)
    return SEPOSFTConfig(**base)


def test_lora_targets_language_model_attention_only():
    import re

    pat = re.compile(LANGUAGE_MODEL_ATTENTION)
    assert pat.fullmatch("model.language_model.layers.0.self_attn.q_proj")
    assert pat.fullmatch("model.layers.3.self_attn.o_proj")
    assert not pat.fullmatch("model.vision_tower.encoder.layers.0.self_attn.q_proj")
    assert not pat.fullmatch("model.audio_tower.layers.0.self_attn.k_proj")
    assert not pat.fullmatch("model.layers.0.mlp.gate_proj")


def test_sft_trains_loss_falls_and_merged_checkpoint_reloads(tiny_model_dir, ipd_dataset, tmp_path):
    # the random tiny model needs more than attention adapters to move quickly; the real recipes keep q/k/v/o
    merged = run_sft(_config(tiny_model_dir, ipd_dataset, tmp_path / "run", learning_rate=2e-2,
                             lora_target_modules=r".*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)$"))
    state = json.loads(next((tmp_path / "run").glob("checkpoint-*/trainer_state.json")).read_text())
    logs = [h for h in state["log_history"] if "loss" in h]
    losses, accuracy = [h["loss"] for h in logs], [h["mean_token_accuracy"] for h in logs]
    # a random tiny model starts near-uniform (loss ~ ln 512): the loss falls and token accuracy at least doubles
    assert len(losses) >= 3 and losses[-1] < losses[0] - 0.1, losses
    assert accuracy[-1] > 2 * accuracy[0], accuracy
    assert AutoConfig.from_pretrained(merged).architectures == AutoConfig.from_pretrained(tiny_model_dir).architectures
    model = AutoModelForCausalLM.from_pretrained(merged)
    tok = AutoTokenizer.from_pretrained(merged)
    assert tok.chat_template and not any(n.startswith("base_model") for n, _ in model.named_parameters())
    assert (Path(merged) / "config.json").is_file()
    # the adapter's card and the merged checkpoint's card name the base and load their own directory
    card, merged_card = (tmp_path / "run" / "README.md").read_text(), (Path(merged) / "README.md").read_text()
    assert f"fine-tuned version of the local checkpoint `{tiny_model_dir}`" in card
    assert f'model="{tmp_path / "run"}"' in card and "None" not in card
    assert f'model="{merged}"' in merged_card and "merged into its base model" in merged_card
    assert f"local checkpoint `{tiny_model_dir}`" in merged_card and "None" not in merged_card
    # the resolved config records what produced the run (tests/test_export.py checks the values)
    provenance = json.loads((tmp_path / "run" / "sepo_sft_config.json").read_text())["provenance"]
    assert set(provenance) == {"git", "sepo_fmsp", "packages", "machine"} and provenance["packages"]["peft"]


def test_cli_reads_yaml_recipe_with_overrides_and_resumes(tiny_model_dir, ipd_dataset, tmp_path, capsys):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        f"model_name_or_path: {tiny_model_dir}\ndataset_path: {ipd_dataset}\noutput_dir: {tmp_path / 'run'}\n"
        "max_steps: 4\nper_device_train_batch_size: 2\nlora_r: 4\nlora_alpha: 8\nsave_steps: 2\n"
        "save_strategy: steps\nreport_to: none\nuse_cpu: true\nbf16: false\ngradient_checkpointing: false\n"
        "eval_strategy: 'no'\n"
    )
    assert main(["--config", str(recipe)]) == 0
    assert (tmp_path / "run" / "checkpoint-4").is_dir()
    # one printed line per step, with the time left (sepo.progress): a stall on a busy machine is visible
    steps = [line for line in capsys.readouterr().out.splitlines() if line.startswith("sft step ")]
    assert [line.split(":")[0] for line in steps] == [f"sft step {k}/4" for k in range(1, 5)]
    assert "about 0 s left" in steps[-1] and " left; load " in steps[0]
    # resume continues from the last checkpoint to the new max_steps
    assert main(["--config", str(recipe), "--max_steps", "6", "--resume_from_checkpoint", "auto"]) == 0
    steps = [line for line in capsys.readouterr().out.splitlines() if line.startswith("sft step ")]
    assert [line.split(":")[0] for line in steps] == ["sft step 5/6", "sft step 6/6"]
    state = json.loads((tmp_path / "run" / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["global_step"] == 6


def test_step_progress_estimates_the_time_left_from_this_run_s_steps():
    """The estimate is the mean over the steps this run took (a resumed run counts from where it resumed)
    times the steps to go; each line names the step, its seconds and the machine's load."""
    import io

    from transformers import TrainerControl, TrainerState

    from sepo.progress import StepProgress

    times = iter([100.0, 110.0, 130.0, 160.0])  # train begins at 100; steps of 10, 20 and 30 s
    out = io.StringIO()
    progress = StepProgress("sft", out=out, clock=lambda: next(times), load=lambda: 6.5)
    state = TrainerState(global_step=4, max_steps=40)  # resumed at step 4
    progress.on_train_begin(None, state, TrainerControl())
    for _ in range(3):
        state.global_step += 1
        progress.on_step_end(None, state, TrainerControl())
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("sft step 5/40: 10.0 s, mean 10.0 s/step, about 5.8 min left; load 6.5 on ")
    assert lines[2].startswith("sft step 7/40: 30.0 s, mean 20.0 s/step, about 11.0 min left; load 6.5 on ")
