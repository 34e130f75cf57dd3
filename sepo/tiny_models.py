"""Tiny random-weight models of the real architectures (Llama, Qwen 3.5, Gemma 4) with a locally trained
byte-level BPE tokenizer and a chat template shaped like the real one.

They exist so tests, benchmarks and CI can exercise every code path without the Hub: a model builds in
well under a second, and `head_dim >= 32` keeps them loadable by vLLM's CPU attention. `shape="4b"` builds
a random-weight model with the real 4B-class dimensions for GPU throughput checks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Literal

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    Gemma4TextConfig,
    GenerationConfig,
    LlamaConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen3_5TextConfig,
)

from envs.words import GAME_WORDS
from sepo.checks import check_choice, check_output_dir
from sepo.recipes import RecipeParser

Arch = Literal["llama", "qwen3_5", "gemma4"]
ARCHS: tuple[str, ...] = ("llama", "qwen3_5", "gemma4")
# The vocabularies of the real models (transformers' Qwen3_5 and Gemma 4 configs), for `vocab_size=` when a
# 4B-shaped build should carry the real embedding, output projection and log-softmax width.
REAL_VOCAB: dict[str, int] = {"qwen3_5": 248_320, "gemma4": 262_144}

# Special tokens per template family. The end-of-turn token is the model's EOS, as in the real models.
_CHATML_SPECIALS = ["<unk>", "<s>", "<pad>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
_GEMMA_SPECIALS = ["<unk>", "<bos>", "<pad>", "<|turn>", "<turn|>", "<|think|>", "<|channel>", "<channel|>", '<|"|>']

# Llama tiny model: plain ChatML, as used by the embedded SmolLM2. Qwen 3.5 and Gemma 4 use the real templates
# TRL bundles (Qwen 3.5-4B's thinking template, honouring enable_thinking; Gemma 4's canonical template).
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _template(arch: str) -> str:
    # deferred: trl (which brings peft, accelerate and datasets) adds ~1 s to this module's import; only the
    # Qwen 3.5 and Gemma 4 templates come from it, the Llama tiny model and most tests need none of it
    from trl import chat_template_utils

    if arch == "qwen3_5":
        return chat_template_utils.qwen3_5_think_chat_template
    if arch == "gemma4":
        return chat_template_utils.gemma4_v5_chat_template
    return CHATML_TEMPLATE


@lru_cache(maxsize=4)
def _trained_tokenizer(specials: tuple[str, ...]) -> str:
    """Train a 512-token byte-level BPE on a few KB of game text; returns its JSON (cached per process)."""
    rng = random.Random(0)
    corpus = [" ".join(rng.choice(GAME_WORDS) for _ in range(24)) for _ in range(300)]
    corpus += [str(i) for i in range(20)] + ["[1, 2, 3]", "[0, 4, 2]", "Final action:", "Round 3 of 8."]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    return tok.to_str()


def build_tokenizer(arch: Arch = "llama") -> PreTrainedTokenizerFast:
    """A tokenizer with the chat template and end-of-turn token of `arch`'s family."""
    if arch == "gemma4":
        specials = _GEMMA_SPECIALS
        names = dict(unk_token="<unk>", bos_token="<bos>", eos_token="<turn|>", pad_token="<pad>")
    else:
        specials = _CHATML_SPECIALS
        names = dict(unk_token="<unk>", bos_token="<s>", eos_token="<|im_end|>", pad_token="<pad>")
    template = _template(arch)
    tok = Tokenizer.from_str(_trained_tokenizer(tuple(specials)))
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, chat_template=template, **names)
    hf.padding_side = "left"
    return hf


SHAPES: tuple[str, ...] = ("tiny", "organism", "4b")
# the model organism (configs/experiments/*_organism): a small Llama that trains in well under a second
ORGANISM_DIMS = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=4, head_dim=32)


