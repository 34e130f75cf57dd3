"""SEPO-GRPO learns: one GRPO step against the exploit pool's `always_defect` moves the scored policy of the
embedded SmolLM2-135M-Instruct (after a 2-step answer-format warm start) towards DEFECT; with learning rate 0
it stays put, and with the advantages' sign flipped it moves towards COOPERATE.

Why DEFECT is the intended direction. Against `always_defect` (exploit pool, per_pool credit, IPD λe = 2.4,
λx = 1.8, scale 1) a round's reward is r_t = -(λe·e_t + λx·x_t): COOPERATE gives e_t = 5 - 0 and x_t = 1/6,
r_t = -12.3; DEFECT gives e_t = 0 and x_t = 2/3, r_t = -1.2. DEFECT is better in every round whatever
happened before, so every per-round advantage favours the rollouts that defected.

What is measured. The exact scored probability of DEFECT (HF backend `score_choices`: teacher-forced
COOPERATE / DEFECT + end-of-turn, normalised) at three fixed probe prompts rendered with the model's chat
template: round 1, and round 2 after (COOPERATE, DEFECT) and after (DEFECT, DEFECT), the only states a
rollout against always_defect visits. Not sampled play.

Why a warm start. The embedded model as shipped does not answer with the action alone: it writes prose,
almost every decision goes through the constrained fallback (parse-failure rate 0.94-1 in the runs measured),
and the fallback's forced action tokens carry no advantage by design. GRPO then only reweights the prose, and
the scored P(DEFECT) moved as a side effect whose sign depended on the seed (no warm start, 16-token turns,
G=8, one step at lr 1e-3, mean move over the probes: seeds 0/1/2 +0.12 / -0.12 / -0.24, flipped sign -0.17 /
+0.08 / +0.22). So the module fixture first runs the project's SFT stage for 2 steps on answer-only rows (each
probe conversation once with COOPERATE and once with DEFECT): the start then answers with the action alone
(no parse failures in the rollouts), and the tokens GRPO weights are the tokens the probes score.

MEASURED (2026-11-30, the project's 2-core CPU machine), P(DEFECT) at (round 1, round 2 after C/D, round 2
after D/D), one GRPO step of G=4 rollouts, 8-token turns, lr 1e-3 (reproduced exactly by every later run here):

    warm start (SFT, 2 steps)      0.7636  0.6750  0.6048   mean 0.6811
    SEPO-GRPO, seed 0              0.9939  0.9997  0.9998   mean move +0.317
    flipped advantages, seed 0     0.0197  0.0069  0.0013   mean move -0.672
    learning rate 0, seed 0        the warm start's numbers, up to 7e-7 of float32 round-off

Seeds 1 and 2 of the GRPO step (measured once, not in the test): SEPO-GRPO +0.279 / +0.290, flipped -0.524 /
-0.449. MARGIN_UP and MARGIN_DOWN are half the smallest move over seeds 0-2. G=8 moved it as far (seed 0:
+0.426 / -0.563, from a warm start trained on eight more rows) at twice the GRPO cost. Wall time of the module:
82 s at load average 1.7 (fixture 27 s, each test 15-16 s); several times longer while other jobs load the CPU.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from envs import make_game
from sepo.generation import Prompt
from sepo.grpo.config import SEPOConfig
from sepo.grpo.trainer import SEPOTrainer

pytestmark = pytest.mark.slow

ACTIONS = ["COOPERATE", "DEFECT"]
NUM_ROUNDS = 2
TURN_TOKENS = 8
SFT_STEPS = 2
GROUP = 4
STEPS = 1
SEED = 0
MARGIN_UP = 0.14
MARGIN_DOWN = 0.22


class NegatedAdvantagesTrainer(SEPOTrainer):
    """Test-only negative control: SEPOTrainer with every per-token advantage's sign flipped."""

    def scored_advantages(self, inputs, output, mode):
        advantages, metrics = super().scored_advantages(inputs, output, mode)
        return -advantages, metrics


def learning_config(tmp_path, learning_rate: float) -> SEPOConfig:
    """2-round IPD, one GRPO step on one group of G rollouts against always_defect, per_pool credit."""
    return SEPOConfig(
        output_dir=str(tmp_path / "run"), use_cpu=True, bf16=False, report_to="none", save_strategy="no",
        disable_tqdm=True, logging_steps=1, seed=SEED, max_steps=STEPS, learning_rate=learning_rate, beta=0.0,
        gradient_checkpointing=False, keep_best_by_safety=False,
        games=["ipd"], game_params={"ipd": {"num_rounds": NUM_ROUNDS}}, pool_mix={"exploit": ["always_defect"]},
        credit="per_pool", num_generations=GROUP, per_device_train_batch_size=GROUP, gradient_accumulation_steps=1,
        max_turn_tokens=TURN_TOKENS, max_completion_length=256,
    )


