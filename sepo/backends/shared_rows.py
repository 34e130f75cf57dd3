"""Rows that share a prefix, run once: the segment planning behind every shared pass over a left-padded batch.

A batch of rows (left-padded prompts, maybe followed by right-padded completions) often repeats itself: the G
rollouts of a group share their prompt, rollouts that answered alike share their history, and prompts of one
length share their system prompt column for column. `prefix_classes` gives each row's class at every column
(rows of one class agree on everything up to it, so the model's states agree there); `plan_segments` cuts the
columns into segments so that running each segment once per distinct class (on the previous segment's
key/value cache, indexed out to those rows) runs the fewest token slots. Used by the loss's shared pass
(`sepo.grpo.shared_prefix`) and the exact scoring's prompt pass (`sepo.backends.hf_decoding`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


def left_padded(rows: Sequence[Sequence[int]], pad_id: int,
                device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask) of token rows left-padded to the longest, mask 0 on padding: the layout every batched pass
    here feeds, so each row's last token sits in the last column."""
    width = max(len(row) for row in rows)
    ids = torch.tensor([[pad_id] * (width - len(row)) + list(row) for row in rows], device=device)
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows], device=device)
    return ids, mask


def positions_of(mask: torch.Tensor) -> torch.Tensor:
    """Each column's position in its row, counting real tokens only (0 on left padding): the position ids
    `generate` gives a left-padded row."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


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


SEGMENT_COST = 32
"""A segment's fixed cost in token slots (a model call, the cache's indexing), against which `plan_segments`
weighs the slots a cut saves; it decides speed only, never the result."""
MAX_CUTS = 64
"""The most candidate cut columns `plan_segments` weighs (its planning grows with their square)."""


def plan_segments(classes: torch.Tensor, last_real: list[int], start: int,
                  segment_cost: int = SEGMENT_COST, max_cuts: int = MAX_CUTS) -> tuple[list[int], int]:
    """(ends, slots): the segment ends after `start` (the last is the width) and the token slots they run.

    The cut of columns start..T minimises the slots run: per segment [a, b), its distinct rows times b - a,
    plus `segment_cost`, where a segment's distinct rows are the classes at `scored_through(b, T)` of the rows
    with a real token at or after a (a pass that scores nothing could cut one column later; the plan is then a
    little cautious, never wrong). Cuts are tried only where the rows split into more classes or a row ends (at
    most `max_cuts` of them, evenly spread), so planning stays small for long completions."""
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
    and a linear-attention layer a state, which a later segment cannot index out and continue as a single pass
    does (those models take the single pass)."""
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def representatives(classes: torch.Tensor, active: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(reps, slot): one active row per distinct class in `classes` (B,) among `active` rows, and for every row
    the index of its class's representative in `reps` (an inactive row's is 0: its outputs are masked)."""
    rows = active.nonzero().squeeze(1)
    _, inverse = torch.unique(classes[rows], return_inverse=True)
    reps = torch.full((int(inverse.max()) + 1,), classes.size(0), dtype=rows.dtype, device=rows.device)
    reps = reps.scatter_reduce(0, inverse, rows, reduce="amin")
    slot = torch.zeros_like(classes)
    slot[rows] = inverse
    return reps, slot


def reorder_to(cache: Any, classes: torch.Tensor, column: int, held: torch.Tensor | None, rows: torch.Tensor) -> None:
    """Index `cache`, whose i-th row holds the states of row `held[i]` up to `column`, out to `rows`: each gets
    the cache row of a held row of its class at `column` (the same states). Nothing to do before the first
    segment (`held` None)."""
    if held is None:
        return
    before = classes[:, column]
    where = {int(c): i for i, c in enumerate(before[held].tolist())}
    cache.reorder_cache(torch.tensor([where[int(before[r])] for r in rows.tolist()], device=rows.device))


def empty_cache(model: Any) -> DynamicCache | None:
    """A fresh cache of `model`'s layers, or None when some layer is not plain full attention (see
    `full_attention_cache`)."""
    cache = DynamicCache(config=model.config)
    return cache if full_attention_cache(cache) else None


def shared_prompt_pass(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       position_ids: torch.Tensor) -> tuple[Any, torch.Tensor] | None:
    """The left-padded rows run with every shared prefix once (no gradients are kept apart: this is a plain
    forward): (their cache, one row per input row in order; the last column's logits, (B, vocab)), or None when
    the model's cache is not plain full attention or sharing saves nothing."""
    cache = empty_cache(model)
    if cache is None:
        return None
    classes = prefix_classes(input_ids, attention_mask)
    ends, slots = plan_segments(classes, last_real_column(attention_mask), 0)
    if slots >= input_ids.numel():
        return None
    held, a, logits, slot = None, 0, None, None
    everyone = torch.ones(input_ids.size(0), dtype=torch.bool, device=input_ids.device)
    for b in ends:
        reps, slot = representatives(classes[:, b - 1], everyone)
        reorder_to(cache, classes, a - 1, held, reps)
        logits = model(input_ids=input_ids[reps, a:b], attention_mask=attention_mask[reps, :b],
                       position_ids=position_ids[reps, a:b], past_key_values=cache, use_cache=True,
                       logits_to_keep=1).logits[:, -1]
        held, a = reps, b
    cache.reorder_cache(slot)
    return cache, logits[slot]
