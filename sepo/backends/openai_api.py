"""An OpenAI-compatible endpoint behind `GenerationBackend`, through the official `openai` SDK.

Two kinds of server, detected from `/v1/models` (`owned_by == "vllm"`) unless `server=` says:

- vLLM: `generate` asks for `return_token_ids` so completions carry token ids (ending with end-of-turn when
  finished) and per-token logprobs; `generate_choice` uses structured outputs (`choice`) and continues the
  assistant's own text (`continue_final_message`); `score_choices` is exact, by teacher forcing token-id
  prompts through `/v1/completions` with `echo` + logprobs (needs the served model's tokenizer).
- any other (e.g. api.openai.com): chat only, so `token_ids` are empty (an eval-only backend; logprobs come
  back when the model supports them); `generate_choice` asks for a JSON object `{"action": <enum>}` with
  `response_format=json_schema`, where the endpoint cannot continue the assistant's text (the prefix is
  sent as a finished assistant turn) and an invalid answer comes back as `finished=False` with empty text;
  `score_choices` raises `ExactScoringUnavailableError`.

Requests of a batch run concurrently (`max_concurrency`); timeouts and retries with backoff are the SDK's.
Token usage is summed in `backend.usage`.

The module is also the project's one way to an OpenAI-compatible endpoint: `connect` builds the SDK client
(endpoint and key from the arguments or the environment) and `Usage` counts what the endpoint bills, for this
backend and for FMSP's foundation models and embedder (`fmsp.fm`, `fmsp.embeddings`). The `openai` package is
optional, so it is imported only by what talks to an endpoint.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from sepo.backends.vllm import (
    check_batch,
    choice_max_tokens,
    choice_probabilities,
    choice_token_ids,
    request_seeds,
)
from sepo.generation import Generation, GenerationBackend, Prompt, SamplingSpec

if TYPE_CHECKING:
    import openai

T = TypeVar("T")
ServerKind = Literal["vllm", "openai"]


class EndpointUnreachableError(ConnectionError):
    """The endpoint did not answer (refused or timed out) after the SDK's retries."""


class ExactScoringUnavailableError(NotImplementedError):
    """Exact choice scoring needs prompt logprobs, which only a vLLM server provides."""


NO_ENDPOINT = ("no endpoint configured: pass base_url= (or set OPENAI_BASE_URL) for an OpenAI-compatible server "
               "such as vLLM, or api_key= (or set OPENAI_API_KEY) for api.openai.com")


@dataclass
class Usage:
    """What a client's calls cost: tokens, calls, retries and, where a price is known, dollars; `+=` adds."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0
    retries: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __iadd__(self, other: Usage) -> Usage:
        for name in ("prompt_tokens", "completion_tokens", "cost_usd", "calls", "retries"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self


def connect(base_url: str | None, api_key: str | None, timeout: float, max_retries: int,
            no_endpoint: str = NO_ENDPOINT) -> openai.OpenAI:
    """The SDK client for `base_url` (else $OPENAI_BASE_URL, else OpenAI) with `api_key` (else $OPENAI_API_KEY;
    a custom endpoint without one gets "EMPTY", as vLLM expects); with neither, a ValueError saying
    `no_endpoint`. `max_retries` are the SDK's own (with its backoff)."""
    # deferred: openai takes ~0.4 s to import; only a client that talks to an endpoint needs it (`sepo eval` of
    # local checkpoints never does)
    import openai

    base_url = base_url or os.environ.get("OPENAI_BASE_URL")
    api_key = api_key or os.environ.get("OPENAI_API_KEY") or ("EMPTY" if base_url else None)
    if api_key is None:
        raise ValueError(no_endpoint)
    return openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries)


