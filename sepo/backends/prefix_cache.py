"""Reuse of the key/value cache across the rounds of lock-step rollouts (HF backend).

Each round's prompt is the previous round's prompt, the model's turn and the next environment message, so
re-encoding the whole conversation every round (what a plain `generate` call does, and what the method's
reference code did) makes prefill cost grow with the square of the episode length. `PrefixCache` keeps the
key/value tensors of the last `generate` call together with, for every row, the token ids those positions
hold; the next call that extends every one of those rows by new tokens feeds only the new tokens.

Planning: rows are stored by the key of their prompt (`Prompt.key`: the rollout engine's episode; without
one, the prompt's position in the call), and a later prompt continues the row stored under its own key when
that row's prompt is a prefix of it, reusing as far as the row's tokens agree with it. One lookup and one
comparison per prompt: planning is linear in the batch (searching every stored row for the longest shared
prefix grew with its square: `python -m benchmarks.rollout --planning` times both).

Layout: each call lays its rows out afresh (`plan`): a row's reused positions are gathered to end together at
the cache's last column, left padding before them, and the rows' uncached tokens follow, left-padded to the
longest; position ids follow the attention mask's cumulative sum, as `generate` computes them for left-padded
batches. What a later call does not continue (tokens generated after a row's stop token, a turn the rollout
dropped) is left out. Per layer kind (`sepo.backends.cache_layers`):
- full and sliding-window attention: a shorter row feeds its last cached tokens again in place of padding, so
  no row has a padding gap after its first token and a sliding window, counted in cache columns, covers the
  tokens it covers in a fresh call (the sliding layers keep every position for this);
- linear attention (Qwen 3.5): the recurrent state is copied at the end of each prompt and only the prompt is
  stored (the next call feeds the turn again); padding after a row's cached state would move that state on,
  so `feed_ahead` feeds those columns before `generate` and puts the waiting rows' states back.
Other layer kinds take the plain path, and the refusal is counted (`PrefixCache.counts`: `refused_cache_type`).

Budget: unless `max_bytes` is given, a call's cache is kept only if it fits in `MEMORY_FRACTION` (half) of
the memory free on its device at the time it is stored: on CUDA, `torch.cuda.mem_get_info` plus the blocks
PyTorch's allocator holds unused, plus the cache being replaced; on the CPU, the available physical
memory. Half, because the next call copies the rows it reuses into a fresh cache with room for its new
tokens, so both are alive together. Every refusal is counted (`refused`, with the reason), so a run that
silently re-encodes shows up in the counts the trainer logs (`sepo/prefix_cache/*`) and the GPU check
reports.
"""

from __future__ import annotations

import os
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.cache_utils import DynamicLayer, LinearAttentionLayer, get_layer_types_and_kwargs

from sepo.backends.cache_layers import PreallocatedLayer, PromptEndSnapshot, build_cache
from sepo.backends.shared_rows import left_padded, positions_of

MEMORY_FRACTION = 0.5  # of the device's free memory a stored cache may take (see the module doc)
COUNTS = ("hits", "misses", "stored", "refused", "refused_cache_type", "refused_over_budget")
KINDS = {"full_attention": "full", "sliding_attention": "sliding", "linear_attention": "linear"}


@dataclass
class CachedCall:
    """Everything one `generate` call of the HF backend is given (`plan_call`): the tokens it feeds, their mask,
    the cache they continue, and what storing its cache afterwards needs."""

    input_ids: torch.Tensor  # (batch, fed width), left-padded: the tokens fed this call (none of them cached)
    attention_mask: torch.Tensor  # (batch, cache width + fed width)
    past_key_values: Any  # a DynamicCache holding the reused rows (or empty); None: `generate` builds its own
    cache_valid: torch.Tensor  # (batch, cache width) bool: the reused positions
    reused: list[int] = field(default_factory=list)  # per row: the prompt's tokens its stored row held
    holes: list[int] | None = None  # linear attention: per row, the padding columns its fed tokens follow
    start_states: list[tuple[torch.Tensor, torch.Tensor] | None] = field(default_factory=list)  # their states
    generate_from: int = 0  # the first column of `input_ids` left to `generate` (`feed_ahead` fed the ones before)
    prompt_end: PromptEndSnapshot | None = None  # linear attention: copies the states at the prompt's end