def conversation(first_round: tuple[str, str] | None = None) -> list[dict[str, str]]:
    """The LLM's (seat 0) prompt in round 1, or in round 2 after the joint first-round action (LLM's, opponent's)
    with the LLM's answer alone as its first turn."""
    game = make_game("ipd", num_rounds=NUM_ROUNDS)
    state = game.new_state(random.Random(0))
    messages = [{"role": "system", "content": game.system_prompt(0)},
                {"role": "user", "content": game.observation(state, 0)}]
    if first_round is None:
        return messages
    game.step(state, dict(enumerate(first_round)))
    return [*messages, {"role": "assistant", "content": first_round[0]},
            {"role": "user", "content": game.observation(state, 0)}]


# Round 1, and round 2 after the LLM played COOPERATE / DEFECT against a defector.
PROBES = [None, ("COOPERATE", "DEFECT"), ("DEFECT", "DEFECT")]


def probe_prompts(tokenizer) -> list[Prompt]:
    """The PROBES conversations rendered as the rollout engine renders a turn's prompt."""
    from sepo.rollout.chat import ChatRenderer

    renderer = ChatRenderer(tokenizer)
    return [Prompt(ids=renderer.prompt_ids(conversation(first))) for first in PROBES]


def p_defect(model: Any, tokenizer: Any, prompts: list[Prompt]) -> list[float]:
    """Exact scored probability of DEFECT at each probe prompt."""
    from sepo.backends.hf import HFBackend

    scores = HFBackend(model, tokenizer).score_choices(prompts, [ACTIONS] * len(prompts))
    return [row[ACTIONS.index("DEFECT")] for row in scores]


def warm_start(out: Path) -> str:
    """The project's SFT stage (TRL SFTTrainer, LoRA, merged) on answer-only rows: each probe conversation
    (the only states a rollout against always_defect visits) completed once with COOPERATE and once with
    DEFECT, so the start answers with the action alone and the rows favour neither action. Returns the
    merged checkpoint."""
    from datasets import Dataset, DatasetDict

    from sepo.sft.data import CHAT_TEMPLATE_KWARGS
    from sepo.sft.train import SEPOSFTConfig, run_sft

    rows = [{"prompt": conversation(first), "completion": [{"role": "assistant", "content": answer}],
             "chat_template_kwargs": dict(CHAT_TEMPLATE_KWARGS)} for first in PROBES for answer in ACTIONS]
    DatasetDict({"train": Dataset.from_list(rows)}).save_to_disk(str(out / "data"))
    return str(run_sft(SEPOSFTConfig(
        output_dir=str(out / "sft"), model_name_or_path="default", dataset_path=str(out / "data"),
        max_steps=SFT_STEPS, per_device_train_batch_size=len(rows), learning_rate=1e-3, lora_dropout=0.0,
        save_strategy="no", eval_strategy="no", report_to="none", use_cpu=True, bf16=False,
        gradient_checkpointing=False, seed=0, disable_tqdm=True, logging_steps=1,
    )))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """(warm-start checkpoint, tokenizer, probe prompts, P(DEFECT) of the warm start at each probe)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = warm_start(tmp_path_factory.mktemp("warm_start"))
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    prompts = probe_prompts(tokenizer)
    return path, tokenizer, prompts, p_defect(AutoModelForCausalLM.from_pretrained(path), tokenizer, prompts)


def train(tmp_path, base, learning_rate: float = 1e-3, trainer_class: type = SEPOTrainer) -> list[float]:
    """P(DEFECT) at each probe after the GRPO steps of one run (LoRA r16 on every linear layer)."""
    from peft import LoraConfig

    path, tokenizer, prompts, _ = base
    trainer = trainer_class(model=path, args=learning_config(tmp_path, learning_rate), processing_class=tokenizer,
                            peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    trainer.train()
    steps = [h for h in trainer.state.log_history if "reward_std" in h]
    assert steps[0]["reward_std"] > 0  # the first group had both actions: there was a signal to follow
    return p_defect(trainer.model, tokenizer, prompts)


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def test_sepo_grpo_moves_the_scored_policy_towards_defect(tmp_path, base):
    before, after = base[3], train(tmp_path, base)
    assert mean(after) - mean(before) >= MARGIN_UP, (before, after)


def test_learning_rate_zero_leaves_the_scored_policy_unchanged(tmp_path, base):
    before, after = base[3], train(tmp_path, base, learning_rate=0.0)
    # float32 round-off between the plain and the PEFT-wrapped model reached 7e-7; one optimizer step at the
    # same lr as the other runs moves the probes by 0.2-0.4
    assert after == pytest.approx(before, abs=1e-4)


def test_flipped_advantages_move_the_scored_policy_towards_cooperate(tmp_path, base):
    before, after = base[3], train(tmp_path, base, trainer_class=NegatedAdvantagesTrainer)
    assert mean(before) - mean(after) >= MARGIN_DOWN, (before, after)
