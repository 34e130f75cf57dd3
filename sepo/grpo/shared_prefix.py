"""The loss's per-token log-probabilities with each distinct prompt run once: the G rollouts of a group share
their prompt, so its forward (and backward) pass is paid once per group instead of once per rollout.

TRL scores a batch as one (B, P + C) forward: the left-padded prompts (P columns), then the right-padded
completions (C columns), the log-probabilities read at the completion positions. Here the first P - 1 columns
(every prompt column but the last) run once per distinct row of them, with gradients, keeping their key/value
cache; the cache is indexed out to the B rows, and the last prompt column plus the completions run on it. The
positions, the attention mask and every row's keys and values are those of the single pass, so the
log-probabilities, the entropies and the gradients (summed over the rows that share a prefix, through the cache's
indexing) are the single pass's, up to floating-point round-off. The last prompt column stays in the second pass
because its hidden state predicts the first completion token.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

Head = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]
"""`head(model, input_ids=, attention_mask=, labels=, past_key_values=)`: the model's forward through TRL's
fused LM head, returning (log-probabilities, entropies or None) of the next-token labels (-100 = not scored)."""


def distinct_prefixes(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(first, inverse): the index of one row per distinct first-`width`-columns prefix (ids and mask), and for
    every row the position of its prefix in `first`."""
    keys = torch.cat([input_ids[:, :width], attention_mask[:, :width].to(input_ids.dtype)], 1)
    _, inverse = torch.unique(keys, dim=0, return_inverse=True)
    rows = torch.arange(len(inverse), device=inverse.device)
    first = torch.full((int(inverse.max()) + 1,), len(inverse), device=inverse.device, dtype=rows.dtype)
    return first.scatter_reduce(0, inverse, rows, reduce="amin"), inverse


def full_attention_cache(cache: Any) -> bool:
    """Whether every layer of `cache` is a plain full-attention layer: a sliding-window layer keeps only its window
    and a linear-attention layer a state, which the second pass cannot index out and continue as the single pass
    does (those models take TRL's single pass)."""
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


@dataclass
class PrefixSharing:
    """The shared-prefix pass for one model: `full_attention` is learnt from its first prefix cache (None until
    then); once False, every batch takes the single pass without trying again."""

    full_attention: bool | None = None

    def logps(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int,
              head: Head) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """(log-probabilities, entropies) of the last `logits_to_keep` tokens of each row, as TRL's single pass
        computes them, with the prompt columns before the last run once per distinct prefix; None (take the
        single pass, which then costs no more) when no two rows share one, the prompt has a single column, or
        the model's cache is not full-attention."""
        width = input_ids.size(1) - logits_to_keep - 1
        if width < 1 or self.full_attention is False:
            return None
        first, inverse = distinct_prefixes(input_ids, attention_mask, width)
        if len(first) == len(inverse):
            return None
        prefix = model(input_ids=input_ids[first, :width], attention_mask=attention_mask[first, :width],
                       use_cache=True, logits_to_keep=1)
        cache = prefix.past_key_values
        self.full_attention = full_attention_cache(cache)
        if not self.full_attention:
            return None
        cache.reorder_cache(inverse)  # distinct prefixes -> rows (index_select: gradients add up over the rows)
        rest = input_ids[:, width:]
        labels = rest.masked_fill(attention_mask[:, width:] == 0, -100)
        return head(model, input_ids=rest, attention_mask=attention_mask, labels=labels, past_key_values=cache)
