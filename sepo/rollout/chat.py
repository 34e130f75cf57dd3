"""Chat rendering for multi-round games: prompts, template-consistent environment turns, end-of-turn.

A game episode is one growing conversation: system rules, then alternating user observations and the
model's turns. The rollout keeps it as token ids (so training sees exactly what was sampled) and uses this
module to render the pieces with the model's own chat template: the first prompt, and each later user turn
as the ids the template would put after the previous assistant turn's end-of-turn token.

The rollout asks for the new ids of all its episodes at once (`new_turns`). Rendering the whole
conversation with Jinja and tokenising it every turn would cost O(length) per turn per episode, so the
renderer finds once, from probe conversations, the constant text the template writes around message
contents (`TemplateGlue`), builds each new turn's text from it, and tokenises all new texts in one batched
call that reuses the ids of lines seen before (`sepo.rollout.tokens`). The first `TURN_CHECKS` turns of
each kind (first prompts, environment turns) are also computed the straightforward way (whole conversation
rendered and tokenised, cut after the last end-of-turn); on any difference the renderer switches to the
straightforward way for good.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from envs.parsing import strip_thinking as _strip_closed_thinking
from sepo.generation import ChatTemplateError, template_end_of_turn
from sepo.rollout.fallback import cue_ids
from sepo.rollout.tokens import PieceTokenizer

Message = dict[str, str]
Lap = Callable[[str], None]

# A probe conversation used to locate template features (end-of-turn token, system-role support).
_MARK = "Zq"
# new_turns: how many turns of each kind are also computed from the whole conversation and compared.
TURN_CHECKS = 16
# Probe conversations for TemplateGlue: system, then (user, assistant) rounds, then the new user content. Their
# contents have no edge whitespace (templates may trim it; such contents take the straightforward path) and
# contain line breaks, punctuation and brackets, like game text.
_GLUE_PROBES = (
    ("Zq rules:\n- one.", ["Zq round 1?\nscores 0"], ["Zq reply\nDEFECT"], "Zq round 2:\n[1, 2]"),
    ("Qz rules 1 < 2\n\nsecond", ["Qz a\n  b", "Qz c"], ["Qz d", "Qz e\n- f"], "Qz g.\n\nh?"),
)
_CLEANUP_PROBE = "a . b , c ? d ! e n't f 'm g"  # text that tokenizer clean-up would change


def no_lap(phase: str) -> None:
    """The default `lap`: no timing."""


@dataclass(frozen=True)
class NewTurn:
    """What the template adds for a new user turn (`ChatRenderer.new_turns`): its token ids, and for a first
    turn the text the generation prompt puts inside the assistant turn (None after an assistant turn)."""

    ids: list[int]
    prefill: str | None


@dataclass(frozen=True)
class TemplateGlue:
    """The text a chat template writes around message contents (found by rendering probe conversations).

    first: for [system, user] plus the generation prompt: the text before the system content, between the two
        contents, and after the user content.
    env: for a user turn after an assistant turn: the text from the assistant's end-of-turn token (exclusive)
        to the user content, and after it (generation prompt included).
    prefill: `ChatRenderer.assistant_prefill` of a first prompt.
    """

    first: tuple[str, str, str]
    env: tuple[str, str]
    prefill: str

    def first_text(self, system: str, user: str) -> str:
        return f"{self.first[0]}{system}{self.first[1]}{user}{self.first[2]}"

    def env_text(self, user: str) -> str:
        return f"{self.env[0]}{user}{self.env[1]}"


def _cut(text: str | None, contents: Sequence[str]) -> tuple[str, ...] | None:
    """`text` split around `contents`, which must each occur in it exactly once and in order; else None."""
    if text is None:
        return None
    out, at = [], 0
    for content in contents:
        found = text.find(content, at)
        if found < 0 or text.count(content) != 1:
            return None
        out.append(text[at:found])
        at = found + len(content)
    return (*out, text[at:])


def _verbatim(content: str) -> bool:
    """Whether a content can be placed into TemplateGlue as is (templates may trim edge whitespace)."""
    return bool(content) and content == content.strip()


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
        if not self.is_prefix_preserving():
            self._use_training_template()
        self.pieces = PieceTokenizer(tokenizer)
        self.glue = self._find_glue()
        self._checks_left = {"first": TURN_CHECKS, "env": TURN_CHECKS}  # per kind of turn
        self.straightforward = False  # set for good when a check fails: every turn then takes that path
        self._backend_decodes_exactly = self._backend_decode_matches()
        self.cue_ids = cue_ids(tokenizer)  # the constrained fallback's cue, tokenised once

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

    # --- new turns -------------------------------------------------------------------------------
    def new_turns(self, conversations: Sequence[list[Message]], lap: Lap = no_lap) -> list[NewTurn]:
        """For each conversation ending with a new user message, the ids the template adds for it: the whole
        prompt for a first turn ([system,] user), else `env_turn_ids` of the conversation before it; and for a
        first turn the assistant prefill (`assistant_prefill`: a recorded turn re-renders as the model saw it).

        One batched tokenizer call for all conversations. `lap` is called with "rendering" and "tokenisation"
        after each phase (benchmark timing)."""
        texts = [self._turn_text(conv) for conv in conversations]
        lap("rendering")
        encoded = self.pieces.encode([text for text, _ in texts])
        out: list[list[int] | None] = []
        for ids, (_, continues) in zip(encoded, texts):
            if not continues:
                out.append(ids)
            else:  # the text starts with the previous turn's end-of-turn token, which is already recorded
                out.append(ids[1:] if ids and ids[0] == self.end_of_turn_id else None)
        lap("tokenisation")
        if not self.straightforward and any(self._checks_left.values()):
            self._check(conversations, out)
        result = [NewTurn(ids=ids if ids is not None and not self.straightforward else self._reference_ids(conv),
                          prefill=self._prefill(conv) if self._kind(conv) == "first" else None)
                  for ids, conv in zip(out, conversations)]
        lap("rendering")
        return result

    def env_turn_ids(self, prev_messages: list[Message], env_message: Message | str) -> list[int]:
        """Ids the template puts after the end-of-turn token of the last assistant turn in `prev_messages`:
        the rest of that turn's closing, the environment (user) turn, and the next generation prompt.

        Defined like TRL's `_get_tool_suffix_ids`: render with and without the new message, cut the longer
        render after the shorter one's last end-of-turn, and keep what follows (`_reference_ids`). Cutting
        after the n-th end-of-turn rather than comparing prefixes keeps templates that re-render history
        (Gemma drops old thought channels) right. Computed by `new_turns`.
        """
        if isinstance(env_message, str):
            env_message = {"role": "user", "content": env_message}
        if not prev_messages or prev_messages[-1]["role"] != "assistant":
            raise ChatTemplateError("env_turn_ids needs a conversation that ends with an assistant turn")
        return self.new_turns([[*prev_messages, env_message]])[0].ids

    def _prefill(self, first_messages: list[Message]) -> str:
        """`assistant_prefill(first_messages)`, from the template glue while its checks hold."""
        if self.glue is not None and not self.straightforward:
            return self.glue.prefill
        return self.assistant_prefill(first_messages)

    def _kind(self, conv: Sequence[Message]) -> str:
        if not conv or conv[-1]["role"] != "user":
            raise ChatTemplateError("a new turn is a user message at the end of the conversation")
        if len(conv) >= 2 and conv[-2]["role"] == "assistant":
            return "env"
        if [m["role"] for m in conv] in (["user"], ["system", "user"]):
            return "first"
        raise ChatTemplateError(
            "a new user turn follows an assistant turn, or opens the conversation ([system,] user); got roles "
            f"{[m['role'] for m in conv]}"
        )

    def _turn_text(self, conv: list[Message]) -> tuple[str, bool]:
        """The template text of conv's new user turn, and whether it continues after an assistant turn (then
        it starts with that turn's end-of-turn token: tokenised in context, that token is dropped)."""
        glue, kind = self.glue, self._kind(conv)
        if kind == "first":
            if glue is not None and len(conv) == 2 and _verbatim(conv[0]["content"]) and _verbatim(conv[1]["content"]):
                return glue.first_text(conv[0]["content"], conv[1]["content"]), False
            return self.render(conv, add_generation_prompt=True), False
        if glue is not None and _verbatim(conv[-1]["content"]):
            return self._end_of_turn_text + glue.env_text(conv[-1]["content"]), True
        after = self._after_last_turn(conv[:-1], conv[-1])
        return ("" if after is None else self._end_of_turn_text + after), True

    def _after_last_turn(self, prev: list[Message], message: Message) -> str | None:
        """Template text after the end-of-turn token of prev's last turn once `message` follows (with the
        generation prompt); None when that token's text cannot be located in the render."""
        prefix = self.render(prev)
        full = self.render([*prev, message], add_generation_prompt=True)
        n_turns, at = prefix.count(self._end_of_turn_text), -1
        for _ in range(n_turns):
            at = full.find(self._end_of_turn_text, at + 1)
            if at < 0:
                return None
        return full[at + len(self._end_of_turn_text) :] if n_turns else None

    def _reference_ids(self, conv: list[Message]) -> list[int]:
        """conv's new turn the straightforward way: the whole conversation rendered and tokenised."""
        if self._kind(conv) == "first":
            return self.prompt_ids(conv)
        prefix_ids = self._apply(conv[:-1], add_generation_prompt=False, tokenize=True)
        n_turns = list(prefix_ids).count(self.end_of_turn_id)
        full_ids = list(self._apply(conv, add_generation_prompt=True, tokenize=True))
        ends = [i for i, t in enumerate(full_ids) if t == self.end_of_turn_id]
        if n_turns == 0 or len(ends) < n_turns:
            raise ChatTemplateError("the rendered assistant turn contains no end-of-turn token")
        return full_ids[ends[n_turns - 1] + 1 :]

    def _check(self, conversations: Sequence[list[Message]], ids: list[list[int] | None]) -> None:
        """Compare the first TURN_CHECKS turns of each kind (first prompt, env turn) with `_reference_ids`
        (and the glue's prefill with `assistant_prefill`); any difference makes this renderer take the
        straightforward path for good."""
        for conv, got in zip(conversations, ids):
            kind = self._kind(conv)
            if not self._checks_left[kind]:
                continue
            same = got == self._reference_ids(conv)
            if same and self.glue is not None and kind == "first":
                same = self.glue.prefill == self.assistant_prefill(conv)
            if not same:
                self.straightforward = True
                return
            self._checks_left[kind] -= 1

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

    def _find_glue(self) -> TemplateGlue | None:
        """The template's glue, if it places every probe content verbatim between the same constant texts."""
        glue = None
        for system, users, replies, new in _GLUE_PROBES:
            first = [{"role": "system", "content": system}, {"role": "user", "content": users[0]}]
            prefill = self.assistant_prefill(first)
            conv = first[:1]
            for user, reply in zip(users, replies):
                conv += [{"role": "user", "content": user}, {"role": "assistant", "content": prefill + reply}]
            first_cut = _cut(self.render(first, add_generation_prompt=True), [system, users[0]])
            env_cut = _cut(self._after_last_turn(conv, {"role": "user", "content": new}), [new])
            if first_cut is None or env_cut is None:
                return None
            found = TemplateGlue(first=first_cut, env=env_cut, prefill=prefill)
            if glue is not None and found != glue:
                return None
            glue = found
        return glue

    # --- text of a model turn ----------------------------------------------------------------------
    def decode_turn(self, token_ids: list[int]) -> str:
        """Text of an assistant turn's tokens without its closing end-of-turn token, special tokens kept
        (thinking markers such as `<think>` may be special tokens and must survive for stripping)."""
        if token_ids and token_ids[-1] == self.end_of_turn_id:
            token_ids = token_ids[:-1]
        return self.tokenizer.decode(token_ids, skip_special_tokens=False)

    def decode_turns(self, turns: Sequence[list[int]]) -> list[str]:
        """`decode_turn` of every turn, in one tokenizer call where that gives the same text."""
        if not self._backend_decodes_exactly:
            return [self.decode_turn(ids) for ids in turns]
        eot = self.end_of_turn_id
        trimmed = [ids[:-1] if ids and ids[-1] == eot else ids for ids in turns]
        return self.tokenizer.backend_tokenizer.decode_batch(trimmed, skip_special_tokens=False)

    def _backend_decode_matches(self) -> bool:
        """Whether the Rust tokenizer's decode is the tokenizer's decode (no clean-up of spaces applied)."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None:
            return False
        ids = self.tokenizer.encode(_CLEANUP_PROBE, add_special_tokens=False)
        return backend.decode(ids, skip_special_tokens=False) == self.decode_turn(ids) == _CLEANUP_PROBE

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
        # deferred: trl (with peft, accelerate and datasets) takes seconds to import and this module is loaded by
        # `sepo eval` and fmsp too; only a template that is not prefix-preserving (e.g. a thinking template)
        # needs TRL's variant, ChatML ones (the embedded model, the tiny Llama) never import it
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
        """The first special token the template writes after an assistant message's content
        (`sepo.generation.template_end_of_turn`, which a backend loaded by name asks too)."""
        return template_end_of_turn(self.tokenizer, self.chat_template, self.enable_thinking)
