"""The loss's per-token log-probabilities with every distinct prefix run once: the G rollouts of a group share
their prompt, and rollouts that answered alike share their completions too (a compact game's batch of 48 rows
holds a few distinct prompts and, after each answer and each environment message, a few distinct histories), so
each shared stretch of tokens is paid once, forward and backward, instead of once per row.

TRL scores a batch as one (B, P + C) forward: the left-padded prompts (P columns), then the right-padded
completions (C columns), the log-probabilities read at the completion positions. Here the columns are cut into
segments (`plan_segments`): the first P - 1 columns (every prompt column but the last), then stretches of the
rest chosen to minimise the token slots run. Each segment runs once per distinct row of the columns up to its
end and of the token its last position scores (ids and mask) among the rows that still have a real token
from its start on (a row that is padding from
there on has nothing left to score), on the previous segment's key/value cache indexed out to those rows.
Segments after the first run through TRL's fused head with pre-shifted labels (each position scores the next
column's token, the first token of the next segment included), so the head sees only the distinct rows'
columns of the segment. The positions, the attention mask and every row's keys and values are those of the
single pass, so the log-probabilities, the entropies and the gradients (summed over the rows that share a
prefix, through the cache's indexing) are the single pass's at every real completion position, up to
floating-point round-off; padding positions, which the loss masks, hold 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

Head = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]
"""`head(model, input_ids=, attention_mask=, shift_labels=, past_key_values=)`: the model's forward through TRL's
fused LM head, returning (log-probabilities, entropies or None) of the pre-shifted labels (-100 = not scored),
one per input position; the cache is extended in place."""

SEGMENT_COST = 32
"""A segment's fixed cost in token slots (a model call, the cache's indexing), against which `plan_segments`
weighs the slots a cut saves; it decides speed only, never the result."""
MAX_CUTS = 64
"""The most candidate cut columns `plan_segments` weighs (its planning grows with their square)."""


def prefix_classes(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) class ids: rows i and j have the same id at column c when their ids and mask agree on columns
    0..c, so the model's states of the two rows agree there."""
    classes = torch.zeros_like(input_ids)
    previous = torch.zeros(input_ids.size(0), dtype=input_ids.dtype, device=input_ids.device)
    for c in range(input_ids.size(1)):
        keys = torch.stack([previous, input_ids[:, c], attention_mask[:, c].to(input_ids.dtype)], 1)
        previous = torch.unique(keys, dim=0, return_inverse=True)[1]
        classes[:, c] = previous
    return classes


def last_real_column(attention_mask: torch.Tensor) -> list[int]:
    """Per row, the last column its mask holds a real token in (-1 for none)."""
    columns = torch.arange(attention_mask.size(1), device=attention_mask.device)
    return torch.where(attention_mask.bool(), columns, -1).max(1).values.tolist()


def plan_segments(classes: torch.Tensor, last_real: list[int], start: int,
                  segment_cost: int = SEGMENT_COST, max_cuts: int = MAX_CUTS) -> tuple[list[int], int]:
    """(ends, slots): the segment ends after `start` (the last is the width) and the token slots they run: the cut of columns start..T that minimises
    the token slots run (per segment [a, b), its distinct rows times b - a, plus `segment_cost`), where a
    segment's distinct rows are the classes at `scored_through(b, T)` of the rows with a real token at or
    after a. Cuts are
    tried only where the rows split into more classes or a row ends (at most `max_cuts` of them, evenly
    spread), so planning stays small for long completions."""
    width = classes.size(1)
    rows = range(classes.size(0))
    at_end = classes.t().tolist()  # per column, every row's class
    splits = [c + 1 for c in range(start, width - 1) if len(set(at_end[c + 1])) > len(set(at_end[c]))]
    ends = sorted({c for c in splits + [r + 1 for r in last_real] if start < c < width})
    if len(ends) > max_cuts:
        ends = [ends[round(i * (len(ends) - 1) / (max_cuts - 1))] for i in range(max_cuts)]
    cuts = [start, *ends, width]
    best = {start: (0, [])}
    for b in cuts[1:]:
        options = []
        for a in cuts[: cuts.index(b)]:
            distinct = len({at_end[scored_through(b, width)][r] for r in rows if last_real[r] >= a})
            options.append((best[a][0] + distinct * (b - a) + segment_cost, best[a][1] + [b]))
        best[b] = min(options, key=lambda option: option[0])
    cost, ends = best[width]
    return ends, cost - segment_cost * len(ends)


