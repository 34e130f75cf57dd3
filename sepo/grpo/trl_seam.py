"""The one place SEPO reaches into TRL's and vLLM's private or experimental surface (TRL 1.16, vLLM 0.32).

Everything below is a name that neither library promises to keep: an underscore method or attribute, an
experimental argument, an output dict's keys, an engine's internals. SEPO uses each of them only through
this module, and `tests/test_trl_seam.py` pins every one against the installed versions, so an upgrade that
moves one fails there, by name, instead of somewhere inside a training run.

TRL:
    `GRPOTrainer(rollout_func=...)` (experimental) and the keys its result must hold (`ROLLOUT_KEYS`, plus
        `env_mask`, which TRL reads as the tool mask; every other key reaches the reward functions and the
        scored inputs as an extra column);
    `GRPOTrainer._generate_and_score_completions(inputs)` and the keys of its output (`SCORED_KEYS`; the
        advantages are replaced after TRL computed its own: TRL offers no hook between its rewards and its
        advantages);
    `GRPOTrainer._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep,
        batch_size, compute_entropy, compute_aux_loss, **multimodal)` (replaced for text-only batches by the
        shared-prefix pass of `sepo.grpo.shared_prefix` when the config's `share_prompt_prefix` is set), and
        the fused LM head it installs: `model(..., labels=, fused_lm_head=True)` -> `.log_probs`, `.entropy`,
        and the device test inside it, `trl.trainer.utils._use_triton` (`score_labelled_positions_only`);
        `.accelerator.autocast()` around the model's calls; `._prepare_inputs(batch)` (a batch played and
        scored outside `train()`, which reads `.current_gradient_accumulation_steps`);
    `GRPOTrainer._metrics[mode]` (the per-mode lists TRL averages at each log step), `._tokenizer`,
        `.vllm_generation`, `.eos_token_ids`, `.num_generations_eval`;
    `trl.models.utils.unwrap_model_for_generation`, `trl.trainer.utils.nanstd`;
    `VLLMGeneration`: `.mode`, `.llm`, `.generate(prompts, images, num_generations)`, `.generation_kwargs`
        (read by `generate` in server mode; it takes them no other way), `._iter_named_params()`,
        `.sync_weights` (replaced for colocate engines whose weights lost their loaders), `.enable_sleep_mode`,
        `.tensor_parallel_size`.
vLLM:
    `LLM.llm_engine.model_executor.driver_worker.model_runner` (`.model`, `.vllm_config`),
    `vllm.model_executor.model_loader.reload.inplace.reload_weights`, `LLM.reset_prefix_cache`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch
from trl import GRPOTrainer
from trl.models.utils import unwrap_model_for_generation
from trl.trainer.utils import nanstd

from sepo.grpo.shared_prefix import PrefixSharing

__all__ = ["ROLLOUT_KEYS", "SCORED_KEYS", "SeamTrainer", "check_supported", "colocate_llm", "ensure_weight_sync",
           "fused_head", "nanstd", "score_labelled_positions_only", "vllm_engine_parts", "vllm_generate"]

ROLLOUT_KEYS = ("prompt_ids", "completion_ids", "logprobs")  # what TRL requires of rollout_func's result
ENV_MASK = "env_mask"  # rollout_func's optional key: 1 on sampled tokens, 0 on environment tokens
SCORED_KEYS = ("completion_ids", "completion_mask", "advantages")  # read or replaced in the scored batch
TOOL_MASK = "tool_mask"  # in the scored batch when rollout_func returned an env_mask


class SeamTrainer(GRPOTrainer):
    """GRPOTrainer reached through two hooks a subclass implements, and a few accessors:

    `rollout(prompts, mode)`: TRL's rollout_func for this rank's prompts (repeated G times by TRL's sampler),
        returning (columns, metrics): columns with at least `ROLLOUT_KEYS` (token ids, sampling logprobs) and
        optionally `env_mask`, and the rollout's metrics, which the seam logs under `mode`;
    `scored_advantages(inputs, output, mode)`: the (B, T) advantages of a batch TRL has scored (`inputs`: the
        rows with the rollout's extra columns; `output`: TRL's tensors), in place of TRL's own, and their
        metrics, which the seam logs under `mode`.
    """

    def __init__(self, **kwargs: Any) -> None:
        score_labelled_positions_only()
        super().__init__(rollout_func=self._rollout_func, **kwargs)
        self._prefix_sharing = PrefixSharing()

    def _rollout_func(self, prompts: list, trainer: GRPOTrainer) -> dict[str, list]:
        mode = self.metric_mode()
        columns, metrics = self.rollout(prompts, mode)
        self.record_metrics(mode, metrics)
        return columns

    def rollout(self, prompts: list, mode: str) -> tuple[dict[str, list], dict[str, float]]:
        raise NotImplementedError

    def scored_advantages(self, inputs: list[dict[str, Any]], output: dict[str, Any], mode: str
                          ) -> tuple[torch.Tensor, dict[str, float]]:
        raise NotImplementedError

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)  # rollout extras are now in inputs[i]
        mode = self.metric_mode()
        output["advantages"], metrics = self.scored_advantages(inputs, output, mode)
        self.record_metrics(mode, metrics)
        return output

    def _get_per_token_logps_and_entropies(self, model: Any, input_ids: torch.Tensor,
                                           attention_mask: torch.Tensor, logits_to_keep: int,
                                           batch_size: int | None = None, compute_entropy: bool = False,
                                           compute_aux_loss: bool = False, **multimodal: Any) -> tuple:
        """TRL's per-token log-probabilities (and entropies) of the completions, with every distinct prompt run
        once per chunk of `batch_size` rows (`sepo.grpo.shared_prefix`) when `args.share_prompt_prefix` is set;
        TRL's own single pass for a multimodal batch, an MoE aux loss, or a chunk whose rows share no prompt."""
        plain = (not getattr(self.args, "share_prompt_prefix", False) or compute_aux_loss
                 or any(value is not None for value in multimodal.values()))
        if plain:
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **multimodal)
        batch_size = batch_size or input_ids.size(0)
        logps, entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):
            ids, mask = input_ids[start:start + batch_size], attention_mask[start:start + batch_size]
            with self.accelerator.autocast():
                shared = self._prefix_sharing.logps(model, ids, mask, logits_to_keep, fused_head)
            if shared is None:
                lp, ent, _ = super()._get_per_token_logps_and_entropies(
                    model, ids, mask, logits_to_keep, compute_entropy=compute_entropy)
            else:
                lp, ent = shared
            logps.append(lp[:, -logits_to_keep:])
            if compute_entropy:
                entropies.append(ent[:, -logits_to_keep:])
        return torch.cat(logps), (torch.cat(entropies) if compute_entropy else None), None

    def scored_batch(self) -> dict[str, Any]:
        """One training batch played and scored as a training step does it (TRL's `_prepare_inputs` on the train
        dataloader's first batch), outside `train()`: what a measurement of the loss alone runs on."""
        self.current_gradient_accumulation_steps = self.args.gradient_accumulation_steps  # set by train()'s loop
        return self._prepare_inputs(next(iter(self.get_train_dataloader())))

    def metric_mode(self) -> str:
        """TRL's metric mode of the current batch: "train" while the model trains, else "eval"."""
        return "train" if self.model.training else "eval"

    def record_metrics(self, mode: str, metrics: dict[str, float]) -> None:
        """Append each metric to TRL's per-mode lists (averaged and logged by TRL at each log step)."""
        for key, value in metrics.items():
            self._metrics[mode][key].append(value)

    def text_tokenizer(self) -> Any:
        """The tokenizer TRL encodes with (the text tokenizer of a processor)."""
        return self._tokenizer

    def vllm_engine(self) -> Any:
        """TRL's `VLLMGeneration` (use_vllm: colocate engine or server client)."""
        return self.vllm_generation

    def stop_token_ids(self) -> set[int]:
        """The ids TRL treats as the end of a completion (anything else at the end counts as truncated)."""
        return set(self.eos_token_ids)

    def group_size(self, mode: str) -> int:
        """G of the current batch: `num_generations` in training, `num_generations_eval` in evaluation."""
        return self.num_generations if mode == "train" else self.num_generations_eval

    @contextmanager
    def generation_model(self) -> Iterator[Any]:
        """The policy unwrapped for generation (DeepSpeed ZeRO-3 parameters gathered as the config asks)."""
        with unwrap_model_for_generation(self.model_wrapped, self.accelerator,
                                         gather_deepspeed3_params=self.args.ds3_gather_for_generation) as model:
            yield model

    @contextmanager
    def engine_parts(self, kind: str) -> Iterator[dict[str, Any]]:
        """What backend `kind` (`sepo.backends.trainer_engine`) wraps of this trainer while a rollout lasts: the
        text tokenizer, and TRL's vLLM engine (`trl_vllm`: `vllm_engine_parts`) or the policy unwrapped for
        generation (`hf`: `model`)."""
        if kind == "trl_vllm":
            yield {"tokenizer": self._tokenizer, **vllm_engine_parts(self.vllm_generation)}
            return
        with self.generation_model() as model:
            yield {"tokenizer": self._tokenizer, "model": model}