def _config(arch: Arch, vocab: int, ids: dict[str, int], shape: str):
    if shape not in SHAPES:
        raise ValueError(f"unknown tiny model shape {shape!r}; choose one of {', '.join(SHAPES)}")
    if shape == "organism" and arch != "llama":
        raise ValueError("the organism shape is a Llama; use arch='llama'")
    big = shape == "4b"
    if arch == "llama":
        dims = (
            dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                 num_key_value_heads=8, head_dim=128)
            if big
            else ORGANISM_DIMS if shape == "organism"
            else dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, head_dim=32)
        )
        return LlamaConfig(vocab_size=vocab, max_position_embeddings=4096, tie_word_embeddings=False,
                           rms_norm_eps=1e-6, **dims, **ids)
    if arch == "qwen3_5":
        dims = (
            dict(hidden_size=2560, intermediate_size=9216, num_hidden_layers=32, num_attention_heads=16,
                 num_key_value_heads=4, head_dim=256, linear_num_value_heads=32, linear_num_key_heads=16,
                 linear_key_head_dim=128, linear_value_head_dim=128)
            if big
            else dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=32, linear_num_value_heads=2, linear_num_key_heads=1,
                      linear_key_head_dim=32, linear_value_head_dim=32)
        )
        return Qwen3_5TextConfig(vocab_size=vocab, max_position_embeddings=4096, tie_word_embeddings=False,
                                 **dims, **ids)
    if arch == "gemma4":
        dims = (
            dict(hidden_size=2560, intermediate_size=10240, num_hidden_layers=42, num_attention_heads=8,
                 num_key_value_heads=2, head_dim=256, global_head_dim=512, hidden_size_per_layer_input=256,
                 sliding_window=512, num_kv_shared_layers=18)
            if big
            else dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=32, global_head_dim=32, hidden_size_per_layer_input=8,
                      sliding_window=16, num_kv_shared_layers=0)
        )
        return Gemma4TextConfig(vocab_size=vocab, vocab_size_per_layer_input=vocab,
                                max_position_embeddings=4096, final_logit_softcapping=30.0, **dims, **ids)
    raise ValueError(f"unknown tiny architecture {arch!r}; choose one of {ARCHS}")


def build_tiny_model(
    arch: Arch = "llama", seed: int = 0, shape: str = "tiny", dtype: torch.dtype = torch.float32,
    vocab_size: int | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """A random-weight causal LM of `arch` (text-only class) and its tokenizer.

    shape="tiny": hidden 64, 2-4 layers (tests); shape="organism": a Llama of hidden 128 and 2 layers (the
    model organism); shape="4b": the real 4B-class dimensions (GPU checks).
    vocab_size: the model's vocabulary (embedding rows, output projection, log-softmax width), e.g.
    `REAL_VOCAB["qwen3_5"]`; default the tokenizer's 512 tokens. The tokenizer stays the small one: ids past
    it decode to nothing, which a random-weight model's turns are anyway.
    """
    tok = build_tokenizer(arch)
    ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    if vocab_size is not None and vocab_size < len(tok):
        raise ValueError(f"vocab_size {vocab_size} is smaller than the tokenizer's {len(tok)} tokens")
    config = _config(arch, vocab_size or len(tok), ids, shape)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config = GenerationConfig(**ids)
    return model, tok


def save_tiny_model(path: str | Path, arch: Arch = "llama", seed: int = 0, dtype: torch.dtype = torch.float32,
                    shape: str = "tiny") -> Path:
    """Build and save a tiny model + tokenizer to `path` (loadable by transformers and vLLM)."""
    path = Path(path)
    model, tok = build_tiny_model(arch, seed=seed, shape=shape, dtype=dtype)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@dataclass
class TinyModelConfig:
    """The keys of `sepo tiny-model` (command line or `--config` recipe); the checks run when it is built."""

    out: str = field(metadata={"help": "where the model and tokenizer are saved"})
    arch: str = field(default="llama", metadata={"help": "architecture and chat template", "choices": ARCHS})
    seed: int = field(default=0, metadata={"help": "seed of the random weights"})

    def __post_init__(self) -> None:
        check_choice("arch", self.arch, ARCHS)  # a recipe's value (argparse checks the flag's)
        check_output_dir("--out", self.out)


def parser() -> RecipeParser:
    """The command line of `sepo tiny-model`."""
    summary = " ".join((main.__doc__ or "").split("\n\n")[0].split())  # the docstring's whole first paragraph
    return RecipeParser((TinyModelConfig,), prog="sepo tiny-model", description=summary.split("`: ", 1)[-1])


def main(argv: list[str] | None = None) -> int:
    """`sepo tiny-model --out DIR [--arch llama|qwen3_5|gemma4] [--seed N]`: a tiny random-weight model for a
    smoke test of a setup (every stage runs on it in seconds; its play is noise)."""
    (args,) = parser().parse(argv)
    path = save_tiny_model(args.out, args.arch, seed=args.seed)
    config = AutoConfig.from_pretrained(path)
    print(f"saved a tiny random-weight {args.arch} model ({config.model_type}, {config.num_hidden_layers} layers) "
          f"to {path}; smoke-test with e.g. "
          f"sepo train --config configs/sepo/smoke_tiny.yaml --model_name_or_path {path}")
    return 0