def scored_through(end: int, width: int) -> int:
    """The last column a segment ending at `end` depends on: its last position scores the next column's token,
    so rows run as one there must agree up to that token too (the batch's last column scores nothing)."""
    return min(end, width - 1)


def full_attention_cache(cache: Any) -> bool:
    """Whether every layer of `cache` is a plain full-attention layer: a sliding-window layer keeps only its window
    and a linear-attention layer a state, which the later segments cannot index out and continue as the single
    pass does (those models take TRL's single pass)."""
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def _representatives(classes: torch.Tensor, active: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(reps, slot): one active row per distinct class in `classes` (B,) among `active` rows, and for every row
    the index of its class's representative in `reps` (an inactive row's is 0: its outputs are masked)."""
    rows = active.nonzero().squeeze(1)
    _, inverse = torch.unique(classes[rows], return_inverse=True)
    reps = torch.full((int(inverse.max()) + 1,), classes.size(0), dtype=rows.dtype, device=rows.device)
    reps = reps.scatter_reduce(0, inverse, rows, reduce="amin")
    slot = torch.zeros_like(classes)
    slot[rows] = inverse
    return reps, slot


@dataclass
class PrefixSharing:
    """The shared-prefix pass for one model: `full_attention` is learnt from its first prefix cache (None until
    then); once False, every batch takes the single pass without trying again."""

    full_attention: bool | None = None

    def logps(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int,
              head: Head) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """(log-probabilities, entropies) of the last `logits_to_keep` tokens of each row, as TRL's single pass
        computes them at every real position (0 at padding), with every distinct prefix run once; None (take the
        single pass) when the model's cache is not full-attention or sharing would run as many token slots."""
        total = input_ids.size(1)
        width = total - logits_to_keep - 1  # the first position that scores a kept token
        if width < 0 or self.full_attention is False:
            return None
        # deferred: only a batch that shares something builds a cache here
        from transformers import DynamicCache

        cache = DynamicCache(config=model.config)
        self.full_attention = full_attention_cache(cache)
        if not self.full_attention:
            return None
        classes = prefix_classes(input_ids, attention_mask)
        last_real = last_real_column(attention_mask)
        ends, slots = plan_segments(classes, last_real, 0)
        if slots >= input_ids.numel():
            return None
        shifted = torch.full_like(input_ids, -100)  # column c scores the token at c + 1 where it is kept and real
        shifted[:, width:-1] = input_ids[:, width + 1:].masked_fill(attention_mask[:, width + 1:] == 0, -100)
        last_real_t = torch.tensor(last_real, device=input_ids.device)
        held_reps = None  # the rows whose states the cache holds, one per cache row
        logps, entropies = [], []
        a, first_scored = 0, None
        for b in ends:
            active = last_real_t >= a
            seg_reps, slot = _representatives(classes[:, scored_through(b, total)], active)
            if held_reps is not None:  # each representative's cache row: one holding its states up to a - 1
                before = classes[:, a - 1]
                where = {int(c): i for i, c in enumerate(before[held_reps].tolist())}
                cache.reorder_cache(torch.tensor([where[int(before[r])] for r in seg_reps.tolist()],
                                                 device=input_ids.device))
            inputs = {"input_ids": input_ids[seg_reps, a:b], "attention_mask": attention_mask[seg_reps, :b],
                      "past_key_values": cache}
            if b <= width:  # prompt columns only: nothing to score, the cache is what counts
                model(**inputs, use_cache=True, logits_to_keep=1)
            else:
                lp, ent = head(model, shift_labels=shifted[seg_reps, a:b], **inputs)
                logps.append(lp[slot] * active[:, None])
                if ent is not None:
                    entropies.append(ent[slot] * active[:, None])
                first_scored = a if first_scored is None else first_scored
            held_reps, a = seg_reps, b
        skip = width - first_scored
        lp = torch.cat(logps, 1)[:, skip:skip + logits_to_keep]
        return lp, (torch.cat(entropies, 1)[:, skip:skip + logits_to_keep] if entropies else None)
