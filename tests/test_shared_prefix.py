"""The loss's shared-prefix pass (`sepo.grpo.shared_prefix`, through the seam's override of TRL's per-token
log-probabilities) equals TRL's single pass: the same log-probabilities, entropies and LoRA gradients on a batch
of left-padded prompts shared by groups of rows, and the same gradients in a real training step with rollouts.
Tiny random-weight models built from config stand in for the pretrained ones."""

from __future__ import annotations

import pytest
import torch
from transformers import TrainerCallback

from sepo.backends.shared_rows import last_real_column, plan_segments, prefix_classes
from sepo.grpo.config import SEPOConfig
from sepo.grpo.trainer import SEPOTrainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class FixedAdvantagesTestDouble(SEPOTrainer):
    """Real rollouts and TRL's real loss, with fabricated non-zero advantages (a random tiny model's groups often
    score alike, which would leave every gradient 0 and the comparison empty)."""

    def scored_advantages(self, inputs, output, mode):
        mask = output["completion_mask"]
        return torch.linspace(-1.0, 1.0, mask.numel()).view_as(mask).to(torch.float32), {}


def _trainer(tmp_path, model_dir: str, trainer_class: type = SEPOTrainer, **overrides) -> SEPOTrainer:
    from peft import LoraConfig

    kw = dict(output_dir=str(tmp_path / "run"), use_cpu=True, bf16=False, report_to="none", max_steps=1,
              logging_steps=1, save_strategy="no", learning_rate=1e-3, gradient_checkpointing=False, seed=0,
              games=["kuhn"], game_params={"kuhn": {"num_hands": 1, "prompt_style": "compact"}},
              pool_mix={"training": "all"}, num_generations=4, per_device_train_batch_size=8, beta=0.0,
              max_turn_tokens=4, max_completion_length=64)
    kw.update(overrides)
    return trainer_class(model=model_dir, args=SEPOConfig(**kw),
                       peft_config=LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                              target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))


def _batch(vocab: int, pad: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """12 rows: 3 distinct prompts (5, 9 and 7 tokens, left-padded to 9) 4 rows each, interleaved, and
    completions of 1 to 6 tokens right-padded to 6: (input_ids, attention_mask, completion width)."""
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in (5, 9, 7)]
    rows = [prompts[i % 3] for i in range(12)]
    width, completion = 9, 6
    ids, mask = [], []
    for row in rows:
        n = int(torch.randint(1, completion + 1, (1,), generator=gen))
        tail = torch.randint(3, vocab, (n,), generator=gen).tolist()
        ids.append([pad] * (width - len(row)) + row + tail + [pad] * (completion - n))
        mask.append([0] * (width - len(row)) + [1] * (len(row) + n) + [0] * (completion - n))
    return torch.tensor(ids), torch.tensor(mask), completion


def _logps_and_grads(trainer: SEPOTrainer, ids, mask, keep: int, share: bool):
    trainer.args.share_prompt_prefix = share
    model = trainer.model
    model.zero_grad()
    logps, entropies, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, keep, compute_entropy=True)
    weights = torch.linspace(-1.0, 1.0, logps.numel()).view_as(logps)  # every token's gradient counts
    completion_mask = mask[:, -keep:]
    ((logps * weights + 0.1 * entropies) * completion_mask).sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    return logps.detach(), entropies.detach(), grads


