"""HFBackend: batched left-padded generation, exact sampling logprobs, constrained choices, scoring, loading."""

from __future__ import annotations

import pytest
import torch

from sepo.backends import make_backend
from sepo.backends.base import GenerationBackend, Prompt, SamplingSpec
from sepo.backends.hf import HFBackend
from sepo.tiny_models import ARCHS

MESSAGES = [
    [{"role": "user", "content": "Round 1. What is your action?"}],
    [
        {"role": "system", "content": "You play a repeated prisoner's dilemma game."},
        {"role": "user", "content": "Round 3 of 8. Scores so far: you 4, opponent 9. What is your action?"},
    ],
    [{"role": "user", "content": "bid"}],
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", params=ARCHS)
def backend(request, tiny_model_dirs) -> HFBackend:
    return HFBackend.from_model(tiny_model_dirs[request.param], device="cpu")


def _prompts(backend: HFBackend) -> list[Prompt]:
    return [Prompt(ids=backend.renderer.prompt_ids(m), messages=m) for m in MESSAGES]


def _teacher_forced(backend: HFBackend, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        seq = torch.tensor([prompt + tokens])
        logits = backend.model(seq).logits[0, len(prompt) - 1 : -1].float()
    return logits


def test_is_a_generation_backend(backend):
    assert isinstance(backend, GenerationBackend)
    assert backend.generate([], SamplingSpec()) == [] and backend.score_choices([], []) == []


def test_batched_greedy_equals_one_at_a_time_with_exact_logprobs(backend):
    prompts = _prompts(backend)
    spec = SamplingSpec(greedy=True, max_new_tokens=10)
    batched = backend.generate(prompts, spec)
    for prompt, gen in zip(prompts, batched):
        single = backend.generate([prompt], spec)[0]
        assert gen.token_ids == single.token_ids
        logits = _teacher_forced(backend, prompt.ids, gen.token_ids)
        assert gen.token_ids == logits.argmax(-1).tolist()
        expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(gen.token_ids)[:, None]).squeeze(1)
        assert gen.logprobs == pytest.approx(expected.tolist(), abs=2e-3)


def test_sampling_logprobs_are_under_the_warped_distribution(backend):
    prompt = _prompts(backend)[1]
    spec = SamplingSpec(temperature=0.7, top_k=20, top_p=1.0, max_new_tokens=8, seed=11)
    gen = backend.generate([prompt], spec)[0]
    logits = _teacher_forced(backend, prompt.ids, gen.token_ids) / 0.7
    kth = logits.topk(20, -1).values[:, -1:]
    logits = logits.masked_fill(logits < kth, float("-inf"))
    expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(gen.token_ids)[:, None]).squeeze(1)
    assert gen.logprobs == pytest.approx(expected.tolist(), abs=2e-3)


def test_seeded_sampling_is_deterministic_and_stops_at_end_of_turn(backend):
    prompts = _prompts(backend)
    spec = SamplingSpec(temperature=1.0, top_p=0.95, max_new_tokens=12, seed=5)
    a, b = backend.generate(prompts, spec), backend.generate(prompts, spec)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    other = backend.generate(prompts, SamplingSpec(temperature=1.0, top_p=0.95, max_new_tokens=12, seed=6))
    assert [g.token_ids for g in a] != [g.token_ids for g in other]
    for g in a:
        assert len(g.token_ids) == len(g.logprobs) <= 12
        stops = [k for k, t in enumerate(g.token_ids) if t in backend.stop_ids]
        assert stops == ([len(g.token_ids) - 1] if g.finished else [])


def test_generate_choice_yields_only_legal_actions(backend):
    prompts = _prompts(backend)
    choices = [["COOPERATE", "DEFECT"], ["PASS", "BET", "CALL", "FOLD"], [str(d) for d in range(1, 10)]]
    for seed in range(4):
        gens = backend.generate_choice(prompts, choices, SamplingSpec(temperature=1.5, seed=seed))
        for gen, legal in zip(gens, choices):
            assert gen.finished and gen.token_ids[-1] == backend.end_of_turn_id
            assert gen.text.strip() in legal
            assert all(lp <= 0.0 for lp in gen.logprobs)
    with pytest.raises(ValueError, match="choice lists"):
        backend.generate_choice(prompts, choices[:1], SamplingSpec())


