"""Constrained fallback decoding and exact action scoring for transformers models.

When a turn does not parse into a legal action, the rollout keeps the model's own text and appends the
fallback cue (`sepo.rollout.fallback`) in the same assistant turn; here the next tokens are restricted to the legal action strings (a token trie applied as
a `LogitsProcessor`), then the end-of-turn token is forced. Actions are tokenised *in context* (after the cue)
and also with/without a leading space, so the trie contains the token sequences the model would naturally use.
Scoring gives the exact probability of each legal action as the continuation (used for tabular policies,
e.g. Kuhn exploitability).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import LogitsProcessor

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
    context = tokenizer.decode(list(context_ids[-_CONTEXT_TOKENS:]), skip_special_tokens=False)
    ctx_ids = tokenizer.encode(context, add_special_tokens=False)
    out: list[list[int]] = []
    for text in (action, " " + action):
        full = tokenizer.encode(context + text, add_special_tokens=False)
        candidates = [tokenizer.encode(text, add_special_tokens=False)]
        if full[: len(ctx_ids)] == ctx_ids and len(full) > len(ctx_ids):
            candidates.insert(0, full[len(ctx_ids) :])
        out.extend(c for c in candidates if c and c not in out)
    return out


def build_trie(tokenizer, context_ids: Sequence[int], actions: Sequence[str]) -> ActionTrie:
    """The trie of all in-context variants of `actions` after `context_ids`."""
    if not actions:
        raise ValueError("no legal actions to constrain to")
    return ActionTrie({a: action_variants(tokenizer, context_ids, a) for a in actions})


class TrieLogitsProcessor(LogitsProcessor):
    """Per batch row, allow only tokens that extend a legal action (row's own trie) after `prompt_len`;
    once an action is complete, the end-of-turn token is allowed, and nothing else after a dead end.

    With left padding every row's generated part starts at the same `prompt_len` (the padded width).
    """

    def __init__(self, tries: Sequence[ActionTrie], prompt_len: int, eos_id: int):
        self.tries, self.prompt_len, self.eos_id = list(tries), prompt_len, eos_id

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
) -> list[list[float]]:
    """Probabilities of each choice as the continuation of each prompt.

    A choice's log-likelihood is the teacher-forced log-probability of its tokens plus end-of-turn, summed
    over its tokenisations (with/without leading space, in context); probabilities are normalised over the
    choices of each prompt. Sequences are left-padded so only the continuation logits are computed.
    """
    rows: list[tuple[int, int, list[int], int]] = []  # (prompt, choice, ids, continuation length)
    for i, (prompt, acts) in enumerate(zip(prompts, choices, strict=True)):
        if not acts:
            raise ValueError(f"prompt {i} has no choices to score")
        for j, action in enumerate(acts):
            for variant in action_variants(tokenizer, prompt, action):
                cont = [*variant, end_of_turn_id]
                rows.append((i, j, [*prompt, *cont], len(cont)))
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else end_of_turn_id
    seq_logps: list[float] = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        width = max(len(r[2]) for r in chunk)
        keep = max(r[3] for r in chunk) + 1
        ids = torch.tensor([[pad] * (width - len(r[2])) + r[2] for r in chunk], device=device)
        attn = torch.tensor([[0] * (width - len(r[2])) + [1] * len(r[2]) for r in chunk], device=device)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=keep).logits
        logps = torch.log_softmax(logits[:, :-1].float(), -1)  # position k predicts token at width-keep+k+1
        targets = ids[:, width - keep + 1 :]
        tok_lp = logps.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        for b, (_, _, _, n) in enumerate(chunk):
            seq_logps.append(float(tok_lp[b, -n:].sum()))
    out: list[list[float]] = [[float("-inf")] * len(acts) for acts in choices]
    for (i, j, _, _), lp in zip(rows, seq_logps):
        out[i][j] = float(torch.logaddexp(torch.tensor(out[i][j]), torch.tensor(lp)))
    return [torch.softmax(torch.tensor(row, dtype=torch.float64), 0).tolist() for row in out]
