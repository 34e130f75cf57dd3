"""Pins of every private or experimental TRL / vLLM name SEPO uses (`sepo.grpo.trl_seam` lists them), against
the installed versions: an upgrade that renames, re-signs or drops one fails here, by name. The vLLM pins skip
when vLLM's pieces are not importable (a machine without vLLM never reaches them)."""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch

from sepo.grpo import trl_seam


def _params(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def _source(obj) -> str:
    return inspect.getsource(obj)


# --- TRL's GRPOTrainer ---------------------------------------------------------------------------------------
def test_rollout_func_is_a_constructor_argument_called_with_prompts_and_the_trainer():
    from trl import GRPOTrainer

    assert "rollout_func" in _params(GRPOTrainer.__init__)
    generate = _source(GRPOTrainer._generate)
    assert "self.rollout_func(prompts, self)" in generate  # SeamTrainer._rollout_func's (prompts, trainer)
    for key in trl_seam.ROLLOUT_KEYS:  # the keys TRL requires of its result
        assert f'"{key}"' in generate, key
    assert f'extra_fields.pop("{trl_seam.ENV_MASK}"' in generate  # env_mask becomes the tool mask


def test_generate_and_score_completions_signature_output_keys_and_extra_columns():
    from trl import GRPOTrainer

    assert _params(GRPOTrainer._generate_and_score_completions) == ["self", "inputs"]
    source = _source(GRPOTrainer._generate_and_score_completions)
    for key in trl_seam.SCORED_KEYS:
        assert f'"{key}": ' in source, key
    assert f'output["{trl_seam.TOOL_MASK}"]' in source
    # the rollout's extra columns reach the scored inputs (and with them the reward functions' kwargs)
    assert "inp[key] = values[i]" in source
    assert source.index("inp[key] = values[i]") < source.index("self._calculate_rewards(")


def test_trainer_attributes_set_by_grpo_trainer_init():
    from trl import GRPOTrainer

    init = _source(GRPOTrainer.__init__)
    for attribute in ("self._tokenizer =", "self._metrics =", "self.eos_token_ids =", "self.num_generations_eval =",
                      "self.use_vllm ="):
        assert attribute in init, attribute
    assert "defaultdict(list)" in init.split("self._metrics =", 1)[1].splitlines()[0]  # mode -> key -> list
    assert "self.vllm_generation = VLLMGeneration(" in _source(GRPOTrainer)


def test_seam_trainer_overrides_only_existing_names():
    from trl import GRPOTrainer

    overridden = {"_generate_and_score_completions", "_get_per_token_logps_and_entropies"}
    assert all(hasattr(GRPOTrainer, n) for n in overridden)
    own = {n for n in vars(trl_seam.SeamTrainer) if not n.startswith("__")}
    clashes = {n for n in own - overridden if hasattr(GRPOTrainer, n)}
    assert not clashes, f"TRL now defines {clashes}: the seam's names would override them"


def test_per_token_logps_signature_and_the_fused_head_it_calls():
    from trl import GRPOTrainer

    method = GRPOTrainer._get_per_token_logps_and_entropies
    assert _params(method)[:8] == ["self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size",
                                   "compute_entropy", "compute_aux_loss"]
    source = _source(method)
    assert "model(**model_inputs, labels=labels, fused_lm_head=True)" in source  # what `fused_head` calls
    assert "outputs.log_probs[:, -logits_to_keep:]" in source and "outputs.entropy[:, -logits_to_keep:]" in source
    assert "with self.accelerator.autocast():" in source
    init = _source(GRPOTrainer.__init__)  # the head computes the entropies the loss asks for
    assert 'outputs=("log_probs", "entropy")' in init
    loss = _source(GRPOTrainer._compute_loss)
    assert "self._get_per_token_logps_and_entropies(" in loss and "compute_entropy=True" in loss
    # SeamTrainer.scored_batch: a batch played and scored outside train(), whose loop sets the accumulation steps
    assert _params(GRPOTrainer._prepare_inputs) == ["self", "generation_batch"]
    assert "self.current_gradient_accumulation_steps" in loss


def test_the_fused_heads_device_test_is_looked_up_when_the_head_runs():
    """`score_labelled_positions_only` replaces `trl.trainer.utils._use_triton`: the head must read it by that
    name at call time and pick the labelled-only rows with it."""
    import trl.trainer.utils as trl_utils

    source = _source(trl_utils.add_fused_lm_head)
    assert "compact = _use_triton(hidden_states.device)" in source
    assert "hidden_states[mask] if compact else" in source and "labels[mask] if compact else" in source
    assert _params(trl_utils._use_triton) == ["device"]


def test_the_cpu_head_projects_only_labelled_positions_with_the_full_paths_values(tiny_model_dir, monkeypatch):
    """After `score_labelled_positions_only`, TRL's fused head on a CPU hands its kernel only the labelled
    positions, and returns the log-probabilities and entropies the every-position path returns there (0
    elsewhere, as before)."""
    import trl.trainer.utils as trl_utils
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    trl_utils.add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    ids = torch.randint(3, model.config.vocab_size, (3, 10), generator=torch.Generator().manual_seed(0))
    labels = ids.clone()
    labels[:, :6] = -100  # a prompt
    labels[0, 8:] = -100  # padding
    rows = []
    apply = trl_utils._ChunkedLogProbFunction.apply
    monkeypatch.setattr(trl_utils._ChunkedLogProbFunction, "apply",
                        lambda hidden, *rest: rows.append(hidden.shape[0]) or apply(hidden, *rest))
    # TRL's own test (an earlier trainer in this process may have replaced it), restored after the test
    monkeypatch.setattr(trl_utils, "_use_triton", getattr(trl_utils._use_triton, "sepo_triton", trl_utils._use_triton))
    with torch.no_grad():
        full = model(input_ids=ids, labels=labels, fused_lm_head=True)
        trl_seam.score_labelled_positions_only()
        trl_seam.score_labelled_positions_only()  # idempotent: wraps once
        compact = model(input_ids=ids, labels=labels, fused_lm_head=True)
    assert rows == [3 * 9, int((labels[:, 1:] != -100).sum())]
    torch.testing.assert_close(compact.log_probs, full.log_probs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(compact.entropy, full.entropy, atol=1e-5, rtol=1e-5)
    assert full.log_probs[:, :5].abs().max() == 0 and full.log_probs[1:, 5:].abs().min() > 0


def test_unwrap_model_for_generation_and_nanstd():
    from trl.models.utils import unwrap_model_for_generation

    assert _params(unwrap_model_for_generation)[:3] == ["model", "accelerator", "gather_deepspeed3_params"]
    assert _params(trl_seam.nanstd)[:3] == ["tensor", "dim", "keepdim"]
    x = torch.tensor([[1.0, 3.0, torch.nan], [2.0, 2.0, 2.0]])
    torch.testing.assert_close(trl_seam.nanstd(x, dim=1, keepdim=True), torch.tensor([[2.0**0.5], [0.0]]))


# --- TRL's VLLMGeneration --------------------------------------------------------------------------------
def _vllm_generation_class():
    try:
        return importlib.import_module("trl.generation.vllm_generation").VLLMGeneration
    except ImportError as exc:  # pragma: no cover - TRL without its vLLM module
        pytest.skip(f"trl.generation.vllm_generation is not importable: {exc}")


def test_vllm_generation_generate_reads_generation_kwargs():
    vg = _vllm_generation_class()
    assert _params(vg.generate)[:4] == ["self", "prompts", "images", "num_generations"]
    generate = _source(vg.generate)
    assert '"generation_kwargs": self.generation_kwargs' in generate  # server mode: read from the attribute
    assert "generation_kwargs.update(self.generation_kwargs)" in generate  # colocate mode
    assert "Tuple of (prompt_ids, completion_ids, logprobs, logprob_token_ids)" in generate
    init = _source(vg.__init__)
    for attribute in ("self.generation_kwargs =", "self.mode =", "self.enable_sleep_mode =",
                      "self.tensor_parallel_size ="):
        assert attribute in init, attribute
    assert "self.llm = LLM(" in _source(vg)


def test_vllm_generation_weight_sync_names():
    vg = _vllm_generation_class()
    assert _params(vg._iter_named_params) == ["self"]
    assert _params(vg.sync_weights) == ["self"]  # replaced by a zero-argument function (ensure_weight_sync)


def test_vllm_generate_passes_the_kwargs_for_one_call_and_restores_them():
    class Double:  # what `vllm_generate` needs of a VLLMGeneration
        def __init__(self):
            self.generation_kwargs, self.seen = {"seed": 1}, None

        def generate(self, prompts, images, num_generations):
            self.seen = dict(self.generation_kwargs)
            return prompts, [[5]] * len(prompts), [[[-0.5]]] * len(prompts), None

    double = Double()
    assert trl_seam.vllm_generate(double, [[1, 2]], {"max_tokens": 3}) == ([[5]], [[[-0.5]]])
    assert double.seen == {"seed": 1, "max_tokens": 3} and double.generation_kwargs == {"seed": 1}


# --- vLLM's engine internals (colocate weight sync) ------------------------------------------------------------
def _vllm_module(name: str):
    try:
        return importlib.import_module(name)
    except Exception as exc:  # vLLM missing, or its platform pieces fail to import here
        pytest.skip(f"{name} is not importable: {exc}")


def test_vllm_reload_weights_signature():
    inplace = _vllm_module("vllm.model_executor.model_loader.reload.inplace")
    params = inspect.signature(inplace.reload_weights).parameters
    assert list(params)[:4] == ["vllm_config", "model", "weights_iterator", "weights_path"]
    assert "is_checkpoint_format" in params


def test_vllm_model_runner_path_and_prefix_cache_reset():
    llm_engine = _vllm_module("vllm.v1.engine.llm_engine")
    uniproc = _vllm_module("vllm.v1.executor.uniproc_executor")
    worker_base = _vllm_module("vllm.v1.worker.worker_base")
    cpu_worker = _vllm_module("vllm.v1.worker.cpu_worker")
    runner = _vllm_module("vllm.v1.worker.gpu_model_runner")
    vllm = _vllm_module("vllm")
    assert "llm_engine" in _source(vllm.LLM.__init__)
    assert "self.model_executor =" in _source(llm_engine.LLMEngine.__init__)
    assert "self.driver_worker =" in _source(uniproc.UniProcExecutor)
    assert "return getattr(self.worker, attr)" in _source(worker_base.WorkerWrapperBase.__getattr__)
    assert "self.model_runner =" in _source(cpu_worker)  # the worker's runner (CPU; the GPU worker alike)
    assert "self.vllm_config = vllm_config" in _source(runner.GPUModelRunner.__init__)
    assert "self.model =" in _source(runner.GPUModelRunner)
    assert hasattr(vllm.LLM, "reset_prefix_cache")