def layer_kinds(model: Any) -> list[str] | None:
    """The kind of each of `model`'s cache layers ("full", "sliding", "linear"), or None when one is of a kind
    the prefix cache does not reuse. Layers that share another layer's keys (Gemma 4) have no cache layer."""
    config = model.config.get_text_config(decoder=True)
    types, kwargs = get_layer_types_and_kwargs(config)
    if kwargs.get("number_of_states", 1) != 1 or any(t not in KINDS for t in types):
        return None
    return [KINDS[t] for t in types]


def kind_of(layer: Any) -> str | None:
    """The kind of a cache layer `generate` filled, or None for one the prefix cache cannot store."""
    if isinstance(layer, PreallocatedLayer):
        return "sliding" if layer.is_sliding else "full"
    if type(layer) is DynamicLayer:
        return "full"
    if type(layer) is LinearAttentionLayer and layer.number_of_states == 1:
        return "linear"
    return None


def decoding_module(model: Any) -> Any:
    """The module whose forward `generate` runs at every step of `model`: a PEFT model generates through its base
    model (LoRA layers included), not through its own forward, which accelerate may have wrapped in autocast
    (mixed precision). A pass that fills a cache `generate` then continues runs this module, so the cache holds
    what `generate`'s own steps would have put there."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _feed(model: Any, call: CachedCall, begin: int, end: int) -> None:
    """Run `model` (`decoding_module`) on columns `begin`..`end` of the call's fed tokens, filling its cache."""
    width = call.cache_valid.shape[1]
    positions = positions_of(call.attention_mask)
    decoding_module(model)(
        input_ids=call.input_ids[:, begin:end], attention_mask=call.attention_mask[:, : width + end],
        position_ids=positions[:, width + begin : width + end], past_key_values=call.past_key_values,
        use_cache=True, logits_to_keep=1)


def feed_ahead(model: Any, call: CachedCall) -> int:
    """Feed the columns of `call` in which some row still waits in its padding, and return the first column left
    for `generate` (every row real from there on).

    A recurrent state fed a padding column moves on (the convolution shifts, the state decays), so padding may
    only precede a row's first token. Between the cached prefix and a shorter row's new tokens it cannot be
    avoided in a batch, so the columns up to the last row's start are fed here in segments, one per distinct
    start, and after each segment the rows still waiting get their linear-attention states back. Attention
    layers mask those columns. Without linear layers (`holes` None) there is nothing to do."""
    if call.holes is None:
        return 0
    starts = sorted(set(call.holes))
    holes = torch.tensor(call.holes, device=call.input_ids.device)
    for begin, end in zip(starts, starts[1:]):
        _feed(model, call, begin, end)
        waiting = holes >= end
        for layer, start in zip(call.past_key_values.layers, call.start_states):
            if start is not None:
                layer.conv_states[0][waiting] = start[0][waiting]
                layer.recurrent_states[0][waiting] = start[1][waiting]
    return starts[-1]


def plan_call(model: Any, session: PrefixCache | None, prompts: list[list[int]], keys: list[Hashable] | None,
              pad_id: int, device: torch.device, max_new_tokens: int) -> CachedCall:
    """The `generate` call for `prompts` (`keys`: their episodes, or None for their positions), everything it is
    given: in a session, their stored rows reused where they extend them, rows with the same prompt prefilled
    once (`share_prefill`), and whatever precedes the columns `generate` takes fed (`feed_ahead`), on a cache of
    the model's layers (`layer_kinds`); else, or when the model's cache cannot be reused, the prompts left-padded
    on no cache (`generate` builds its own). Runs the model: call this without gradients."""
    kinds = layer_kinds(model)
    call = None
    if session is not None:
        firsts, inverse = distinct_rows(prompts)
        if len(firsts) == len(prompts) or kinds is None:
            call = session.plan(prompts, pad_id, device, max_new_tokens, keys)
        else:
            reps = [prompts[i] for i in firsts]
            call = session.plan(reps, pad_id, device, max_new_tokens,
                                None if keys is None else [keys[i] for i in firsts])
            if call is None:
                call = lay_out(reps, pad_id, device, max_new_tokens, kinds)
            call = share_prefill(model, call, inverse, kinds, pad_id, max_new_tokens)
    if call is None:
        call = lay_out(prompts, pad_id, device, max_new_tokens, kinds if session is not None else None)
    call.generate_from = feed_ahead(model, call)
    if call.past_key_values is not None and "linear" in (kinds or ()):
        call.prompt_end = PromptEndSnapshot(call.past_key_values)
    return call


