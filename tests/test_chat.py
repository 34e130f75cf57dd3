"""ChatRenderer: template-consistent env turns (prefix property), thinking switches, end-of-turn, system merge."""

from __future__ import annotations

import pytest

from sepo.rollout.chat import ChatRenderer, ChatTemplateError
from sepo.tiny_models import ARCHS, build_tokenizer

SYSTEM = "You are playing a repeated game."
OBSERVATIONS = [
    "Round 1 of 3. What is your action?",
    "Round 2 of 3. You DEFECT.",
    "Round 3 of 3. Final round.",
]
REPLIES = ["I cooperate first.\nCOOPERATE", "They cooperated.\nDEFECT", "Last round.\nDEFECT"]


def _play_conversation(renderer: ChatRenderer) -> tuple[list[int], list[dict[str, str]]]:
    """Build a 3-round conversation the way the rollout does: prompt, model turns + end-of-turn, env turns."""
    tok = renderer.tokenizer
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": OBSERVATIONS[0]}]
    ids = renderer.prompt_ids(messages)
    for k, reply in enumerate(REPLIES):
        ids += tok.encode(reply, add_special_tokens=False) + [renderer.end_of_turn_id]
        messages.append({"role": "assistant", "content": reply})
        if k + 1 < len(OBSERVATIONS):
            env = renderer.env_turn_ids(messages, OBSERVATIONS[k + 1])
            full = tok.apply_chat_template(
                renderer.normalize([*messages, {"role": "user", "content": OBSERVATIONS[k + 1]}]),
                chat_template=renderer.chat_template,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
                enable_thinking=False,
            )
            assert list(full[-len(env) :]) == env  # exactly the template's own tokens for the new turn
            ids += env
            messages.append({"role": "user", "content": OBSERVATIONS[k + 1]})
    return ids, messages


def _assert_prefix_property(renderer: ChatRenderer) -> None:
    ids, messages = _play_conversation(renderer)
    tok = renderer.tokenizer
    rendered = renderer.render(messages)
    eot = tok.convert_ids_to_tokens(renderer.end_of_turn_id)
    assert ids[-1] == renderer.end_of_turn_id
    assert tok.decode(ids) == rendered[: rendered.rindex(eot) + len(eot)]
    for obs in OBSERVATIONS:
        assert obs in tok.decode(ids)


@pytest.mark.parametrize("arch", ARCHS)
def test_env_turns_reproduce_the_whole_conversation(arch):
    _assert_prefix_property(ChatRenderer(build_tokenizer(arch)))


@pytest.mark.slow
def test_env_turns_reproduce_the_whole_conversation_smollm2():
    from transformers import AutoTokenizer

    from sepo.config.models import resolve_model

    renderer = ChatRenderer(AutoTokenizer.from_pretrained(resolve_model("default")))
    assert renderer.tokenizer.convert_ids_to_tokens(renderer.end_of_turn_id) == "<|im_end|>"
    _assert_prefix_property(renderer)


@pytest.mark.parametrize(
    ("arch", "eot"), [("llama", "<|im_end|>"), ("qwen3_5", "<|im_end|>"), ("gemma4", "<turn|>")]
)
def test_end_of_turn_token(arch, eot):
    renderer = ChatRenderer(build_tokenizer(arch))
    assert renderer.tokenizer.convert_ids_to_tokens(renderer.end_of_turn_id) == eot


def test_qwen35_thinking_switch_and_training_template():
    tok = build_tokenizer("qwen3_5")
    msgs = [{"role": "user", "content": "Round 1"}]
    off = ChatRenderer(tok)
    assert tok.decode(off.prompt_ids(msgs)).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    on = ChatRenderer(tok, enable_thinking=True)
    assert tok.decode(on.prompt_ids(msgs)).endswith("<|im_start|>assistant\n<think>\n")
    # The stock Qwen 3.5 template drops earlier turns' think blocks; the renderer switched to TRL's
    # prefix-preserving training variant, which keeps them.
    assert off.chat_template != tok.chat_template and off.is_prefix_preserving()


