"""Foundation-model clients behind one interface: `complete(messages, **kw) -> Completion(text, usage)`.

- `OpenAIChatFM`: any OpenAI-compatible chat endpoint (OpenAI, `vllm serve`) through the official SDK, whose own
  retries (exponential backoff, the server's `Retry-After` honoured) cover transient errors; timeouts, and token /
  cost accounting.
- `LocalTransformersFM`: a local transformers chat model (the embedded `default`, or e.g. Qwen2.5-Coder on a GPU).
- `ScriptedFM`: a TEST DOUBLE, not a model. It replays hand-written policy code (from a list or a directory)
  and scripted judge answers, so the whole pipeline (and the CLI) can run where no strong code-writing FM is
  available. Its outputs say nothing about what a real FM would do.

Callers pass `purpose` ("generate", "repair", "judge") and `side` as keyword metadata; real clients ignore them.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sepo.backends.openai_api import Usage, connect
from sepo.generation import Prompt, SamplingSpec

Messages = list[dict[str, str]]


class FMError(RuntimeError):
    """The FM call failed for good (non-transient error, or retries exhausted)."""


@dataclass(frozen=True)
class Completion:
    text: str
    usage: Usage


class FoundationModel(Protocol):
    """What the search loops need from an FM. `usage` holds the running totals."""

    name: str
    usage: Usage

    def complete(self, messages: Messages, **kw: Any) -> Completion: ...


_META_KEYS = ("purpose", "side")


def _sampling(kw: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if k not in _META_KEYS}


@dataclass
class OpenAIChatFM:
    """Chat completions from an OpenAI-compatible server; `api_key`/`base_url` default to OPENAI_API_KEY/_BASE_URL."""

    model: str
    base_url: str | None = None
    api_key: str | None = None
    temperature: float = 0.8
    max_tokens: int = 2048
    timeout_s: float = 120.0
    max_retries: int = 4  # the openai SDK's retries of a transient error
    price_prompt_per_1k: float = 0.0
    price_completion_per_1k: float = 0.0
    usage: Usage = field(default_factory=Usage)

    def __post_init__(self) -> None:
        try:  # the SDK retries transient errors itself, with backoff and the server's Retry-After
            self._client = connect(self.base_url, self.api_key, self.timeout_s, max_retries=self.max_retries,
                                   no_endpoint="OpenAIChatFM needs an API key: set api_key in the config or OPENAI_API_KEY")
        except ValueError as exc:
            raise FMError(str(exc)) from None
        # deferred: openai takes ~0.4 s to import and only endpoint clients need it; `connect` has just loaded it
        import openai

        self.name = self.model
        self._openai = openai
        self.endpoint = str(self._client.base_url)

    def _transient(self, exc: Exception) -> bool:
        """Errors the SDK retries (connection, timeout, 429, 5xx): it has spent `max_retries` on them."""
        o = self._openai
        return isinstance(exc, o.APITimeoutError | o.APIConnectionError | o.RateLimitError | o.InternalServerError)

    def complete(self, messages: Messages, **kw: Any) -> Completion:
        params = {"temperature": self.temperature, "max_tokens": self.max_tokens, **_sampling(kw)}
        try:
            raw = self._client.chat.completions.with_raw_response.create(model=self.model, messages=messages,
                                                                          **params)
        except Exception as exc:
            retries = self.max_retries if self._transient(exc) else 0
            self.usage.retries += retries
            raise FMError(f"{type(exc).__name__} from {self.endpoint} (model {self.model!r}) after "
                          f"{retries} retries: {exc}") from exc  # fmt: skip
        response, retries = raw.parse(), raw.retries_taken
        text = response.choices[0].message.content or ""
        tokens = response.usage
        usage = Usage(
            prompt_tokens=tokens.prompt_tokens if tokens else 0,
            completion_tokens=tokens.completion_tokens if tokens else 0,
            calls=1,
            retries=retries,
        )
        usage.cost_usd = (usage.prompt_tokens * self.price_prompt_per_1k
                          + usage.completion_tokens * self.price_completion_per_1k) / 1000  # fmt: skip
        self.usage += usage
        return Completion(text=text, usage=usage)


def resolve_device_dtype(device: str | None, dtype: str | None) -> tuple[str, str]:
    """`device` None -> "cuda" when available, else "cpu" (`sepo.backends.hf.resolve_device`); `dtype` None ->
    "bfloat16" on cuda, "float32" on cpu, a name checked by `sepo.backends.hf.resolve_dtype`."""
    # deferred: sepo.backends.hf imports torch and transformers
    from sepo.backends.hf import resolve_device, resolve_dtype

    device = str(resolve_device(device))
    if dtype is None:
        dtype = "bfloat16" if device.startswith("cuda") else "float32"
    resolve_dtype(dtype)
    return device, dtype


@dataclass
class LocalTransformersFM:
    """A local transformers chat model through `sepo.backends.hf.HFBackend` (the rollout engine's backend);
    `model` is a hub id, a checkpoint dir, or a `sepo.config.models` name such as `default`. `device`/`dtype`: see
    `resolve_device_dtype`. Call k samples with seed (seed, k), so a resumed run continues the same stream."""

    model: str = "default"
    temperature: float = 0.8
    max_tokens: int = 512
    device: str | None = None
    dtype: str | None = None
    seed: int = 0
    usage: Usage = field(default_factory=Usage)

    def __post_init__(self) -> None:
        # deferred: sepo.backends.hf imports torch and transformers
        from sepo.backends.hf import HFBackend
        from sepo.rollout.chat import ChatRenderer

        self.device, self.dtype = resolve_device_dtype(self.device, self.dtype)
        self.name = self.model
        self._backend = HFBackend.from_model(self.model, dtype=self.dtype, device=self.device)
        self._renderer = ChatRenderer(self._backend.tokenizer)

    def get_state(self) -> dict[str, Any]:
        return {"usage": asdict(self.usage)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.usage = Usage(**state["usage"])

    def complete(self, messages: Messages, **kw: Any) -> Completion:
        params = _sampling(kw)
        temperature = params.get("temperature", self.temperature)
        call_seed = random.Random(f"{self.seed}:{self.usage.calls}").getrandbits(31)
        spec = SamplingSpec(temperature=temperature if temperature > 0 else 1.0, top_p=1.0, top_k=0,
                            max_new_tokens=params.get("max_tokens", self.max_tokens), greedy=temperature <= 0,
                            seed=call_seed)  # fmt: skip
        ids = self._renderer.prompt_ids(messages)
        (generation,) = self._backend.generate([Prompt(ids=ids, messages=messages)], spec)
        usage = Usage(prompt_tokens=len(ids), completion_tokens=len(generation.token_ids), calls=1)
        self.usage += usage
        return Completion(text=generation.text, usage=usage)


@dataclass(frozen=True)
class ScriptedPolicy:
    name: str
    description: str
    code: str


class ScriptedFM:
    """TEST DOUBLE (not a model): replays hand-written policy code and scripted judge answers, cycling.

    Generation/repair requests (`purpose` "generate"/"repair") get the next policy for `side` (or the shared
    list), formatted the way the prompts ask a real FM to answer; `purpose="judge"` gets the next judge answer.
    """

    def __init__(self, policies: list[str] | dict[str, list[str]], judge_answers: list[str],
                 name: str = "scripted-test-double") -> None:  # fmt: skip
        by_side = policies if isinstance(policies, dict) else {"*": policies}
        if not any(by_side.values()) or not judge_answers:
            raise ValueError("ScriptedFM needs at least one policy and one judge answer")
        self.name = name
        self.usage = Usage()
        self._policies = {side: [_scripted(code, i) for i, code in enumerate(codes)]
                          for side, codes in by_side.items() if codes}  # fmt: skip
        self._judge = list(judge_answers)
        self._position: dict[str, int] = {}  # replay position per stream: resumable via get_state/set_state

    def _next(self, stream: str, items: list[Any]) -> Any:
        index = self._position.get(stream, 0)
        self._position[stream] = index + 1
        return items[index % len(items)]

    def get_state(self) -> dict[str, Any]:
        return {"position": dict(self._position), "usage": asdict(self.usage)}

    def set_state(self, state: dict[str, Any]) -> None:
        self._position = dict(state["position"])
        self.usage = Usage(**state["usage"])

    @classmethod
    def from_path(cls, path: str | Path, judge_answers: list[str]) -> ScriptedFM:
        """Policies from `path/*.py` (shared) or `path/<side>/*.py` (per side), in sorted file order."""
        root = Path(path)
        if not root.is_dir():
            raise FileNotFoundError(f"scripted policy directory {root} does not exist")
        shared = [p.read_text() for p in sorted(root.glob("*.py"))]
        per_side = {d.name: [p.read_text() for p in sorted(d.glob("*.py"))] for d in sorted(root.iterdir())
                    if d.is_dir() and any(d.glob("*.py"))}  # fmt: skip
        if per_side and shared:
            per_side["*"] = shared
        return cls(per_side or shared, judge_answers)

    def complete(self, messages: Messages, **kw: Any) -> Completion:
        self.usage.calls += 1
        if kw.get("purpose") == "judge":
            return Completion(text=self._next("judge", self._judge), usage=Usage(calls=1))
        side = kw.get("side")
        stream = side if side in self._policies else "*"
        if stream not in self._policies:
            raise FMError(f"ScriptedFM has no policies for side {side!r} (has {sorted(self._policies)})")
        policy = self._next(stream, self._policies[stream])
        text = f"NAME: {policy.name}\nDESCRIPTION: {policy.description}\n```python\n{policy.code}```\n"
        return Completion(text=text, usage=Usage(calls=1))


def _scripted(code: str, index: int) -> ScriptedPolicy:
    """Name and description from the code's leading docstring/comment, when it has one."""
    first = code.strip().splitlines()[0].strip('"# ') if code.strip() else ""
    return ScriptedPolicy(name=f"scripted-{index}", description=first or f"scripted policy {index}", code=code)


FM_PROVIDERS = ("openai", "local_transformers", "scripted_test_double")


def make_fm(provider: str, **cfg: Any) -> FoundationModel:
    """Build an FM client by provider name (see FM_PROVIDERS); `cfg` are the client's fields."""
    if provider == "openai":
        return OpenAIChatFM(**cfg)
    if provider == "local_transformers":
        return LocalTransformersFM(**cfg)
    if provider == "scripted_test_double":
        return ScriptedFM.from_path(cfg["policies_path"], cfg.get("judge_answers") or ["Decision: Yes"])
    raise ValueError(f"unknown fm_provider {provider!r}; valid: {', '.join(FM_PROVIDERS)}")