def distinct_rows(prompts: list[list[int]]) -> tuple[list[int], list[int]]:
    """(firsts, inverse): the position of each distinct prompt's first occurrence, and for every prompt the index
    of its distinct prompt in `firsts`."""
    index: dict[tuple[int, ...], int] = {}
    firsts, inverse = [], []
    for row, ids in enumerate(prompts):
        if tuple(ids) not in index:
            index[tuple(ids)] = len(firsts)
            firsts.append(row)
        inverse.append(index[tuple(ids)])
    return firsts, inverse


def lay_out(fed: list[list[int]], pad_id: int, device: torch.device, max_new_tokens: int, kinds: list[str] | None,
            cache_valid: torch.Tensor | None = None, states: list[tuple[torch.Tensor, torch.Tensor]] = (),
            reused: list[int] | None = None, holes: list[int] | None = None,
            start_states: list[tuple[torch.Tensor, torch.Tensor] | None] = ()) -> CachedCall:
    """The call feeding the token rows `fed`, left-padded, after the cached positions `cache_valid` marks (rows,
    cache width; None: nothing cached), on a cache of `kinds` layers with room for them and `max_new_tokens`,
    holding `states` (none: empty; `kinds` None: no cache, `generate` builds its own). `reused` (default: none),
    `holes` and `start_states`: as `CachedCall` holds them."""
    if cache_valid is None:
        cache_valid = torch.zeros(len(fed), 0, dtype=torch.bool, device=device)
    input_ids, fed_mask = left_padded(fed, pad_id, device)
    capacity = cache_valid.shape[1] + input_ids.shape[1] + max_new_tokens
    return CachedCall(
        input_ids=input_ids,
        attention_mask=torch.cat([cache_valid.to(device).long(), fed_mask], 1),
        past_key_values=build_cache(kinds, capacity, states) if kinds is not None else None,
        cache_valid=cache_valid,
        reused=[0] * len(fed) if reused is None else reused,
        holes=holes,
        start_states=list(start_states),
    )


def share_prefill(model: Any, call: CachedCall, inverse: list[int], kinds: list[str], pad_id: int,
                  max_new_tokens: int) -> CachedCall:
    """`call`, planned for one row per distinct prompt on a cache of `kinds` layers, with every fed column but the
    last run here once per distinct prompt and its cache copied out to every row (`inverse[i]`: row i's distinct
    prompt): what `generate` then feeds is each row's last prompt token, from which the rows sample apart.

    Rows with the same prompt have the same states, so this is the prefill `generate` would run on every row,
    run once: the G rollouts of a group start from one prompt, and lock-step rollouts that played alike reach
    the same history again in later rounds."""
    done = feed_ahead(model, call)
    cached, fed = call.cache_valid.shape[1], call.input_ids.shape[1]
    if fed - done > 1:
        _feed(model, call, done, fed - 1)
    rows = torch.tensor(inverse, device=call.input_ids.device)
    layers = call.past_key_values.layers
    states = [(layer.conv_states[0], layer.recurrent_states[0]) if kind == "linear" else (layer.keys, layer.values)
              for kind, layer in zip(kinds, layers)]
    states = [(a.index_select(0, rows.to(a.device)), b.index_select(0, rows.to(b.device))) for a, b in states]
    last = call.input_ids[:, -1].tolist()  # each distinct prompt's last token, fed by `generate`
    return lay_out([[last[i]] for i in inverse], pad_id, call.input_ids.device, max_new_tokens, kinds,
                   cache_valid=call.attention_mask.index_select(0, rows)[:, : cached + fed - 1].bool(),
                   states=states, reused=[call.reused[i] for i in inverse])


