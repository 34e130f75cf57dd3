import pytest
import torch

from sepo.tiny_models import ARCHS, build_tiny_model


@pytest.mark.parametrize("arch", ARCHS)
def test_tiny_model_generates_and_has_chat_template(arch):
    model, tok = build_tiny_model(arch)
    batch = tok.apply_chat_template(
        [{"role": "user", "content": "Round 1 of 8. COOPERATE or DEFECT?"}],
        add_generation_prompt=True, return_tensors="pt", return_dict=True,
    )
    out = model.generate(**batch, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == batch["input_ids"].shape[1] + 4 or tok.eos_token_id in out[0].tolist()
    assert model.config.head_dim >= 32  # vLLM CPU attention needs it
    assert tok.eos_token_id == model.generation_config.eos_token_id
    assert torch.isfinite(model(**batch).logits).all()


@pytest.mark.parametrize("arch", ARCHS)
def test_vocab_size_widens_the_model_but_not_the_tokenizer(arch):
    """vocab_size (the GPU check's real vocabularies) sets the embedding rows and the logits' width; the
    tokenizer stays the small one and ids past it decode to nothing; below the tokenizer's size is an error."""
    model, tok = build_tiny_model(arch, vocab_size=2048)
    assert model.get_input_embeddings().weight.shape[0] == 2048 and len(tok) == 512
    assert model(torch.tensor([[1, 2, 2047]])).logits.shape[-1] == 2048
    assert tok.decode([1500, 2047]) == ""
    with pytest.raises(ValueError, match="smaller than the tokenizer"):
        build_tiny_model(arch, vocab_size=100)


@pytest.mark.slow  # one SEPO-GRPO step with a checkpoint evaluation
def test_tiny_model_command_and_the_smoke_recipe(tmp_path, capsys, monkeypatch):
    """The README's smoke test of a setup: `sepo tiny-model --out DIR`, then the smoke recipe trains on it."""
    from sepo.cli import main as sepo

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert sepo(["tiny-model", "--out", str(tmp_path / "tiny"), "--arch", "llama"]) == 0
    assert "saved a tiny random-weight llama model" in capsys.readouterr().out
    assert sepo(["train", "--config", "configs/sepo/smoke_tiny.yaml", "--model_name_or_path", str(tmp_path / "tiny"),
                 "--output_dir", str(tmp_path / "run")]) == 0  # fmt: skip
    assert (tmp_path / "run" / "checkpoint-1").is_dir() and (tmp_path / "run" / "checkpoints.json").is_file()
    out = capsys.readouterr().out  # the checkpoint evaluation says when it starts and what it found
    assert "[sepo train] checkpoint-1: evaluating against the pools of ipd (1 episodes per opponent" in out
    assert "[sepo train] checkpoint-1: evaluated J = " in out
    assert sepo(["tiny-model", "--out", "README.md"]) == 2  # a file, not a directory


def test_the_smoke_recipe_trains_without_gradient_checkpointing(tiny_model_dir):
    """TRL's GRPOConfig turns gradient checkpointing on by default; on a tiny model it saves no memory that
    matters and repeats every forward pass in the backward pass. The smoke recipe, parsed as `sepo train` does,
    turns it off."""
    from sepo.grpo.train import parse

    args, _ = parse(["--config", "configs/sepo/smoke_tiny.yaml", "--model_name_or_path", tiny_model_dir])
    assert args.gradient_checkpointing is False
    args, _ = parse(["--config", "configs/sepo/smoke_tiny.yaml", "--model_name_or_path", tiny_model_dir,
                     "--gradient_checkpointing", "true"])
    assert args.gradient_checkpointing is True  # TRL's key, still the user's to set
