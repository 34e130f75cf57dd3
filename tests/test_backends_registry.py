"""The engine registry (`sepo.backends`): every backend built by name in one place, for `sepo eval` and the trainer,
and the end-of-turn id handed to the HF backend rather than learnt from the chat renderer."""

from __future__ import annotations

import pytest

from sepo.backends import (
    BACKENDS,
    ENGINES,
    TRAINER_BACKENDS,
    backend_class,
    make_backend,
    trainer_backend_class,
    trainer_engine,
)
from sepo.config.checks import UsageError
from sepo.eval.config import EvalConfig
from sepo.generation import GenerationBackend


def test_every_registered_engine_has_the_protocol_and_the_builders_its_entry_promises():
    for name, engine in ENGINES.items():
        cls = backend_class(name)
        for method in ("generate", "generate_choice", "score_choices"):  # the GenerationBackend protocol
            assert callable(getattr(cls, method, None)), (name, method)
        if engine.by_name:
            assert callable(getattr(cls, "from_model", None)), name
        if engine.in_trainer:
            assert callable(getattr(cls, "from_trainer", None)), name
    assert set(BACKENDS) | set(TRAINER_BACKENDS) == set(ENGINES)


def test_eval_takes_the_registry_s_names_and_refuses_a_trainer_only_engine():
    for name in BACKENDS:
        assert EvalConfig(models=["default"], backend=name, base_url="http://localhost:1/v1").backend == name
    with pytest.raises(UsageError, match="hf, vllm, openai"):
        EvalConfig(models=["default"], backend="trl_vllm")
    with pytest.raises(ValueError, match="choose one of: hf, vllm, openai"):
        make_backend("trl_vllm", "default")
    with pytest.raises(ValueError, match="choose one of: hf, trl_vllm"):
        trainer_backend_class("openai")


def test_the_trainer_s_engine_is_chosen_by_name():
    assert trainer_engine(use_vllm=True) == "trl_vllm" and trainer_engine(use_vllm=False) == "hf"
    assert {trainer_engine(True), trainer_engine(False)} == set(TRAINER_BACKENDS)


def test_the_hf_backend_stops_at_the_end_of_turn_id_it_is_given(tiny_model_dir):
    """The trainer's renderer's id is passed in and kept; without one, the template's own (the renderer's answer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sepo.backends.hf import HFBackend
    from sepo.rollout.chat import ChatRenderer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    renderer_id = ChatRenderer(tok).end_of_turn_id
    assert HFBackend(model, tok).end_of_turn_id == renderer_id
    other = tok.convert_tokens_to_ids("<|im_start|>")
    assert other != renderer_id
    backend = trainer_backend_class("hf").from_trainer(other, tokenizer=tok, model=model)
    assert isinstance(backend, HFBackend) and isinstance(backend, GenerationBackend)
    assert backend.end_of_turn_id == other and other in backend.stop_ids