def test_gemma4_thought_channel_off_by_default():
    tok = build_tokenizer("gemma4")
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Round 1"}]
    assert "<|think|>" not in tok.decode(ChatRenderer(tok).prompt_ids(msgs))
    assert "<|think|>" in tok.decode(ChatRenderer(tok, enable_thinking=True).prompt_ids(msgs))


def test_strip_thinking():
    renderer = ChatRenderer(build_tokenizer("llama"))
    assert renderer.strip_thinking("<think>\nNo defection here\n</think>\n\nCOOPERATE").strip() == "COOPERATE"
    assert renderer.strip_thinking("<|channel>thought\nDEFECT?<channel|>COOPERATE") == "COOPERATE"
    assert renderer.strip_thinking("<think>still thinking DEFECT") == ""


def test_missing_template_is_a_clear_error():
    tok = build_tokenizer("llama")
    tok.chat_template = None
    with pytest.raises(ChatTemplateError, match="no chat template"):
        ChatRenderer(tok)
    assert ChatRenderer(tok, chat_template=build_tokenizer("llama").chat_template).end_of_turn_id is not None


def test_system_merged_when_template_rejects_it():
    tok = build_tokenizer("gemma4")
    no_system = (
        "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}"
        "<|turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n{{ m['content'] }}<turn|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|turn>model\n{% endif %}"
    )
    renderer = ChatRenderer(tok, chat_template=no_system)
    assert renderer.merge_system
    text = tok.decode(
        renderer.prompt_ids([{"role": "system", "content": SYSTEM}, {"role": "user", "content": "R1"}])
    )
    assert f"<|turn>user\n{SYSTEM}\n\nR1<turn|>" in text
    _assert_prefix_property(renderer)


def test_env_turn_needs_an_assistant_turn():
    renderer = ChatRenderer(build_tokenizer("llama"))
    with pytest.raises(ChatTemplateError, match="assistant"):
        renderer.env_turn_ids([{"role": "user", "content": "x"}], "y")


def _tokenizer(arch: str):
    if arch != "default":
        return build_tokenizer(arch)
    from transformers import AutoTokenizer

    from sepo.config.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("default"))  # SmolLM2's byte-level BPE


@pytest.mark.parametrize("arch", [*ARCHS, "default"])
def test_new_turns_match_whole_conversation_and_fall_back(arch, monkeypatch):
    """env_turn_ids (built from the template glue, tokenised piecewise) equals the whole conversation rendered
    and tokenised, during the first TURN_CHECKS calls (checked) and after them (trusted); a disagreement
    during the checks switches the renderer to the whole-conversation path for good."""
    from sepo.rollout import chat

    renderer = ChatRenderer(_tokenizer(arch))
    assert renderer.glue is not None  # every template here places contents verbatim
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": OBSERVATIONS[0]}]
    for k in range(chat.TURN_CHECKS + 4):  # past the checks: the fast path alone answers
        messages.append({"role": "assistant", "content": f" reply {k}:\n  DEFECT  "})
        obs = f"Round {k + 2}. Scores: you {3 * k}, opponent {k}.\n\n  What now?"
        obs = f" {obs}\n" if k % 2 else obs  # edge whitespace (trimmed by some templates) takes the Jinja path
        conv = [*messages, {"role": "user", "content": obs}]
        tok, eot = renderer.tokenizer, renderer.end_of_turn_id
        n_turns = tok.encode(renderer.render(messages), add_special_tokens=False).count(eot)
        whole = tok.encode(renderer.render(conv, add_generation_prompt=True), add_special_tokens=False)
        ends = [i for i, t in enumerate(whole) if t == eot]
        assert renderer.env_turn_ids(messages, obs) == whole[ends[n_turns - 1] + 1 :]
        messages.append({"role": "user", "content": obs})
    assert renderer._checks_left["env"] == 0 and not renderer.straightforward

    fresh = ChatRenderer(_tokenizer(arch))
    monkeypatch.setattr(fresh.pieces, "encode", lambda texts: [[0] for _ in texts])  # a tokenizer that disagrees
    expected = ChatRenderer(_tokenizer(arch)).env_turn_ids(messages[:3], OBSERVATIONS[1])
    assert fresh.env_turn_ids(messages[:3], OBSERVATIONS[1]) == expected
    assert fresh.straightforward
