"""The cache layers the prefix cache builds for a call, one per decoder layer, by the layer's kind.

Three kinds are reused across rounds (`sepo.backends.prefix_cache`):

- full attention: `PreallocatedLayer`, every position kept;
- sliding-window attention (Gemma 4): `SlidingPreallocatedLayer`, also every position kept. The model builds
  the sliding layers' attention mask from its config's window, so each query still sees only its window (as
  with transformers' `DynamicSlidingWindowLayer`, which drops what fell out of it); keeping the rest costs
  memory but lets a later call lay each row out afresh, which a window counted in cache columns needs;
- linear attention (Qwen 3.5's gated delta net): transformers' `LinearAttentionLayer`, a convolution state and
  a recurrent state per row, no positions. Such a state cannot be cut back: it is copied at the end of the
  prompt (`PromptEndSnapshot`) and a later call continues it only from there.

Any other kind (chunked attention, several states per layer, layers mixing both) is left to `generate`; which
kinds a model's cache has, and whether a filled layer can be stored, the prefix cache decides (`layer_kinds`,
`kind_of`).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, LogitsProcessor
from transformers.cache_utils import DynamicLayer, LinearAttentionLayer


class PreallocatedLayer(DynamicLayer):
    """A full-attention cache layer with its room reserved up front.

    `DynamicLayer` appends with `torch.cat`, copying the whole cache at every decode step (quadratic in the
    context length); this layer writes into a buffer sized for the call (prompt + max_new_tokens) and exposes
    the filled part as a view. If a call outgrows it, the buffer doubles.
    """

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity, self.filled = capacity, 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n = key_states.shape[-2]
        if not self.is_initialized:
            self.dtype, self.device, self.is_initialized = key_states.dtype, key_states.device, True
            self._k = key_states.new_empty((*key_states.shape[:2], max(self.capacity, n), key_states.shape[3]))
            self._v = value_states.new_empty((*value_states.shape[:2], self._k.shape[2], value_states.shape[3]))
        if self.filled + n > self._k.shape[2]:
            room = max(2 * self._k.shape[2], self.filled + n)
            self._k, self._v = (self._grown(buf, room) for buf in (self._k, self._v))
        self._k[:, :, self.filled : self.filled + n] = key_states
        self._v[:, :, self.filled : self.filled + n] = value_states
        self.filled += n
        self.keys, self.values = self._k[:, :, : self.filled], self._v[:, :, : self.filled]
        return self.keys, self.values

    def _grown(self, buf: torch.Tensor, room: int) -> torch.Tensor:
        """`buf` with its filled part kept and `room` positions in all."""
        grown = buf.new_empty((*buf.shape[:2], room, buf.shape[3]))
        grown[:, :, : self.filled] = buf[:, :, : self.filled]
        return grown


class SlidingPreallocatedLayer(PreallocatedLayer):
    """A sliding-window layer that keeps every position (the mask applies the window; see the module doc)."""

    is_sliding = True


def linear_layer(conv: torch.Tensor, recurrent: torch.Tensor) -> LinearAttentionLayer:
    """A linear-attention cache layer continuing from the given states (copies: the model updates in place)."""
    layer = LinearAttentionLayer()
    layer.conv_states[0], layer.recurrent_states[0] = conv.clone(), recurrent.clone()
    layer.conv_kernel_size[0] = conv.shape[-1]
    layer.device, layer.dtype = conv.device, conv.dtype
    layer.is_conv_states_initialized[0] = layer.is_recurrent_states_initialized[0] = True
    layer.has_previous_state[0] = True
    return layer


def build_cache(kinds: list[str], capacity: int, states: list[tuple[torch.Tensor, torch.Tensor]] = ()) -> DynamicCache:
    """A cache of `kinds` layers, attention ones preallocated for `capacity` positions; with `states`, each layer
    holds its entry: (keys, values) for attention, (convolution, recurrent) state for linear attention."""
    cache = DynamicCache()
    for i, kind in enumerate(kinds):
        if kind == "linear":
            layer = linear_layer(*states[i]) if states else LinearAttentionLayer()
        else:
            layer = (SlidingPreallocatedLayer if kind == "sliding" else PreallocatedLayer)(capacity)
            if states:
                layer.update(*states[i])
        cache.layers.append(layer)
    return cache


def linear_states(cache) -> list[tuple[torch.Tensor, torch.Tensor] | None]:
    """Copies of each linear-attention layer's (convolution, recurrent) state; None for other layers."""
    return [
        (layer.conv_states[0].clone(), layer.recurrent_states[0].clone())
        if isinstance(layer, LinearAttentionLayer) else None
        for layer in cache.layers
    ]


class PromptEndSnapshot(LogitsProcessor):
    """Copies the linear-attention states of `cache` when `generate` first asks for logits: right after the
    prompt's forward pass, before any sampled token is fed. A row's turn, and whatever `generate` keeps feeding
    it after its stop token, are then re-fed in the next round instead of cut back out of a recurrent state."""

    def __init__(self, cache):
        self.cache, self.states = cache, None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.states is None:
            self.states = linear_states(self.cache)
        return scores