def fused_head(model: Any, **inputs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log-probabilities, entropies) of `inputs["labels"]` (-100: not scored) through the fused LM head that
    GRPOTrainer installs on its model (entropies None unless TRL asked its head for them)."""
    outputs = model(**inputs, fused_lm_head=True)
    return outputs.log_probs, outputs.entropy


def score_labelled_positions_only() -> None:
    """Make TRL's fused LM head project only the positions it scores on a CPU too (idempotent, process-wide).

    The head (`add_fused_lm_head`, TRL 1.16) projects only the positions whose label is not -100 where Triton
    runs, and every position elsewhere, masking afterwards, to keep tile shapes fixed for compilers (Neuron).
    On a CPU that runs the whole vocabulary at every prompt and padding position: an answer-only SFT step of
    a compact game's warm start (48 rows of ~67 tokens, ~3 scored each) spent about 25 of its ~60 s there.
    The labelled-only path is the same per-position computation on fewer rows, with zeros where nothing is
    scored, as the full path returns. The choice is `trl.trainer.utils._use_triton(device)`, looked up when the
    head runs; the kernels inside keep their own test, so a CPU still runs PyTorch's tiles."""
    # deferred: trl.trainer.utils is loaded with the trainers; this is called where one is built
    import trl.trainer.utils as trl_utils

    if getattr(trl_utils._use_triton, "sepo_labelled_only", False):
        return
    triton = trl_utils._use_triton

    def labelled_only(device: torch.device) -> bool:
        return device.type == "cpu" or triton(device)

    labelled_only.sepo_labelled_only = True
    labelled_only.sepo_triton = triton  # TRL's own test, for a caller that needs the unpatched head
    trl_utils._use_triton = labelled_only