class OpenAIBackend(GenerationBackend):
    """`GenerationBackend` over an OpenAI-compatible chat endpoint (a vLLM server gets exact extras; no session:
    the server caches prefixes by itself)."""

    def __init__(
        self,
        client: openai.OpenAI,
        model: str,
        *,
        tokenizer: Any | None = None,
        server: ServerKind | None = None,
        logprobs: bool = True,
        extra_body: dict[str, Any] | None = None,
        max_concurrency: int = 16,
    ) -> None:
        """`tokenizer` (the served model's) is needed only by `score_choices`; `server` skips detection;
        `extra_body` is merged into every chat request (e.g. `{"chat_template_kwargs": {...}}` on vLLM)."""
        self.client, self.model, self.tokenizer = client, model, tokenizer
        self.logprobs, self.extra_body, self.max_concurrency = (
            logprobs,
            dict(extra_body or {}),
            max_concurrency,
        )
        self.usage = Usage()
        self._server = server
        self._lock = threading.Lock()

    @classmethod
    def from_model(
        cls,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        tokenizer: str | Any | None = None,
        **kwargs: Any,
    ) -> OpenAIBackend:
        """Connect to `base_url` with `api_key` (`connect`). `tokenizer`: a tokenizer or a path for it; by
        default the model's own directory when `model` is a local path."""
        client = connect(base_url, api_key, timeout, max_retries)
        if tokenizer is None and Path(model).is_dir():
            tokenizer = model
        if isinstance(tokenizer, (str, os.PathLike)):
            # deferred: transformers takes seconds to import; only model code needs it
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        return cls(client, model, tokenizer=tokenizer, **kwargs)

    # -- plumbing -------------------------------------------------------------------------------------

    def _call(self, fn: Callable[..., T], **kw: Any) -> T:
        """One SDK request; connection failures become EndpointUnreachableError, usage is counted."""
        # deferred: openai is loaded by `connect` (above) only once a client exists; here it is already in memory
        import openai

        try:
            response = fn(**kw)
        except (openai.APIConnectionError, openai.APITimeoutError) as e:
            raise EndpointUnreachableError(
                f"cannot reach the OpenAI-compatible endpoint {self.client.base_url} (model {self.model!r}) "
                f"after {self.client.max_retries} retries: {e}"
            ) from e
        usage = getattr(response, "usage", None)
        with self._lock:
            self.usage.calls += 1
            if usage is not None:
                self.usage.prompt_tokens += usage.prompt_tokens or 0
                self.usage.completion_tokens += usage.completion_tokens or 0
        return response

    def _map(self, fn: Callable[[int], T], n: int) -> list[T]:
        """fn(0..n-1) concurrently, results in order (the server batches concurrent requests)."""
        if n <= 1:
            return [fn(i) for i in range(n)]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, n)) as pool:
            return list(pool.map(fn, range(n)))

    @property
    def server(self) -> ServerKind:
        """The endpoint kind: "vllm" when its model list says owned_by "vllm", else "openai" (asked once)."""
        if self._server is None:
            models = self._call(self.client.models.list)
            owners = {m.id: getattr(m, "owned_by", None) for m in models.data}
            self._server = "vllm" if owners.get(self.model) == "vllm" else "openai"
        return self._server

    def _sampling(self, spec: SamplingSpec, seed: int | None) -> dict[str, Any]:
        kw: dict[str, Any] = (
            {"temperature": 0.0} if spec.greedy else {"temperature": spec.temperature, "top_p": spec.top_p}
        )
        if seed is not None:
            kw["seed"] = seed
        if self.logprobs:
            kw["logprobs"] = True
        return kw

    def _vllm_extras(self, spec: SamplingSpec) -> dict[str, Any]:
        return {"return_token_ids": True, **({} if spec.greedy or not spec.top_k else {"top_k": spec.top_k})}

    @staticmethod
    def _messages(prompt: Prompt) -> list[dict[str, str]]:
        if not prompt.messages:
            raise ValueError(
                "OpenAIBackend needs Prompt.messages: chat endpoints take messages, not token ids"
            )
        if prompt.assistant_prefix:
            return [*prompt.messages, {"role": "assistant", "content": prompt.assistant_prefix}]
        return list(prompt.messages)

    @staticmethod
    def _generation(choice: Any) -> Generation:
        """A Generation from a chat choice; token ids only where the server returned them (vLLM)."""
        extra = choice.model_extra or {}
        content = choice.logprobs.content if choice.logprobs is not None and choice.logprobs.content else []
        return Generation(
            token_ids=list(extra.get("token_ids") or []),
            logprobs=[t.logprob for t in content],
            text=choice.message.content or "",
            finished=choice.finish_reason == "stop",
        )

    # -- GenerationBackend ----------------------------------------------------------------------------

    def generate(self, prompts: list[Prompt], sampling: SamplingSpec, session: None = None) -> list[Generation]:
        """One chat completion per prompt (its messages, plus the assistant prefix as an assistant turn)."""
        vllm = self.server == "vllm"
        seeds = request_seeds(sampling, len(prompts))

        def one(i: int) -> Generation:
            body = {**(self._vllm_extras(sampling) if vllm else {}), **self.extra_body}
            r = self._call(
                self.client.chat.completions.create,
                model=self.model,
                messages=self._messages(prompts[i]),
                max_tokens=sampling.max_new_tokens,
                **self._sampling(sampling, seeds[i]),
                **({"extra_body": body} if body else {}),
            )
            return self._generation(r.choices[0])

        return self._map(one, len(prompts))

    def generate_choice(
        self, prompts: list[Prompt], choices: list[list[str]], sampling: SamplingSpec, session: None = None
    ) -> list[Generation]:
        """Constrained answer per prompt: vLLM structured `choice` continuing the assistant's text, else a
        json_schema enum (see the module docstring)."""
        check_batch(prompts, choices)
        vllm = self.server == "vllm"
        seeds = request_seeds(sampling, len(prompts))

        def one(i: int) -> Generation:
            prompt, options = prompts[i], list(choices[i])
            kw = dict(model=self.model, messages=self._messages(prompt), **self._sampling(sampling, seeds[i]))
            if vllm:
                cont = bool(prompt.assistant_prefix)
                body = {
                    **self._vllm_extras(sampling),
                    **self.extra_body,
                    "structured_outputs": {"choice": options},
                    "continue_final_message": cont,
                    "add_generation_prompt": not cont,
                }
                r = self._call(
                    self.client.chat.completions.create,
                    max_tokens=choice_max_tokens(options),
                    extra_body=body,
                    **kw,
                )
                return self._generation(r.choices[0])
            schema = {
                "type": "object",
                "properties": {"action": {"type": "string", "enum": options}},
                "required": ["action"],
                "additionalProperties": False,
            }
            fmt = {"type": "json_schema", "json_schema": {"name": "action", "strict": True, "schema": schema}}
            r = self._call(
                self.client.chat.completions.create,
                response_format=fmt,
                max_tokens=max(sampling.max_new_tokens, choice_max_tokens(options) + 16),
                **kw,
                **({"extra_body": self.extra_body} if self.extra_body else {}),
            )
            try:
                action = json.loads(r.choices[0].message.content or "")["action"]
            except (json.JSONDecodeError, KeyError, TypeError):
                action = None
            if action in options:
                return Generation(token_ids=[], logprobs=[], text=action, finished=True)
            return Generation(token_ids=[], logprobs=[], text="", finished=False)

        return self._map(one, len(prompts))

    def score_choices(self, prompts: list[Prompt], choices: list[list[str]]) -> list[list[float]]:
        """Exact probabilities on a vLLM server: teacher-forced prompt ids + choice + end-of-turn through
        `/v1/completions` (echo, logprobs), one request for all pairs, normalised per prompt."""
        check_batch(prompts, choices)
        if self.server != "vllm":
            raise ExactScoringUnavailableError(
                f"exact choice scoring needs a vLLM server (prompt logprobs via echo); {self.client.base_url} "
                "is not one. Use generate_choice, or serve the model with vLLM"
            )
        if self.tokenizer is None:
            raise ValueError(
                "score_choices needs the served model's tokenizer: pass tokenizer= to OpenAIBackend"
            )
        eot = self.tokenizer.eos_token_id
        pairs = [
            (p, p.ids + choice_token_ids(self.tokenizer, c, eot))
            for p, cs in zip(prompts, choices)
            for c in cs
        ]
        r = self._call(
            self.client.completions.create,
            model=self.model,
            prompt=[ids for _, ids in pairs],
            echo=True,
            logprobs=0,
            max_tokens=1,
            temperature=1.0,
        )
        by_index = sorted(r.choices, key=lambda c: c.index)
        logliks = [
            sum(c.logprobs.token_logprobs[len(p.ids) : len(ids)]) for (p, ids), c in zip(pairs, by_index)
        ]
        return choice_probabilities(logliks, choices)
