"""Constrained fallback decoding and exact action scoring for transformers models.

When a turn does not parse into a legal action, the rollout keeps the model's own text and appends the
fallback cue (`sepo.rollout.fallback`) in the same assistant turn; here the next tokens are restricted to the legal action strings (a token trie applied as
a `LogitsProcessor`), then the end-of-turn token is forced. Actions are tokenised *in context* (after the cue)
and also with/without a leading space, so the trie contains the token sequences the model would naturally use.
Scoring gives the exact probability of each legal action as the continuation (used for tabular policies,
e.g. a game's exact exploitability).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import LogitsProcessor

from sepo.backends.shared_rows import left_padded, positions_of, shared_prompt_pass

_CONTEXT_TOKENS = 16  # how much of the prompt's tail is re-tokenised to find in-context action tokens


@dataclass
class _Node:
    children: dict[int, _Node] = field(default_factory=dict)
    action: str | None = None  # set when the path to this node spells a whole action


class ActionTrie:
    """Token-id sequences of legal actions, for prefix-constrained decoding."""

    def __init__(self, sequences: dict[str, Sequence[Sequence[int]]]):
        self.root = _Node()
        self.max_depth = 0
        for action, variants in sequences.items():
            for ids in variants:
                if not ids:
                    raise ValueError(f"action {action!r} has an empty tokenisation")
                node = self.root
                for t in ids:
                    node = node.children.setdefault(int(t), _Node())
                node.action = action
                self.max_depth = max(self.max_depth, len(ids))
        if not self.root.children:
            raise ValueError("ActionTrie needs at least one action")

    def walk(self, prefix: Sequence[int]) -> _Node | None:
        """The node reached by `prefix`, or None if no action starts with it."""
        node = self.root
        for t in prefix:
            node = node.children.get(int(t))
            if node is None:
                return None
        return node

    def action_of(self, ids: Sequence[int]) -> str | None:
        """The action a complete token sequence spells, or None."""
        node = self.walk(ids)
        return node.action if node is not None else None


def action_variants(tokenizer, context_ids: Sequence[int], action: str) -> list[list[int]]:
    """Tokenisations of `action` (with and without a leading space) as continuations of `context_ids`:
    the in-context suffix ids when the context tokens survive re-tokenisation, and the standalone ids."""
    return variants_of(tokenizer, [context_ids], [[action]])[0][action]


def variants_of(tokenizer, contexts: Sequence[Sequence[int]],
                actions: Sequence[Sequence[str]]) -> list[dict[str, list[list[int]]]]:
    """Per context, {action: `action_variants`} for each of its actions, with one decode and one encode call for
    the whole batch (a call's rows would otherwise cost one decode and ten encodes each for two actions)."""
    if not contexts:  # batch_decode reads an empty list as one empty sequence
        return []
    tails = tokenizer.batch_decode([list(c[-_CONTEXT_TOKENS:]) for c in contexts], skip_special_tokens=False)
    texts = []
    for tail, acts in zip(tails, actions, strict=True):
        texts.append(tail)
        for action in acts:
            for text in (action, " " + action):
                texts += [tail + text, text]
    encoded = iter(tokenizer(texts, add_special_tokens=False)["input_ids"])
    out: list[dict[str, list[list[int]]]] = []
    for acts in actions:
        ctx_ids = next(encoded)
        row: dict[str, list[list[int]]] = {}
        for action in acts:
            found: list[list[int]] = []
            for _ in (action, " " + action):
                full, alone = next(encoded), next(encoded)
                candidates = [alone]
                if full[: len(ctx_ids)] == ctx_ids and len(full) > len(ctx_ids):
                    candidates.insert(0, full[len(ctx_ids) :])
                found.extend(c for c in candidates if c and c not in found)
            row[action] = found
        out.append(row)
    return out


def build_trie(tokenizer, context_ids: Sequence[int], actions: Sequence[str]) -> ActionTrie:
    """The trie of all in-context variants of `actions` after `context_ids`."""
    return build_tries(tokenizer, [context_ids], [actions])[0]


def build_tries(tokenizer, contexts: Sequence[Sequence[int]], choices: Sequence[Sequence[str]]) -> list[ActionTrie]:
    """`build_trie` for every row of a call, tokenised in one batch (`variants_of`)."""
    if any(not actions for actions in choices):
        raise ValueError("no legal actions to constrain to")
    return [ActionTrie(variants) for variants in variants_of(tokenizer, contexts, choices)]


class TrieLogitsProcessor(LogitsProcessor):
    """Per batch row, allow only tokens that extend a legal action (row's own trie) after `prompt_len`;
    once an action is complete, the end-of-turn token is allowed, and nothing else after a dead end.

    With left padding every row's generated part starts at the same `prompt_len` (the padded width); None: the
    width of the ids `generate` first asks about (the prompt it was given).
    """

    def __init__(self, tries: Sequence[ActionTrie], prompt_len: int | None, eos_id: int):
        self.tries, self.prompt_len, self.eos_id = list(tries), prompt_len, eos_id
        self.max_depth = max((t.max_depth for t in self.tries), default=0)  # the longest action, in tokens

    @classmethod
    def for_choices(cls, tokenizer, contexts: Sequence[Sequence[int]], choices: Sequence[Sequence[str]],
                    eos_id: int) -> TrieLogitsProcessor:
        """The processor constraining row i to `choices[i]` after `contexts[i]` (`build_tries`), from the prompt
        `generate` is given on."""
        return cls(build_tries(tokenizer, contexts, choices), None, eos_id)

    def allowed(self, row: int, generated: Sequence[int]) -> list[int]:
        if self.eos_id in generated:  # finished rows are padded by generate; keep them finished
            return [self.eos_id]
        node = self.tries[row].walk(generated)
        if node is None:
            return [self.eos_id]
        allowed = list(node.children)
        if node.action is not None or not allowed:
            allowed.append(self.eos_id)
        return allowed

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prompt_len is None:
            self.prompt_len = input_ids.shape[1]
        mask = torch.full_like(scores, float("-inf"))
        for row in range(input_ids.shape[0]):
            mask[row, self.allowed(row, input_ids[row, self.prompt_len :].tolist())] = 0.0
        return scores + mask


@torch.no_grad()
def score_actions(
    model,
    tokenizer,
    prompts: Sequence[Sequence[int]],
    choices: Sequence[Sequence[str]],
    end_of_turn_id: int,
    batch_size: int = 32,
    normalise: bool = True,
) -> list[list[float]]:
    """Probabilities of each choice as the continuation of each prompt (normalised over the prompt's choices
    unless `normalise` is False: then as the model gives them, their sum the mass on the choices' text).

    A choice's log-likelihood is the teacher-forced log-probability of its tokens plus end-of-turn, summed
    over its tokenisations (with/without leading space, in context); probabilities are normalised over the
    choices of each prompt. Each prompt is encoded once (`batch_size` prompts per forward pass, left-padded)
    and every continuation is scored on a copy of its key/value cache, so a prompt with k tokenisations of
    its choices costs one prompt pass, not k (a two-action exact phase scores 6-8 continuations per prompt).
    """
    for i, acts in enumerate(choices):
        if not acts:
            raise ValueError(f"prompt {i} has no choices to score")
    # per prompt: (choice index, continuation ids + end-of-turn)
    conts = [[(j, [*variant, end_of_turn_id]) for j, action in enumerate(acts) for variant in variants[action]]
             for acts, variants in zip(choices, variants_of(tokenizer, prompts, choices), strict=True)]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else end_of_turn_id
    out: list[list[float]] = [[float("-inf")] * len(acts) for acts in choices]
    for start in range(0, len(prompts), batch_size):
        chunk = range(start, min(start + batch_size, len(prompts)))
        scored = _score_chunk(model, [list(prompts[i]) for i in chunk], [conts[i] for i in chunk], pad)
        for b, j, lp in scored:
            out[start + b][j] = float(torch.logaddexp(torch.tensor(out[start + b][j]), torch.tensor(lp)))
    if not normalise:
        return [torch.tensor(row, dtype=torch.float64).exp().tolist() for row in out]
    return [torch.softmax(torch.tensor(row, dtype=torch.float64), 0).tolist() for row in out]


def _score_chunk(model, prompts: list[list[int]], conts: list[list[tuple[int, list[int]]]],
                 pad: int) -> list[tuple[int, int, float]]:
    """(prompt, choice, log-likelihood) of every continuation: one pass over the left-padded prompts (each shared
    prefix once: `sepo.backends.shared_rows.shared_prompt_pass`), then
    for k = 0, 1, ... one pass feeding every prompt's k-th continuation (right-padded) on a copy of the
    prompts' cache. The first continuation token is scored from the prompt pass's last logits."""
    device = next(model.parameters()).device
    ids, attn = left_padded(prompts, pad, device)
    positions = positions_of(attn)
    shared = shared_prompt_pass(model, ids, attn, positions)
    if shared is None:
        first = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True, logits_to_keep=1)
        shared = first.past_key_values, first.logits[:, -1]
    prompt_cache, last_logits = shared
    first_lp = torch.log_softmax(last_logits.float(), -1)
    lengths = attn.sum(1, keepdim=True)
    scored = []
    for k in range(max(len(c) for c in conts)):
        rows = [(b, c[k]) for b, c in enumerate(conts) if k < len(c)]
        fed = max(len(cont) for _, (_, cont) in rows) - 1  # the last token (end-of-turn) is only predicted
        x = torch.full((len(prompts), fed), pad, device=device)
        mask = torch.zeros((len(prompts), fed), dtype=attn.dtype, device=device)
        for b, (_, cont) in rows:
            x[b, : len(cont) - 1] = torch.tensor(cont[:-1], device=device)
            mask[b, : len(cont) - 1] = 1
        logps = None
        if fed:
            logits = model(input_ids=x, attention_mask=torch.cat([attn, mask], 1),
                           position_ids=lengths + torch.arange(fed, device=device),
                           past_key_values=copy.deepcopy(prompt_cache)).logits
            logps = torch.log_softmax(logits.float(), -1)
        for b, (j, cont) in rows:
            lp = first_lp[b, cont[0]]
            for t in range(len(cont) - 1):
                lp = lp + logps[b, t, cont[t + 1]]
            scored.append((b, j, float(lp)))
    return scored
