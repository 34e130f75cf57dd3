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

from sepo.backends.shared_rows import (
    empty_cache,
    last_real_column,
    plan_segments,
    prefix_classes,
    reorder_to,
    representatives,
    scored_through,
)

Head = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]
"""`head(model, input_ids=, attention_mask=, shift_labels=, past_key_values=)`: the model's forward through TRL's
fused LM head, returning (log-probabilities, entropies or None) of the pre-shifted labels (-100 = not scored),
one per input position; the cache is extended in place."""


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
        cache = empty_cache(model)
        self.full_attention = cache is not None
        if cache is None:
            return None
        classes = prefix_classes(input_ids, attention_mask)
        last_real = last_real_column(attention_mask)
        ends, slots = plan_segments(classes, last_real, 0)
        if slots >= input_ids.numel():
            return None
        shifted = torch.full_like(input_ids, -100)  # column c scores the token at c + 1 where it is kept and real
        shifted[:, width:-1] = input_ids[:, width + 1:].masked_fill(attention_mask[:, width + 1:] == 0, -100)
        last_real_t = torch.tensor(last_real, device=input_ids.device)
        held = None  # the rows whose states the cache holds, one per cache row
        logps, entropies = [], []
        a, first_scored = 0, None
        for b in ends:
            active = last_real_t >= a
            reps, slot = representatives(classes[:, scored_through(b, total)], active)
            reorder_to(cache, classes, a - 1, held, reps)
            inputs = {"input_ids": input_ids[reps, a:b], "attention_mask": attention_mask[reps, :b],
                      "past_key_values": cache}
            if b <= width:  # prompt columns only: nothing to score, the cache is what counts
                model(**inputs, use_cache=True, logits_to_keep=1)
            else:
                lp, ent = head(model, shift_labels=shifted[reps, a:b], **inputs)
                logps.append(lp[slot] * active[:, None])
                if ent is not None:
                    entropies.append(ent[slot] * active[:, None])
                first_scored = a if first_scored is None else first_scored
            held, a = reps, b
        skip = width - first_scored
        lp = torch.cat(logps, 1)[:, skip:skip + logits_to_keep]
        return lp, (torch.cat(entropies, 1)[:, skip:skip + logits_to_keep] if entropies else None)