def test_shared_prefix_pass_equals_trls_single_pass(tmp_path, tiny_model_dir):
    trainer = _trainer(tmp_path, tiny_model_dir)
    tokenizer = trainer.text_tokenizer()
    ids, mask, keep = _batch(len(tokenizer), tokenizer.pad_token_id)
    shared = _logps_and_grads(trainer, ids, mask, keep, share=True)
    assert trainer._prefix_sharing.full_attention is True  # the shared pass ran (tiny Llama: full attention)
    plain = _logps_and_grads(trainer, ids, mask, keep, share=False)
    torch.testing.assert_close(shared[0], plain[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(shared[1], plain[1], atol=1e-5, rtol=1e-5)
    assert shared[2].keys() == plain[2].keys() and shared[2]
    assert any(g.abs().max() > 0 for g in plain[2].values())
    for name in plain[2]:
        torch.testing.assert_close(shared[2][name], plain[2][name], atol=1e-5, rtol=1e-4, msg=name)


def _answered_batch(vocab: int, pad: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """24 rows shaped like a compact game's: 3 prompts (5, 9 and 7 tokens), a 2-token answer out of two, and in
    half the rows an environment message (12 tokens, one of two) and a second answer; many rows agree on
    their whole completion, others part at an answer. (input_ids, attention_mask, completion width)."""
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in (5, 9, 7)]
    answers = [torch.randint(3, vocab, (2,), generator=gen).tolist() for _ in range(2)]
    messages = [torch.randint(3, vocab, (12,), generator=gen).tolist() for _ in range(2)]
    width, completion = 9, 16
    ids, mask = [], []
    for i in range(24):
        prompt, tail = prompts[i % 3], list(answers[(i // 3) % 2])
        if (i // 6) % 2:
            tail += messages[i // 12] + answers[i % 2]
        ids.append([pad] * (width - len(prompt)) + prompt + tail + [pad] * (completion - len(tail)))
        mask.append([0] * (width - len(prompt)) + [1] * (len(prompt) + len(tail)) + [0] * (completion - len(tail)))
    return torch.tensor(ids), torch.tensor(mask), completion


def test_completions_shared_segment_by_segment_equal_trls_single_pass(tmp_path, tiny_model_dir):
    """Rows that agree run as one, segment by segment (the planned cut has more than two segments and runs
    fewer token slots than the batch has real tokens): the log-probabilities, entropies and
    gradients are still the single pass's, including at each segment's last position, which scores the next
    segment's first token (rows that agree up to a segment's end but not on that token run apart)."""
    trainer = _trainer(tmp_path, tiny_model_dir)
    tokenizer = trainer.text_tokenizer()
    ids, mask, keep = _answered_batch(len(tokenizer), tokenizer.pad_token_id)
    classes = prefix_classes(ids, mask)
    ends, _ = plan_segments(classes, last_real_column(mask), 0)
    slots, a = 0, 0
    for b in ends:
        slots += len({int(classes[r, min(b, ids.size(1) - 1)]) for r in range(len(ids)) if mask[r, a:].any()}) * (b - a)
        a = b
    assert len(ends) > 2 and slots < int(mask.sum()), (ends, slots)  # fewer slots than the real tokens
    shared = _logps_and_grads(trainer, ids, mask, keep, share=True)
    plain = _logps_and_grads(trainer, ids, mask, keep, share=False)
    torch.testing.assert_close(shared[0], plain[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(shared[1], plain[1], atol=1e-5, rtol=1e-5)
    assert any(g.abs().max() > 0 for g in plain[2].values())
    for name in plain[2]:
        torch.testing.assert_close(shared[2][name], plain[2][name], atol=1e-5, rtol=1e-4, msg=name)


def test_a_model_without_full_attention_takes_the_single_pass(tmp_path, tiny_model_dirs):
    trainer = _trainer(tmp_path, tiny_model_dirs["qwen3_5"])  # linear-attention layers
    tokenizer = trainer.text_tokenizer()
    ids, mask, keep = _batch(len(tokenizer), tokenizer.pad_token_id)
    shared = _logps_and_grads(trainer, ids, mask, keep, share=True)
    assert trainer._prefix_sharing.full_attention is False
    plain = _logps_and_grads(trainer, ids, mask, keep, share=False)
    torch.testing.assert_close(shared[0], plain[0], atol=0.0, rtol=0.0)


class _FirstGradients(TrainerCallback):
    """The LoRA gradients of the first optimizer step (clipped as the step clips them, before the update)."""

    def __init__(self) -> None:
        self.grads: dict[str, torch.Tensor] = {}

    def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
        if not self.grads:
            self.grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def test_a_training_step_has_the_single_pass_gradients(tmp_path, tiny_model_dir):
    grads = {}
    for share in (True, False):
        trainer = _trainer(tmp_path / str(share), tiny_model_dir, FixedAdvantagesTestDouble, share_prompt_prefix=share)
        first = _FirstGradients()
        trainer.add_callback(first)
        trainer.train()
        grads[share] = first.grads
        if share:  # the rollouts' groups shared their prompts, and the loss used that
            assert trainer._prefix_sharing.full_attention is True
    assert grads[True].keys() == grads[False].keys() and grads[True]
    assert any(g.abs().max() > 0 for g in grads[False].values())
    for name in grads[False]:
        torch.testing.assert_close(grads[True][name], grads[False][name], atol=1e-6, rtol=1e-4, msg=name)
