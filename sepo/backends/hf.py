"""transformers `generate` behind the GenerationBackend interface: batched, left-padded, exact sampling logprobs.

Sampling logprobs are recorded by a last-in-line logits processor, so they are the log-probabilities under
the distribution tokens were actually drawn from (trie mask, temperature, top-k, top-p applied), without
keeping every step's full score tensor. The same class wraps a live policy inside the trainer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

import torch
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from sepo.backends.hf_decoding import TrieLogitsProcessor, score_actions
from sepo.backends.prefix_cache import COUNTS, PrefixCache, plan_call
from sepo.config.models import adapter_base_model, resolve_model
from sepo.generation import Generation, GenerationBackend, Prompt, SamplingSpec, template_end_of_turn


class _LogprobRecorder(LogitsProcessor):
    """Keeps the final (processed) log-softmax of one step until the next step reveals the chosen token."""

    def __init__(self) -> None:
        self.previous: torch.Tensor | None = None
        self.logprobs: list[torch.Tensor] = []

    def _take(self, chosen: torch.Tensor) -> None:
        self.logprobs.append(self.previous.gather(1, chosen.view(-1, 1)).squeeze(1))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.previous is not None:
            self._take(input_ids[:, -1])
        self.previous = torch.log_softmax(scores.float(), -1)
        return scores

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor:
        """(batch, steps) logprobs of the generated tokens."""
        if self.previous is not None:
            self._take(last_tokens)
            self.previous = None
        return torch.stack(self.logprobs, 1)


def _keys(prompts: list[Prompt]) -> list[Hashable] | None:
    """The prompts' keys for the prefix cache, or None (their positions) unless every prompt has one."""
    keys = [p.key for p in prompts]
    return None if any(k is None for k in keys) else keys


def resolve_device(device: str | torch.device | None) -> torch.device:
    """`device`, or cuda when it is available, else cpu."""
    return torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | str | None:
    """A dtype name as torch's dtype; "auto", None and a torch dtype pass through; an unknown name is an error."""
    if isinstance(dtype, str) and dtype != "auto":
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise ValueError(f"unknown dtype {dtype!r}; use e.g. float32, bfloat16, float16 or auto")
        return getattr(torch, dtype)
    return dtype


