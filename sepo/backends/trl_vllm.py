"""`GenerationBackend` on top of TRL's own vLLM engine (the trainer's `VLLMGeneration`), so SEPO rollouts use the
engine TRL keeps weight-synced. TRL's engine is handed in by the trainer's seam (`sepo.grpo.trl_seam.engine_parts`):
the colocate `vllm.LLM` (None in server mode) and `collective`, one `VLLMGeneration.generate` call with extra
generation kwargs; nothing here names TRL.

colocate: the rank's `vllm.LLM` is driven directly through `sepo.backends.vllm.VLLMBackend` (per-prompt
    SamplingParams, structured `choice` per prompt, exact choice scoring).
server: every call goes through `collective`, a collective (gather -> rank-0 HTTP -> broadcast): ranks pad their
    batches to the same size, and constrained calls are made once per distinct choice list across all ranks, in
    the same order everywhere, with `structured_outputs` in the call's generation kwargs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accelerate.utils import gather_object

from sepo.backends.vllm import VLLMBackend, check_batch, choice_max_tokens
from sepo.generation import Generation, GenerationBackend, Prompt, SamplingSpec

Collective = Callable[[list[list[int]], dict[str, Any]], tuple[list[list[int]], list[list[list[float]]]]]
"""(token-id prompts, generation kwargs for this call) -> (completion ids, logprobs per token), on every rank."""


class TRLVLLMBackend(GenerationBackend):
    """Adapter from TRL's `VLLMGeneration` (colocate `llm`, or server `collective`) to `GenerationBackend` (no
    session: vLLM caches prefixes by itself)."""

    def __init__(self, collective: Collective, llm: Any, tokenizer: Any, end_of_turn_id: int) -> None:
        self.collective, self.tokenizer, self.eot = collective, tokenizer, int(end_of_turn_id)
        self.local = VLLMBackend(llm, end_of_turn_ids=[self.eot]) if llm is not None else None

    @classmethod
    def from_trainer(cls, end_of_turn_id: int, tokenizer: Any, collective: Collective, llm: Any
                     ) -> TRLVLLMBackend:
        """The trainer's engine (`sepo.backends.trainer_backend_class`): TRL's, as the seam hands it in."""
        return cls(collective, llm, tokenizer, end_of_turn_id)

    # --- server mode: collective calls -------------------------------------------------------------
    def _collective(self, ids: list[list[int]], generation_kwargs: dict[str, Any]) -> list[Generation]:
        """One collective call with this rank's prompts padded to the largest rank's count."""
        counts = gather_object([len(ids)])
        if max(counts) == 0:  # every rank agrees: nothing to generate, no request
            return []
        padded = ids + [[self.eot]] * (max(counts) - len(ids))
        completions, logprobs = self.collective(padded, generation_kwargs)
        gens = []
        for toks, lps in list(zip(completions, logprobs))[: len(ids)]:
            toks = list(toks)
            gens.append(Generation(token_ids=toks, logprobs=[float(x[0]) for x in lps],
                                   text=self.tokenizer.decode(toks, skip_special_tokens=True),
                                   finished=bool(toks) and toks[-1] == self.eot))
        return gens

    def generate(self, prompts: list[Prompt], sampling: SamplingSpec, session: None = None) -> list[Generation]:
        if self.local is not None:
            return self.local.generate(prompts, sampling) if prompts else []
        kwargs = {"max_tokens": sampling.max_new_tokens, "stop_token_ids": [self.eot]}
        return self._collective([p.ids for p in prompts], kwargs)

    def generate_choice(self, prompts: list[Prompt], choices: list[list[str]], sampling: SamplingSpec,
                        session: None = None) -> list[Generation]:
        if self.local is not None:
            return self.local.generate_choice(prompts, choices, sampling) if prompts else []
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
