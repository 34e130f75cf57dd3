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