# --- TRL's VLLMGeneration ------------------------------------------------------------------------------
def check_supported(vllm_generation: Any) -> None:
    """Raise a clear error for TRL vLLM settings the SEPO rollout does not support."""
    if getattr(vllm_generation, "enable_sleep_mode", False):
        raise ValueError("vllm_enable_sleep_mode is not supported by SEPO rollouts; set it to false")
    if vllm_generation.mode == "colocate" and getattr(vllm_generation, "tensor_parallel_size", 1) > 1:
        raise ValueError("SEPO rollouts in colocate mode need vllm_tensor_parallel_size=1 (use server mode for TP)")


def vllm_engine_parts(vllm_generation: Any) -> dict[str, Any]:
    """What `sepo.backends.trl_vllm.TRLVLLMBackend` drives of TRL's `VLLMGeneration`: the colocate `llm` (None in
    server mode) and `collective`, one `generate` call with extra generation kwargs (`vllm_generate`)."""
    return {"llm": colocate_llm(vllm_generation), "collective": partial(vllm_generate, vllm_generation)}


def colocate_llm(vllm_generation: Any) -> Any:
    """The rank's own `vllm.LLM` in colocate mode; None in server mode."""
    return vllm_generation.llm if vllm_generation.mode == "colocate" else None


def vllm_generate(vllm_generation: Any, prompts: list[list[int]], generation_kwargs: dict[str, Any]
                  ) -> tuple[list[list[int]], list[list[list[float]]]]:
    """One `VLLMGeneration.generate` call (a collective in server mode) for token-id prompts, with
    `generation_kwargs` on top of TRL's for this call only; returns (completion ids, logprobs per token).
    `generate` reads them only from the `generation_kwargs` attribute, so they are set around the call and
    restored after it, here and nowhere else."""
    saved = vllm_generation.generation_kwargs
    vllm_generation.generation_kwargs = {**saved, **generation_kwargs}
    try:
        _, completions, logprobs, _ = vllm_generation.generate(prompts=prompts, images=None, num_generations=1)
    finally:
        vllm_generation.generation_kwargs = saved
    return completions, logprobs


def ensure_weight_sync(vllm_generation: Any) -> bool:
    """Make colocate weight sync work where the engine's parameters lost their weight loaders after loading
    (vLLM CPU kernels repack them; TRL 1.16's per-parameter `load_weights` then fails): push the (PEFT-merged)
    weights through vLLM's in-place `reload_weights` instead, which restores the loaders, loads and
    re-processes. Returns True when the replacement was installed; TRL's own sync is kept otherwise."""
    if vllm_generation.mode != "colocate":
        return False
    runner = vllm_generation.llm.llm_engine.model_executor.driver_worker.model_runner
    if all(hasattr(p, "weight_loader") for p in runner.model.parameters()):
        return False
    # deferred: vllm is the optional [gpu] extra (this module is imported by every trainer, vLLM or not); only a
    # colocate engine whose parameters lost their weight loaders reaches this line
    from vllm.model_executor.model_loader.reload.inplace import reload_weights

    def sync_weights() -> None:
        reload_weights(runner.vllm_config, runner.model, vllm_generation._iter_named_params(), None,
                       is_checkpoint_format=True)
        vllm_generation.llm.reset_prefix_cache()

    vllm_generation.sync_weights = sync_weights
    return True