def test_score_choices_is_a_distribution_and_greedy_choice_is_deterministic(backend):
    prompts = _prompts(backend)[:2]
    probs = backend.score_choices(prompts, [["COOPERATE", "DEFECT"], ["1", "2", "3"]])
    assert [len(p) for p in probs] == [2, 3]
    assert all(sum(p) == pytest.approx(1.0) and all(0 < x < 1 for x in p) for p in probs)
    g1 = backend.generate_choice(prompts[:1], [["COOPERATE", "DEFECT"]], SamplingSpec(greedy=True))[0]
    g2 = backend.generate_choice(prompts[:1], [["COOPERATE", "DEFECT"]], SamplingSpec(greedy=True))[0]
    assert g1.token_ids == g2.token_ids and g1.text.strip() in ("COOPERATE", "DEFECT")


def test_trainer_model_mode_restored_and_no_grad(tiny_model_dirs):
    base = HFBackend.from_model(tiny_model_dirs["llama"])
    model = base.model.train()
    backend = HFBackend.from_trainer_model(model, base.tokenizer)
    gen = backend.generate(_prompts(backend)[:1], SamplingSpec(max_new_tokens=4, seed=0))[0]
    assert model.training and len(gen.token_ids) > 0
    assert all(p.grad is None for p in model.parameters())


def test_lora_adapter_loading(tiny_model_dirs, tmp_path):
    from peft import LoraConfig, get_peft_model

    base = HFBackend.from_model(tiny_model_dirs["llama"])
    peft_model = get_peft_model(
        base.model,
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    peft_model.save_pretrained(tmp_path / "adapter")
    spec = SamplingSpec(greedy=True, max_new_tokens=6)
    expected = HFBackend(peft_model, base.tokenizer).generate(_prompts(base), spec)
    plain = HFBackend.from_model(tiny_model_dirs["llama"]).generate(_prompts(base), spec)
    assert [g.token_ids for g in expected] != [g.token_ids for g in plain]  # the adapter changes the model
    for loaded in (
        HFBackend.from_model(tiny_model_dirs["llama"], adapter=str(tmp_path / "adapter")),
        make_backend("hf", str(tmp_path / "adapter")),  # an adapter directory names its base model
    ):
        assert [g.token_ids for g in loaded.generate(_prompts(base), spec)] == [g.token_ids for g in expected]


def test_bad_inputs_are_clear_errors(tiny_model_dirs, tmp_path):
    with pytest.raises(ValueError, match="no such directory, and not a hub id"):
        HFBackend.from_model(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="cannot load model"):
        HFBackend.from_model(str(tmp_path))  # a directory, but no checkpoint in it
    with pytest.raises(ValueError, match="unknown dtype"):
        HFBackend.from_model(tiny_model_dirs["llama"], dtype="float13")
    backend = HFBackend.from_model(tiny_model_dirs["llama"], dtype="bfloat16")
    assert next(backend.model.parameters()).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="temperature"):
        backend.generate(_prompts(backend)[:1], SamplingSpec(temperature=0.0))


def test_prefix_cache_continues_only_rows_it_holds(tiny_model_dirs):
    """Within a session, prompts extending the last call's rows feed only their new tokens (same result as
    a fresh call); a prompt extending no row makes the whole call fresh; over budget, nothing is stored."""
    backend = HFBackend.from_model(tiny_model_dirs["llama"], device="cpu")
    spec = SamplingSpec(greedy=True, max_new_tokens=6)
    first = _prompts(backend)
    with backend.prefix_session() as cache:
        gens = backend.generate(first, spec)
        assert cache.kv and cache.tokens[0][: len(first[0].ids)] == first[0].ids
        tail = backend.tokenizer.encode(" next", add_special_tokens=False)
        second = [Prompt(ids=p.ids + g.token_ids + tail) for p, g in zip(first, gens)]
        reused = backend.generate(second, spec)
        assert cache.hits == 1
        stranger = [Prompt(ids=tail + p.ids) for p in second]
        backend.generate(stranger, spec)
        assert cache.misses == 1
    fresh = backend.generate(second, spec)
    assert [g.token_ids for g in reused] == [g.token_ids for g in fresh]
    for a, b in zip(reused, fresh):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    with backend.prefix_session() as cache:
        cache.max_bytes = 0
        backend.generate(first, spec)
        assert not cache.kv


def test_preallocated_layer_appends_like_dynamic_layer_and_grows():
    from transformers.cache_utils import DynamicLayer

    from sepo.backends.prefix_cache import PreallocatedLayer

    torch.manual_seed(0)
    ours, ref = PreallocatedLayer(capacity=4), DynamicLayer()
    for n in (3, 1, 1, 5):  # the third update outgrows the 4 reserved positions, the buffer doubles
        k, v = torch.randn(2, 3, n, 8), torch.randn(2, 3, n, 8)
        got, want = ours.update(k, v), ref.update(k, v)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert ours.get_seq_length() == ref.get_seq_length() == 10
