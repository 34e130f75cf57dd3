"""Chat rendering for multi-round games: prompts, template-consistent environment turns, end-of-turn.

A game episode is one growing conversation: system rules, then alternating user observations and the
model's turns. The rollout keeps it as token ids (so training sees exactly what was sampled) and uses this
module to render the pieces with the model's own chat template: the first prompt, and each later user turn
as the ids the template would put after the previous assistant turn's end-of-turn token.
"""

from __future__ import annotations

from typing import Any

from envs.parsing import strip_thinking as _strip_closed_thinking

Message = dict[str, str]

# A probe conversation used to locate template features (end-of-turn token, system-role support).
_MARK = "Zq"
# env_turn_ids: how many calls compare the fast suffix tokenisation with the whole-conversation one.
SUFFIX_CHECKS = 16


class ChatTemplateError(ValueError):
    """The tokenizer cannot render chats (no template) or its template does not fit the game loop."""


class ChatRenderer:
    """Render game conversations with a tokenizer's chat template.

    chat_template: overrides the tokenizer's template (a Jinja string).
    enable_thinking: passed to every render; templates that know it (Qwen 3.5, Gemma 4) switch reasoning
        on or off, others ignore it. Off by default: action turns are short.
    """

    def __init__(self, tokenizer: Any, chat_template: str | None = None, enable_thinking: bool = False):
        self.tokenizer = tokenizer
        self.chat_template = chat_template or getattr(tokenizer, "chat_template", None)
        if not self.chat_template:
            raise ChatTemplateError(
                f"tokenizer {getattr(tokenizer, 'name_or_path', type(tokenizer).__name__)!r} has no chat "
                "template; pass chat_template=<jinja string> (e.g. the ChatML template)"
            )
        self.enable_thinking = enable_thinking
        self.merge_system = not self._accepts_system_role()
        self.end_of_turn_id = self._find_end_of_turn()
        self._end_of_turn_text = tokenizer.decode([self.end_of_turn_id], skip_special_tokens=False)
        self._suffix_checks_left = SUFFIX_CHECKS
        if not self.is_prefix_preserving():
            self._use_training_template()

    # --- rendering -------------------------------------------------------------------------------
    def _apply(self, messages: list[Message], *, add_generation_prompt: bool, tokenize: bool) -> Any:
        return self.tokenizer.apply_chat_template(
            self.normalize(messages),
            chat_template=self.chat_template,
            add_generation_prompt=add_generation_prompt,
            tokenize=tokenize,
            return_dict=False,
            enable_thinking=self.enable_thinking,
        )

    def normalize(self, messages: list[Message]) -> list[Message]:
        """Merge a leading system message into the first user message when the template has no system role."""
        if not (self.merge_system and messages and messages[0]["role"] == "system"):
            return [dict(m) for m in messages]
        system, rest = messages[0]["content"], [dict(m) for m in messages[1:]]
        if rest and rest[0]["role"] == "user":
            rest[0]["content"] = f"{system}\n\n{rest[0]['content']}"
        else:
            rest.insert(0, {"role": "user", "content": system})
        return rest

    def render(self, messages: list[Message], add_generation_prompt: bool = False) -> str:
        """The conversation as template text."""
        return self._apply(messages, add_generation_prompt=add_generation_prompt, tokenize=False)

    def prompt_ids(self, messages: list[Message]) -> list[int]:
        """Token ids of `messages` followed by the assistant generation prompt."""
        return list(self._apply(messages, add_generation_prompt=True, tokenize=True))

    def env_turn_ids(self, prev_messages: list[Message], env_message: Message | str) -> list[int]:
        """Ids the template puts after the end-of-turn token of the last assistant turn in `prev_messages`:
        the rest of that turn's closing, the environment (user) turn, and the next generation prompt.

        Computed like TRL's `_get_tool_suffix_ids`: render with and without the new message, cut the longer
        render after the shorter one's last end-of-turn, and keep what follows. Cutting after the n-th
        end-of-turn rather than comparing prefixes keeps templates that re-render history (Gemma drops old
        thought channels) right. Only the text from that end-of-turn on is tokenised (the whole conversation
        would cost O(length) per round); the first `SUFFIX_CHECKS` calls also tokenise everything and, on any
        difference, switch this renderer to whole-conversation tokenisation for good.
        """
        if isinstance(env_message, str):
            env_message = {"role": "user", "content": env_message}
        if not prev_messages or prev_messages[-1]["role"] != "assistant":
            raise ChatTemplateError("env_turn_ids needs a conversation that ends with an assistant turn")
        prefix = self._apply(prev_messages, add_generation_prompt=False, tokenize=False)
        full = self._apply([*prev_messages, env_message], add_generation_prompt=True, tokenize=False)
        fast = self._suffix_from_text(prefix, full) if self._suffix_checks_left >= 0 else None
        if fast is not None and self._suffix_checks_left == 0:
            return fast
        slow = self._suffix_from_ids(prefix, full)
        if fast == slow:
            self._suffix_checks_left -= 1
        else:
            self._suffix_checks_left = -1  # this tokenizer's suffix is context-dependent: always tokenise all
        return slow

    def _tokens(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))  # = apply_chat_template(tokenize=True)

    def _suffix_from_ids(self, prefix: str, full: str) -> list[int]:
        n_turns = self._tokens(prefix).count(self.end_of_turn_id)
        full_ids = self._tokens(full)
        ends = [i for i, t in enumerate(full_ids) if t == self.end_of_turn_id]
        if n_turns == 0 or len(ends) < n_turns:
            raise ChatTemplateError("the rendered assistant turn contains no end-of-turn token")
        return full_ids[ends[n_turns - 1] + 1 :]

    def _suffix_from_text(self, prefix: str, full: str) -> list[int] | None:
        """The same suffix from the text after the n-th end-of-turn marker (None if it cannot be located)."""
        n_turns, at = prefix.count(self._end_of_turn_text), -1
        for _ in range(n_turns):
            at = full.find(self._end_of_turn_text, at + 1)
            if at < 0:
                return None
        ids = self._tokens(full[at:]) if n_turns else []
        return ids[1:] if ids and ids[0] == self.end_of_turn_id else None

    def assistant_prefill(self, messages: list[Message]) -> str:
        """Text the generation prompt adds inside the assistant turn (e.g. Qwen's empty `<think>` block with
        thinking off), so a recorded turn can be re-rendered exactly as the model saw it."""
        with_prompt = self._apply(messages, add_generation_prompt=True, tokenize=True)
        closed = self._apply(
            [*messages, {"role": "assistant", "content": ""}], add_generation_prompt=False, tokenize=True
        )
        n = 0
        while n < min(len(with_prompt), len(closed)) and with_prompt[n] == closed[n]:
            n += 1
        return self.tokenizer.decode(with_prompt[n:], skip_special_tokens=False)

    # --- text of a model turn ----------------------------------------------------------------------
    def decode_turn(self, token_ids: list[int]) -> str:
        """Text of an assistant turn's tokens without its closing end-of-turn token, special tokens kept
        (thinking markers such as `<think>` may be special tokens and must survive for stripping)."""
        if token_ids and token_ids[-1] == self.end_of_turn_id:
            token_ids = token_ids[:-1]
        return self.tokenizer.decode(token_ids, skip_special_tokens=False)

    def strip_thinking(self, text: str) -> str:
        """The answer part of a turn: closed Qwen `<think>` blocks and Gemma thought channels removed; an
        unclosed block means no answer was given (empty string)."""
        stripped = _strip_closed_thinking(text)
        return "" if stripped is None else stripped

    # --- template probes ---
    def is_prefix_preserving(self) -> bool:
        """Whether a recorded assistant turn renders the same once a user turn follows it (Qwen 3.5's stock
        template drops the `<think>` block of earlier turns, so a rollout's tokens would not match it)."""
        base = [{"role": "system", "content": "s"}, {"role": "user", "content": "u1"}]
        history = [*base, {"role": "assistant", "content": self.assistant_prefill(base) + "a1"}]
        prefix = list(self._apply(history, add_generation_prompt=False, tokenize=True))
        prefix = prefix[: len(prefix) - prefix[::-1].index(self.end_of_turn_id)]
        full = list(
            self._apply(
                [*history, {"role": "user", "content": "u2"}], add_generation_prompt=True, tokenize=True
            )
        )
        return full[: len(prefix)] == prefix

    def _use_training_template(self) -> None:
        """Switch to TRL's prefix-preserving training variant of the template, which renders the turns the
        model actually produced (think blocks included) so multi-round trajectories are consistent."""
        from trl.chat_template_utils import get_training_chat_template

        original = self.tokenizer.chat_template
        try:
            self.tokenizer.chat_template = self.chat_template
            patched = get_training_chat_template(self.tokenizer)
        except ValueError:
            patched = None
        finally:
            self.tokenizer.chat_template = original
        if patched:
            self.chat_template = patched
        if not patched or not self.is_prefix_preserving():
            raise ChatTemplateError(
                "the chat template re-renders earlier assistant turns differently once a user turn follows, "
                "and TRL has no prefix-preserving training variant for it; pass a prefix-preserving "
                "chat_template"
            )

    def _accepts_system_role(self) -> bool:
        try:
            text = self.tokenizer.apply_chat_template(
                [{"role": "system", "content": _MARK + "s"}, {"role": "user", "content": "u"}],
                chat_template=self.chat_template,
                tokenize=False,
                enable_thinking=self.enable_thinking,
            )
        except Exception:  # noqa: BLE001 - templates reject the role by raising from Jinja
            return False
        return _MARK + "s" in text

    def _find_end_of_turn(self) -> int:
        """The first special token the template writes after an assistant message's content."""
        text = self.render([{"role": "user", "content": "u"}, {"role": "assistant", "content": _MARK}])
        tail = text[text.rindex(_MARK) + len(_MARK) :]
        special = set(self.tokenizer.all_special_ids) | set(
            getattr(self.tokenizer, "added_tokens_decoder", {})
        )
        for t in self.tokenizer.encode(tail, add_special_tokens=False):
            if t in special:
                return int(t)
        if self.tokenizer.eos_token_id is None:
            raise ChatTemplateError(
                "cannot find the end-of-turn token: the template closes turns without a special token "
                "and the tokenizer has no eos_token"
            )
        return int(self.tokenizer.eos_token_id)
