"""Trie-constrained fallback decoding and exact action scoring."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sepo.backends.hf_decoding import (
    ActionTrie,
    TrieLogitsProcessor,
    action_variants,
    build_trie,
    score_actions,
    variants_of,
)
from sepo.rollout.fallback import FALLBACK_CUE, fallback_prompt_ids
from sepo.tiny_models import build_tiny_model, build_tokenizer

ACTION_SETS = [
    ["COOPERATE", "DEFECT"],
    ["1", "2", "3"],
    [str(d) for d in range(1, 10)],
    ["PASS", "BET", "CALL", "FOLD"],
    ["[0, 0, 1]", "[1, 2, 3]", "[2, 0, 4]", "[1, 2, 0]"],
]
TOK = build_tokenizer("llama")
EOT = TOK.convert_tokens_to_ids("<|im_end|>")
CONTEXT = TOK.encode("I think they will retaliate." + FALLBACK_CUE, add_special_tokens=False)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_variants_are_in_context_and_spaced():
    for actions in ACTION_SETS:
        for action in actions:
            variants = action_variants(TOK, CONTEXT, action)
            texts = {TOK.decode(CONTEXT + v)[len(TOK.decode(CONTEXT)) :] for v in variants}
            assert texts == {action, " " + action}


def test_a_batch_tokenises_each_row_as_that_row_alone():
    """`variants_of` encodes a whole call's rows in one batch: each row's variants are those of the row tokenised
    alone, whatever the rows beside it (action sets of 2 to 9 actions, so a misread offset lands on another
    row's texts). The project's tokenizers give the same variants after every context tried, so a row read with
    another row's context is not caught here."""
    contexts = [CONTEXT, TOK.encode("Round 2." + FALLBACK_CUE, add_special_tokens=False), [], CONTEXT[:5]]
    batch = variants_of(TOK, contexts, ACTION_SETS[: len(contexts)])
    alone = [variants_of(TOK, [c], [acts])[0] for c, acts in zip(contexts, ACTION_SETS)]
    assert batch == alone and [list(row) for row in batch] == ACTION_SETS[: len(contexts)]


def _constrained_rollout(actions, seed, greedy):
    """Drive the processor by hand over random logits, like generate would."""
    gen = torch.Generator().manual_seed(seed)
    rows = 3
    tries = [build_trie(TOK, CONTEXT, actions) for _ in range(rows)]
    proc = TrieLogitsProcessor(tries, len(CONTEXT), EOT)
    ids = torch.tensor([CONTEXT] * rows)
    for _ in range(tries[0].max_depth + 1):
        scores = torch.randn(rows, len(TOK), generator=gen) * 10
        scores = proc(ids, scores)
        if greedy:
            nxt = scores.argmax(-1)
        else:
            nxt = torch.multinomial(torch.softmax(scores, -1), 1, generator=gen).squeeze(1)
        ids = torch.cat([ids, nxt[:, None]], 1)
    return ids[:, len(CONTEXT) :].tolist()


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(ACTION_SETS), st.integers(0, 2**31 - 1), st.booleans())
def test_trie_only_yields_legal_actions_then_eos(actions, seed, greedy):
    trie = build_trie(TOK, CONTEXT, actions)
    for row in _constrained_rollout(actions, seed, greedy):
        end = row.index(EOT)  # the end-of-turn token is always reached within max_depth + 1 steps
        assert all(t == EOT for t in row[end:])
        assert trie.action_of(row[:end]) in actions
        assert TOK.decode(row[:end]).strip() in actions


def test_trie_prefix_actions_allow_both_continuation_and_end():
    trie = ActionTrie({"1": [[7]], "10": [[7, 9]]})
    proc = TrieLogitsProcessor([trie], 0, eos_id=2)
    assert sorted(proc.allowed(0, [7])) == [2, 9]
    assert proc.allowed(0, [7, 9]) == [2]
    assert proc.allowed(0, [5]) == [2]  # off the trie: only end the turn
    with pytest.raises(ValueError, match="at least one action"):
        ActionTrie({})
    with pytest.raises(ValueError, match="no legal actions"):
        build_trie(TOK, CONTEXT, [])


def test_fallback_prompt_keeps_text_drops_eot_and_appends_cue():
    turn = TOK.encode("I am unsure", add_special_tokens=False) + [EOT]
    ids, cue = fallback_prompt_ids([1, 2], turn, TOK, EOT)
    assert ids == [1, 2, *turn[:-1], *cue]
    assert TOK.decode(cue) == FALLBACK_CUE == "\nFinal action:"


MODEL, MTOK = build_tiny_model("llama", seed=3)


@settings(max_examples=8, deadline=None)
@given(st.sampled_from(ACTION_SETS), st.text("abcdefgh ", min_size=1, max_size=30))
def test_scores_are_a_distribution(actions, text):
    prompts = [
        MTOK.encode(text, add_special_tokens=False),
        MTOK.encode("round 3 " + text, add_special_tokens=False),
    ]
    probs = score_actions(MODEL, MTOK, prompts, [actions, actions[:2]], EOT, batch_size=5)
    for row, acts in zip(probs, [actions, actions[:2]]):
        assert len(row) == len(acts) and all(p > 0 for p in row)
        assert sum(row) == pytest.approx(1.0, abs=1e-9)


@torch.no_grad()
def unpadded_probabilities(model, tok, prompt: list[int], actions: list[str], eot: int) -> list[float]:
    """The oracle: every tokenisation of every action appended to the prompt, one unpadded sequence at a time."""
    liks = []
    for a in actions:
        total = 0.0
        for v in action_variants(tok, prompt, a):
            seq = torch.tensor([prompt + v + [eot]])
            lp = torch.log_softmax(model(seq).logits[0, :-1].float(), -1)
            steps = torch.arange(len(prompt) - 1, seq.shape[1] - 1)
            total += float(lp[steps, seq[0, len(prompt) :]].sum().exp())
        liks.append(total)
    return [x / sum(liks) for x in liks]


def test_scores_match_unpadded_teacher_forcing():
    prompts = [
        MTOK.encode("you are a player", add_special_tokens=False),
        MTOK.encode("bid", add_special_tokens=False),
    ]
    actions = ["1", "2", "3"]
    got = score_actions(MODEL, MTOK, prompts, [actions, actions], EOT, batch_size=4)
    for prompt, row in zip(prompts, got):
        assert row == pytest.approx(unpadded_probabilities(MODEL, MTOK, prompt, actions, EOT), rel=1e-4)


@pytest.mark.parametrize("arch", ["qwen3_5", "gemma4"])
def test_cached_scoring_matches_unpadded_teacher_forcing_on_other_caches(arch):
    """Linear-attention (Qwen 3.5) and sliding-window (Gemma 4) caches: each continuation scored on a copy of
    the prompt cache equals scoring the whole sequence from scratch."""
    model, tok = build_tiny_model(arch, seed=5)
    eot = tok.convert_tokens_to_ids("<|im_end|>") if arch == "qwen3_5" else tok.eos_token_id
    prompts = [tok.encode("you are a player in round two", add_special_tokens=False),
               tok.encode("bid", add_special_tokens=False)]
    actions = ["PASS", "BET"]
    got = score_actions(model, tok, prompts, [actions, actions], eot, batch_size=2)
    for prompt, row in zip(prompts, got):
        assert row == pytest.approx(unpadded_probabilities(model, tok, prompt, actions, eot), rel=1e-4)