def _lcp(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k


def _keys(keys: list[Hashable] | None, n: int) -> list[Hashable]:
    """The prompts' keys: `keys`, or their positions; ValueError for a key given twice in one call."""
    if keys is None:
        return list(range(n))
    if len(set(keys)) != len(keys) or len(keys) != n:
        raise ValueError(f"one distinct key per prompt is needed, got {keys!r} for {n} prompts")
    return keys


def free_memory_bytes(device: torch.device) -> int:
    """Bytes that could still be allocated on `device`: on CUDA the driver's free memory plus what PyTorch's
    caching allocator holds reserved but unused; on the CPU the available physical memory."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def _kv_bytes(kv: list[tuple[torch.Tensor, torch.Tensor]]) -> int:
    """The bytes the key/value tensors keep alive (a preallocated layer's whole buffer, not only its view)."""
    return sum(k.untyped_storage().nbytes() + v.untyped_storage().nbytes() for k, v in kv)


class PrefixCache:
    """Key/value tensors of one batched call plus the token ids each row's valid positions hold.

    max_bytes: a fixed budget for the stored cache; None (the default) sizes it at every store from the
    device's free memory (`memory_fraction` of it, see the module doc). The counts of planned calls (hits,
    misses) and of stores (stored, refused and why) survive refusals, in `counts` (name -> count, `COUNTS`).
    """

    def __init__(self, max_bytes: int | None = None, memory_fraction: float = MEMORY_FRACTION):
        if not 0 < memory_fraction <= 1:
            raise ValueError(f"memory_fraction must be in (0, 1], got {memory_fraction}")
        self.max_bytes, self.memory_fraction = max_bytes, memory_fraction
        self.counts: dict[str, int] = dict.fromkeys(COUNTS, 0)  # hits/misses of planned calls, stores by outcome
        self.last_refusal: str | None = None
        self.clear()

    def clear(self) -> None:
        """Drop the stored cache (the counts stay)."""
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] = []  # per layer: keys, values / convolution, recurrent
        self.kinds: list[str] = []  # per layer: "full", "sliding" or "linear" (`sepo.backends.cache_layers`)
        self.valid: torch.Tensor | None = None  # (rows, width) bool
        self.tokens: list[list[int]] = []  # per row: the ids at its valid positions, in order
        self.prompt_lengths: list[int] = []  # per row: how many of them were its prompt
        self.row_of: dict[Hashable, int] = {}  # prompt key -> row

    def budget(self, device: torch.device) -> int:
        """The bytes a cache stored now may take: `max_bytes`, or `memory_fraction` of what is free on
        `device` counting the cache held now (storing replaces it)."""
        if self.max_bytes is not None:
            return self.max_bytes
        return int(self.memory_fraction * (free_memory_bytes(device) + _kv_bytes(self.kv)))

    def _refuse(self, reason: str, message: str) -> bool:
        self.clear()
        self.counts["refused"] += 1
        self.counts[f"refused_{reason}"] += 1
        self.last_refusal = message
        return False

    # --- planning a call -----------------------------------------------------------------------------
    def _row_for(self, ids: list[int], key: Hashable) -> tuple[int, int] | None:
        """The row stored under `key` and how many of `ids` it holds (< len(ids)), or None when there is no
        such row or its prompt is not a prefix of `ids`."""
        row = self.row_of.get(key)
        if row is None:
            return None
        n = self.prompt_lengths[row]
        k = _lcp(self.tokens[row], ids)
        if n >= len(ids) or k < n:
            return None
        return row, min(k, len(ids) - 1)  # at least one token must be fed to get the next-token logits

    def plan(
        self, prompts: list[list[int]], pad_id: int, device: torch.device, max_new_tokens: int,
        keys: list[Hashable] | None = None,
    ) -> CachedCall | None:
        """A call that reuses stored rows for every prompt, or None when some prompt extends no row.
        `keys[i]`: the key of prompt i (default: its position), matched to the stored rows' (see the module doc)."""
        if not prompts:
            return None
        if not self.kv:  # nothing stored (the session's first call, or the last store was refused)
            self.counts["misses"] += 1
            return None
        keys = _keys(keys, len(prompts))
        matches = [self._row_for(ids, key) for ids, key in zip(prompts, keys)]
        if any(m is None for m in matches):
            self.counts["misses"] += 1
            return None
        rows = [row for row, _ in matches]
        new = [len(ids) - k for ids, (_, k) in zip(prompts, matches)]
        fed_width = max(new)
        recurrent = "linear" in self.kinds
        # re-fed: the last cached tokens a row feeds again in what would be padding (none with linear layers)
        refed = [0 if recurrent else min(k, fed_width - n) for (_, k), n in zip(matches, new)]
        kept = [k - r for (_, k), r in zip(matches, refed)]
        width = max(kept)
        if width == 0:  # every row feeds its whole prompt: nothing to reuse
            self.counts["misses"] += 1
            return None
        self.counts["hits"] += 1
        source = self.valid.device
        columns = torch.zeros(len(prompts), width, dtype=torch.long, device=source)
        valid = torch.zeros(len(prompts), width, dtype=torch.bool, device=source)
        for i, (row, c) in enumerate(zip(rows, kept)):
            columns[i, width - c :] = self.valid[row].nonzero().squeeze(1)[:c]
            valid[i, width - c :] = True
        fed = [ids[c:] for ids, c in zip(prompts, kept)]  # fed_width wide: a longest row feeds no re-fed tail
        picked = torch.tensor(rows, device=self.kv[0][0].device)
        states = [self._gathered(kind, a, b, picked, columns) for kind, (a, b) in zip(self.kinds, self.kv)]
        return lay_out(fed, pad_id, device, max_new_tokens, self.kinds, cache_valid=valid, states=states,
                       reused=[k for _, k in matches], holes=[fed_width - n for n in new] if recurrent else None,
                       start_states=[s if kind == "linear" else None for kind, s in zip(self.kinds, states)])

    @staticmethod
    def _gathered(kind: str, a: torch.Tensor, b: torch.Tensor, rows: torch.Tensor,
                  columns: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A stored layer's tensors for the planned `rows`: a linear layer's states as they are, an attention
        layer's positions rearranged so that each row's kept positions end together at the cache's last column
        (`columns[i]`: the stored column of each planned position of row i)."""
        a, b = a.index_select(0, rows), b.index_select(0, rows)
        if kind == "linear":
            return a, b
        index = columns.to(a.device)[:, None, :, None]
        return (a.gather(2, index.expand(-1, a.shape[1], -1, a.shape[3])),
                b.gather(2, index.expand(-1, b.shape[1], -1, b.shape[3])))

    # --- storing a call ------------------------------------------------------------------------------
    def store(
        self,
        cache: Any,
        prompts: list[list[int]],
        valid_before: torch.Tensor,
        sequences: torch.Tensor,
        attention_mask: torch.Tensor,
        kept: list[int],
        keys: list[Hashable] | None = None,
        prompt_end: list[tuple[torch.Tensor, torch.Tensor] | None] | None = None,
    ) -> bool:
        """Keep the call's cache. `sequences`/`attention_mask` are the fed tokens plus generated tokens and
        the call's mask; `valid_before` (rows, cache width before the call) marks reused positions; `kept[i]`
        is how many generated tokens of row i belong to its turn (up to and including its stop token);
        `keys[i]` is the key row i is stored under (default: its position); `prompt_end`: the linear-attention
        states at the end of the prompt (`cache_layers.PromptEndSnapshot`), needed when the cache has such
        layers: then only the prompt is kept, and the next call feeds the turn again.
        Returns False (stores nothing and counts a refusal) for cache types that cannot be reused or when
        over budget (`budget`)."""
        layers = getattr(cache, "layers", None)
        kinds = [kind_of(layer) for layer in layers or ()]
        if not kinds or None in kinds or ("linear" in kinds and prompt_end is None):
            names = sorted({type(layer).__name__ for layer in layers or ()}) or [type(cache).__name__]
            return self._refuse("cache_type", f"not a cache of reusable layers ({', '.join(names)})")
        fed = attention_mask.shape[1] - valid_before.shape[1]
        prompt_width = attention_mask.shape[1]
        if "linear" in kinds:  # the prompt only: the linear states are the prompt's end
            kv = [prompt_end[i] if kind == "linear" else
                  (layers[i].keys[:, :, :prompt_width], layers[i].values[:, :, :prompt_width])
                  for i, kind in enumerate(kinds)]
            kept = [0] * len(prompts)
        else:
            kv = [(layer.keys, layer.values) for layer in layers]
        size, budget = _kv_bytes(kv), self.budget(kv[0][0].device)
        if size > budget:
            return self._refuse("over_budget", f"{size / 2**30:.2f} GiB over the budget of {budget / 2**30:.2f} GiB")
        width = next(a.shape[2] for kind, (a, _) in zip(kinds, kv) if kind != "linear")
        generated_cols = width - prompt_width  # the last sampled token is never cached
        steps = torch.arange(max(generated_cols, 0), device=attention_mask.device)
        gen_valid = steps.unsqueeze(0) < torch.tensor(kept, device=attention_mask.device).unsqueeze(1)
        valid = torch.cat(
            [valid_before.to(attention_mask.device), attention_mask[:, -fed:].bool(), gen_valid], 1
        )
        gen = sequences[:, fed:].tolist()
        self.kv, self.kinds, self.valid = kv, kinds, valid[:, :width]
        self.tokens = [list(p) + g[: min(n, generated_cols)] for p, g, n in zip(prompts, gen, kept)]
        self.prompt_lengths = [len(p) for p in prompts]
        self.row_of = {key: row for row, key in enumerate(_keys(keys, len(prompts)))}
        self.counts["stored"] += 1
        return True