class HFBackend(GenerationBackend):
    """GenerationBackend over a transformers causal LM (optionally PEFT-wrapped).

    The model is put in eval mode and run without gradients during every call, and its training mode is
    restored afterwards, so the trainer can generate with its live policy. A call given a session (the
    `PrefixCache` that `prefix_session()` opens; the rollout engine opens one per `play_episodes`) whose
    prompts all extend the session's previous `generate` call's rows feeds only the new tokens, and caches are
    preallocated per call (see `sepo.backends.prefix_cache`); a call without one is a plain `generate`.

    `end_of_turn_id`: the token completions stop at, as the caller's chat renderer knows it; None: the
    tokenizer's template's (`sepo.generation.template_end_of_turn`, the renderer's own answer by default).
    """

    def __init__(self, model: Any, tokenizer: Any, end_of_turn_id: int | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.end_of_turn_id = int(end_of_turn_id) if end_of_turn_id is not None else template_end_of_turn(tokenizer)
        self.stop_ids = sorted({self.end_of_turn_id, *self._config_eos_ids()})
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else self.end_of_turn_id
        self.prefix_counts: dict[str, int] = dict.fromkeys(COUNTS, 0)  # summed over the closed sessions

    # --- construction --------------------------------------------------------------------------------
    @classmethod
    def from_model(
        cls,
        name_or_path: str,
        dtype: str | torch.dtype | None = None,
        device: str | torch.device | None = None,
        adapter: str | None = None,
    ) -> HFBackend:
        """Load a checkpoint (`default` = the embedded SmolLM2), optionally with a LoRA adapter on top.

        A PEFT adapter directory may also be given as `name_or_path`; its base model is read from
        adapter_config.json. dtype None keeps the checkpoint's dtype; device None picks cuda when available.
        """
        # deferred: transformers' Auto classes load its modeling utilities (seconds on top of the generation
        # classes this module needs); the trainer's and the study's live models never load a checkpoint here
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = resolve_model(name_or_path)
        base = adapter_base_model(path) if adapter is None else None
        if base is not None:
            adapter, path = path, resolve_model(base)
        dtype, device = resolve_dtype(dtype), resolve_device(device)
        tokenizer_dir = adapter if adapter and (Path(adapter) / "tokenizer_config.json").is_file() else path
        try:
            tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or "auto")
        except (OSError, ValueError) as exc:  # transformers says ValueError for a directory without a tokenizer
            raise ValueError(f"cannot load model {name_or_path!r} (resolved to {path}): {exc}") from None
        if adapter:
            # deferred: peft takes seconds to import; only a checkpoint with a LoRA adapter needs it
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, adapter)
        return cls(model.to(device).eval(), tokenizer)

    @classmethod
    def from_trainer(cls, end_of_turn_id: int, tokenizer: Any, model: Any) -> HFBackend:
        """The trainer's engine (`sepo.backends.trainer_backend_class`): its live policy `model`, unwrapped for
        generation; weights are shared, nothing is copied."""
        return cls(model, tokenizer, end_of_turn_id)

    def _config_eos_ids(self) -> list[int]:
        eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        if eos is None:
            return []
        return [int(e) for e in (eos if isinstance(eos, list | tuple) else [eos])]

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @contextlib.contextmanager
    def _inference(self, seed: int | None) -> Iterator[None]:
        was_training = self.model.training
        self.model.eval()
        devices = [self.device] if self.device.type == "cuda" else []
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=devices, enabled=seed is not None):
                if seed is not None:
                    torch.manual_seed(seed)
                yield
        finally:
            self.model.train(was_training)

    @contextlib.contextmanager
    def prefix_session(self) -> Iterator[PrefixCache]:
        """A fresh session: the key/value cache that the `generate` / `generate_choice` calls given it
        (`session=`) reuse between them (the weights must not change meanwhile). When the block closes, its
        counts (hits, misses, stored, refused) are added to `prefix_counts`."""
        session = PrefixCache()
        try:
            yield session
        finally:
            for name, n in session.counts.items():
                self.prefix_counts[name] += n

    # --- GenerationBackend ---------------------------------------------------------------------------
    def generate(self, prompts: list[Prompt], sampling: SamplingSpec,
                 session: PrefixCache | None = None) -> list[Generation]:
        """Free generation until end-of-turn or `sampling.max_new_tokens` (reusing `session`'s cache)."""
        return self._generate(prompts, sampling, sampling.max_new_tokens, None, session)

    def generate_choice(
        self, prompts: list[Prompt], choices: list[list[str]], sampling: SamplingSpec,
        session: PrefixCache | None = None,
    ) -> list[Generation]:
        """Trie-constrained decode: each completion is one of its row's choices, then end-of-turn (reusing
        `session`'s cache; its stored rows stay: a forced turn is not what the next round continues)."""
        if len(prompts) != len(choices):
            raise ValueError(f"{len(prompts)} prompts but {len(choices)} choice lists")
        trie = TrieLogitsProcessor.for_choices(self.tokenizer, [p.ids for p in prompts], choices, self.end_of_turn_id)
        return self._generate(prompts, sampling, trie.max_depth + 1, trie, session)

    def score_choices(self, prompts: list[Prompt], choices: list[list[str]]) -> list[list[float]]:
        """Teacher-forced probabilities of each choice (+ end-of-turn), normalised per prompt."""
        return self.choice_masses(prompts, choices, normalise=True)

    def choice_masses(self, prompts: list[Prompt], choices: list[list[str]],
                      normalise: bool = False) -> list[list[float]]:
        """Teacher-forced probabilities of each choice's text (+ end-of-turn), as the model gives them (their sum
        is the mass on the canonical answers; the rest goes to other text), or normalised per prompt."""
        if not prompts:
            return []
        with self._inference(None):
            return score_actions(self.model, self.tokenizer, [p.ids for p in prompts], choices,
                                 self.end_of_turn_id, normalise=normalise)

    # --- internals -----------------------------------------------------------------------------------
    def _processors(self, sampling: SamplingSpec, first: LogitsProcessor | None) -> list[LogitsProcessor]:
        procs: list[LogitsProcessor] = [first] if first is not None else []
        if not sampling.greedy:
            if sampling.temperature <= 0:
                raise ValueError("temperature must be > 0 when sampling; use greedy=True for argmax decoding")
            if sampling.temperature != 1.0:
                procs.append(TemperatureLogitsWarper(sampling.temperature))
            if sampling.top_k and sampling.top_k > 0:
                procs.append(TopKLogitsWarper(sampling.top_k))
            if sampling.top_p < 1.0:
                procs.append(TopPLogitsWarper(sampling.top_p))
        return procs

    def _generate(
        self, prompts: list[Prompt], sampling: SamplingSpec, max_new_tokens: int, trie: TrieLogitsProcessor | None,
        session: PrefixCache | None,
    ) -> list[Generation]:
        if not prompts:
            return []
        if any(not p.ids for p in prompts):
            raise ValueError("every prompt needs at least one token id")
        with self._inference(None):  # a shared prefill and the feed ahead run the model
            call = plan_call(self.model, session, [p.ids for p in prompts], _keys(prompts), self.pad_id, self.device,
                             max_new_tokens)
        ids = call.input_ids[:, call.generate_from :]
        width = ids.shape[1]
        recorder = _LogprobRecorder()
        config = GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=not sampling.greedy,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            eos_token_id=[self.end_of_turn_id] if trie is not None else self.stop_ids,
            pad_token_id=self.pad_id,
            use_cache=True,
            return_dict_in_generate=True,
        )
        snapshot = [call.prompt_end] if call.prompt_end is not None else []  # linear layers: the prompt's end
        processors = [*self._processors(sampling, trie), recorder, *snapshot]
        with self._inference(sampling.seed):
            output = self.model.generate(
                input_ids=ids,
                attention_mask=call.attention_mask,
                past_key_values=call.past_key_values,
                generation_config=config,
                logits_processor=LogitsProcessorList(processors),
            )
        sequences = output.sequences
        new = sequences[:, width:]
        logprobs = recorder.finish(new[:, -1]).tolist()
        stops = set(config.eos_token_id)
        out, kept = [], []
        for row, row_lps in zip(new.tolist(), logprobs):
            end = next((k + 1 for k, t in enumerate(row) if t in stops), None)
            tokens, lps = row[: end or len(row)], row_lps[: end or len(row)]
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            out.append(Generation(token_ids=tokens, logprobs=lps, text=text, finished=end is not None))
            kept.append(len(tokens))
        if session is not None and trie is None:  # free turns are what the next round continues
            session.store(output.past_key_values, [p.ids for p in prompts], call.cache_valid,
                          torch.cat([call.input_ids, new], 1), call.attention_mask, kept, _keys(prompts),
                          prompt_end=call.prompt_end.states if call.prompt_end is not None else None)
        return out
