"""The one small interface every generation backend implements (HF generate, vLLM, OpenAI-compatible).

Shared by the backends (`sepo.backends`, which implement it) and the rollout engine (`sepo.rollout`, which
calls it), so neither subpackage imports the other for it.

The rollout engine owns chat rendering and token bookkeeping, so backends take already-rendered prompts
(token ids, plus the chat messages for endpoints that only speak chat) and return token ids with their
sampling log-probabilities. Each method is one batched call: the rollout makes exactly one call per round
(plus at most one constrained-fallback call and one scoring call), the same number on every rank.

Every completion ends with the chat template's end-of-turn token, which the rollout's renderer and the backend
must agree on: the caller that holds a renderer passes its `end_of_turn_id` to the backend it builds, and a
backend loaded by name learns it from the same function (`template_end_of_turn`), without the renderer.
"""

from __future__ import annotations

from collections.abc import Hashable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

_MARK = "Zq"  # an assistant message's content, located in the rendered probe conversation


class ChatTemplateError(ValueError):
    """The tokenizer cannot render chats (no template) or its template does not fit the game loop."""


def template_end_of_turn(tokenizer: Any, chat_template: str | None = None, enable_thinking: bool = False) -> int:
    """The first special token `chat_template` (default: the tokenizer's) writes after an assistant message's
    content, else the tokenizer's eos token: the token every completion ends with."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "u"}, {"role": "assistant", "content": _MARK}],
        chat_template=chat_template or getattr(tokenizer, "chat_template", None), add_generation_prompt=False,
        tokenize=False, return_dict=False, enable_thinking=enable_thinking)
    tail = text[text.rindex(_MARK) + len(_MARK) :]
    special = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}))
    for t in tokenizer.encode(tail, add_special_tokens=False):
        if t in special:
            return int(t)
    if tokenizer.eos_token_id is None:
        raise ChatTemplateError("cannot find the end-of-turn token: the template closes turns without a special "
                                "token and the tokenizer has no eos_token")
    return int(tokenizer.eos_token_id)


@dataclass(frozen=True)
class SamplingSpec:
    """Decoding settings for one call. `greedy=True` ignores temperature/top_p/top_k."""

    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 0
    max_new_tokens: int = 64
    greedy: bool = False
    seed: int | None = None


@dataclass
class Prompt:
    """One rendered prompt.

    ids: the full token-id context (chat template applied, generation prompt added, and for a fallback
        call also the model's text so far plus the cue).
    messages: the same context as chat messages, for chat-only endpoints.
    assistant_prefix: text already written in the current assistant turn (fallback calls), which
        chat-only endpoints continue rather than start a new turn.
    key: the episode the prompt belongs to, for a backend that keeps each episode's state between calls (the
        HF prefix cache continues the row stored under the same key); None: its position in the call.
    """

    ids: list[int]
    messages: list[dict[str, str]] = field(default_factory=list)
    assistant_prefix: str = ""
    key: Hashable | None = None


@dataclass
class Generation:
    """One completion: sampled token ids (ending with the end-of-turn token when `finished`), their
    log-probabilities under the sampling distribution, and the decoded text (special tokens removed)."""

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finished: bool


@runtime_checkable
class GenerationBackend(Protocol):
    """What the rollout engine and `sepo eval` need from a model server.

    A session is state a backend keeps between the calls of one rollout: `prefix_session()` opens one, and the
    calls given it (`session=`) may reuse it (HF: the key/value cache of the previous round; the weights must
    not change meanwhile). Backends subclass this protocol and inherit its no-op session, None, unless they
    keep one (vLLM and OpenAI-compatible servers cache prefixes by themselves)."""

    def prefix_session(self) -> AbstractContextManager[Any]:
        """A session for the calls of one rollout; here a no-op yielding None."""
        return nullcontext()

    def generate(self, prompts: list[Prompt], sampling: SamplingSpec, session: Any = None) -> list[Generation]:
        """Free generation for every prompt, one completion each (in `session`, an open `prefix_session`)."""
        ...

    def generate_choice(
        self, prompts: list[Prompt], choices: list[list[str]], sampling: SamplingSpec, session: Any = None
    ) -> list[Generation]:
        """Constrained decode: completion i is exactly one of `choices[i]` followed by end-of-turn (in
        `session`, as `generate`)."""
        ...

    def score_choices(self, prompts: list[Prompt], choices: list[list[str]]) -> list[list[float]]:
        """Exact probabilities of each choice as the continuation of prompt i (teacher-forced
        log-likelihood of the choice tokens plus end-of-turn, normalised over the choices)."""
        ...
