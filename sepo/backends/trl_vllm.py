"""`GenerationBackend` on top of TRL's own vLLM engine (`trainer.vllm_generation`), so SEPO rollouts use the
engine TRL keeps weight-synced.

colocate: the rank's `vllm.LLM` is driven directly through `sepo.backends.vllm.VLLMBackend` (per-prompt
    SamplingParams, structured `choice` per prompt, exact choice scoring).
server: every call goes through `VLLMGeneration.generate`, a collective (gather -> rank-0 HTTP ->
    broadcast): ranks pad their batches to the same size, and constrained calls are made once per distinct
    choice list across all ranks, in the same order everywhere, with `structured_outputs` in generation_kwargs.
"""

from __future__ import annotations

from typing import Any

from accelerate.utils import gather_object

from sepo.backends.base import Generation, Prompt, SamplingSpec


def check_supported(vllm_generation: Any) -> None:
    """Raise a clear error for TRL vLLM settings the SEPO rollout does not support."""
    if getattr(vllm_generation, "enable_sleep_mode", False):
        raise ValueError("vllm_enable_sleep_mode is not supported by SEPO rollouts; set it to false")
    if vllm_generation.mode == "colocate" and getattr(vllm_generation, "tensor_parallel_size", 1) > 1:
        raise ValueError("SEPO rollouts in colocate mode need vllm_tensor_parallel_size=1 (use server mode for TP)")


def ensure_weight_sync(vllm_generation: Any) -> bool:
    """Make colocate weight sync work where the engine's parameters lost their weight loaders after loading
    (vLLM CPU kernels repack them; TRL 1.16's per-parameter `load_weights` then fails): push the (PEFT-merged)
    weights through vLLM's in-place `reload_weights` instead, which restores the loaders, loads and
    re-processes. Returns True when the replacement was installed; TRL's own sync is kept otherwise."""
    if vllm_generation.mode != "colocate":
        return False
    runner = vllm_generation.llm.llm_engine.model_executor.driver_worker.model_runner
    if all(hasattr(p, "weight_loader") for p in runner.model.parameters()):
        return False
    from vllm.model_executor.model_loader.reload.inplace import reload_weights

    def sync_weights() -> None:
        reload_weights(runner.vllm_config, runner.model, vllm_generation._iter_named_params(), None,
                       is_checkpoint_format=True)
        vllm_generation.llm.reset_prefix_cache()

    vllm_generation.sync_weights = sync_weights
    return True


class TRLVLLMBackend:
    """Adapter from TRL's `VLLMGeneration` (colocate or server) to `sepo.backends.base.GenerationBackend`."""

    def __init__(self, vllm_generation: Any, tokenizer: Any, end_of_turn_id: int) -> None:
        check_supported(vllm_generation)
        self.vg, self.tokenizer, self.eot = vllm_generation, tokenizer, int(end_of_turn_id)
        self.local = None
        if vllm_generation.mode == "colocate":
            from sepo.backends.vllm import VLLMBackend

            self.local = VLLMBackend(vllm_generation.llm, end_of_turn_ids=[self.eot])

    # --- server mode: collective calls -------------------------------------------------------------
    def _collective(self, ids: list[list[int]], generation_kwargs: dict[str, Any]) -> list[Generation]:
        """One `VLLMGeneration.generate` call with this rank's prompts padded to the largest rank's count."""
        counts = gather_object([len(ids)])
        if max(counts) == 0:  # every rank agrees: nothing to generate, no request
            return []
        padded = ids + [[self.eot]] * (max(counts) - len(ids))
        saved = self.vg.generation_kwargs
        self.vg.generation_kwargs = {**saved, **generation_kwargs}
        try:
            _, completions, logprobs, _ = self.vg.generate(prompts=padded, images=None, num_generations=1)
        finally:
            self.vg.generation_kwargs = saved
        gens = []
        for toks, lps in list(zip(completions, logprobs))[: len(ids)]:
            toks = list(toks)
            gens.append(Generation(token_ids=toks, logprobs=[float(x[0]) for x in lps],
                                   text=self.tokenizer.decode(toks, skip_special_tokens=True),
                                   finished=bool(toks) and toks[-1] == self.eot))
        return gens

    def generate(self, prompts: list[Prompt], sampling: SamplingSpec) -> list[Generation]:
        if self.local is not None:
            return self.local.generate(prompts, sampling) if prompts else []
        kwargs = {"max_tokens": sampling.max_new_tokens, "stop_token_ids": [self.eot]}
        return self._collective([p.ids for p in prompts], kwargs)

    def generate_choice(self, prompts: list[Prompt], choices: list[list[str]], sampling: SamplingSpec):
        if self.local is not None:
            return self.local.generate_choice(prompts, choices, sampling) if prompts else []
        from sepo.backends.vllm import check_batch, choice_max_tokens

        check_batch(prompts, choices)
        keys = [tuple(c) for c in choices]
        every = sorted({k for rank_keys in gather_object([keys]) for k in rank_keys})
        out: list[Generation | None] = [None] * len(prompts)
        for key in every:  # the same sequence of collective calls on every rank
            idx = [i for i, k in enumerate(keys) if k == key]
            kwargs = {"max_tokens": choice_max_tokens(key), "stop_token_ids": [self.eot],
                      "structured_outputs": {"choice": list(key)}}
            for i, gen in zip(idx, self._collective([prompts[i].ids for i in idx], kwargs)):
                out[i] = gen
        return out

    def score_choices(self, prompts: list[Prompt], choices: list[list[str]]) -> list[list[float]]:
        if self.local is not None:
            return self.local.score_choices(prompts, choices) if prompts else []
        raise NotImplementedError("score_choices needs prompt logprobs, which TRL's vLLM server client does not "
                                  "return; use colocate mode or the HF backend for choice scoring")
