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
