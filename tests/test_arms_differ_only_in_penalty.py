"""The credit arms differ only in the penalty path (issue: SEPO's effect, measured).

- Paired deals: reward_only and per_pool from the same model and seed deal their training groups the same
  cards and positions at every step (group seeds are keyed by pool, opponent, step and index, not by a
  group's position in the step's block, which per_pool's extra penalty groups shift).
- The payoff gradient does not depend on how many penalty groups an arm adds: on one batch, the training
  groups' part of per_pool's loss gradient (TRL's real loss, per_pool's normaliser) equals reward_only's
  gradient on the same training groups, to float error (`loss_scale: training_tokens`); with TRL's plain
  normaliser (`all_tokens`) it is smaller by the share of training tokens.
- The exact Kuhn evaluation scores each information set on the prompt training shows for it.
"""

from __future__ import annotations

import random

import pytest
import torch

from sepo.generation import Generation, GenerationBackend
from sepo.grpo.config import SEPOConfig
from sepo.grpo.trainer import SEPOTrainer
from sepo.tiny_models import build_tiny_model

ORGANISM_GAME = {"kuhn": {"num_hands": 1, "first_mover": "random", "prompt_style": "compact"}}
TRAINING = 3  # groups: the default Kuhn training pool
PER_POOL = 6  # + 2 exploiters + 1 collusive partner


def config(tmp_path, credit: str, steps: int, G: int, **extra) -> SEPOConfig:
    groups = TRAINING if credit == "reward_only" else PER_POOL
    mix = {"training": "all"} if credit == "reward_only" else {"training": "all", "exploit": "all", "collusive": "all"}
    keys = dict(learning_rate=1e-3) | extra
    return SEPOConfig(
        output_dir=str(tmp_path / credit), games=["kuhn"], game_params=ORGANISM_GAME, credit=credit, pool_mix=mix,
        num_generations=G, per_device_train_batch_size=groups * G, gradient_accumulation_steps=1,
        temperature=1.0, top_p=1.0, beta=0.0, max_turn_tokens=4, max_completion_length=96,
        use_cpu=True, bf16=False, max_steps=steps, save_strategy="no", keep_best_by_safety=False,
        report_to="none", logging_steps=1, disable_tqdm=True, seed=7, **keys)


def training_deals(tmp_path, credit: str, steps: int) -> list[list[tuple]]:
    """Per step, the (opponent, seed, cards, first mover) of every training-pool episode, in group order."""
    model, tok = build_tiny_model("llama", seed=0)
    seen: list[list[tuple]] = []

    def hook(trainer, results):
        seen.append([(r.spec.opponent, r.spec.seed, tuple(r.rounds[0].record["cards"]),
                      r.rounds[0].record["first_mover"]) for r, _, _ in results if r.spec.pool == "training"])

    SEPOTrainer(model=model, args=config(tmp_path, credit, steps, G=2), processing_class=tok,
                rollout_hooks=[hook]).train()
    return seen


@pytest.mark.slow
def test_reward_only_and_per_pool_see_the_same_training_deals_at_every_step(tmp_path):
    steps = 3
    reward_only, per_pool = training_deals(tmp_path, "reward_only", steps), training_deals(tmp_path, "per_pool", steps)
    assert len(reward_only) == len(per_pool) == steps
    for step, (a, b) in enumerate(zip(reward_only, per_pool)):
        assert len(a) == TRAINING * 2
        assert a == b, f"step {step + 1}: training deals differ"
    assert len({d for step in reward_only for d in step}) > TRAINING  # fresh deals from step to step


# --- the payoff gradient ------------------------------------------------------------------------------------


class Spy(SEPOTrainer):
    """The real SEPOTrainer, keeping the last batch it scored (inputs with the rollout extras, and TRL's output)."""

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.batch = (inputs, output)
        return output


def _rows(output: dict, keep: list[int]) -> dict:
    n = output["completion_ids"].size(0)
    return {k: (v[keep] if isinstance(v, torch.Tensor) and v.dim() > 0 and v.size(0) == n else v)
            for k, v in output.items()}


def _grad(trainer: SEPOTrainer, batch: dict) -> torch.Tensor:
    model = trainer.model
    model.train()
    model.zero_grad()
    trainer.compute_loss(model, batch).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).clone()


def training_part_and_reward_only_gradients(tmp_path, loss_scale: str) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(per_pool's gradient from its training groups, reward_only's gradient on the same groups, N_train/N_all)."""
    model, tok = build_tiny_model("llama", seed=0)
    spy = Spy(model=model, args=config(tmp_path, "per_pool", 1, G=4, loss_scale=loss_scale, learning_rate=0.0),
              processing_class=tok)
    spy.train()  # one step at lr 0: the weights stay the warm (random) start, and spy.batch holds the batch
    inputs, output = spy.batch
    train_rows = [i for i, x in enumerate(inputs) if x["pool"] == "training"]
    assert 0 < len(train_rows) < len(inputs)
    per_pool = dict(output)
    mask = torch.zeros_like(per_pool["advantages"])
    mask[train_rows] = 1.0
    per_pool["advantages"] = per_pool["advantages"] * mask  # the loss restricted to training-group tokens
    g_per_pool = _grad(spy, per_pool)

    ro = SEPOTrainer(model=spy.model, args=config(tmp_path, "reward_only", 1, G=4, loss_scale=loss_scale),
                     processing_class=tok)
    ro.current_gradient_accumulation_steps = spy.current_gradient_accumulation_steps
    sub = _rows(output, train_rows)
    loss_mask = sub["completion_mask"] * sub["tool_mask"]
    sub["num_items_in_batch"] = loss_mask.sum()
    sub["advantages"] = ro.score([inputs[i] for i in train_rows], sub, "train").advantages
    g_reward_only = _grad(ro, sub)
    share = float(loss_mask.sum() / (output["completion_mask"] * output["tool_mask"]).sum())
    return g_per_pool, g_reward_only, share


@pytest.mark.slow
def test_per_pool_payoff_gradient_equals_reward_only_on_the_same_training_groups(tmp_path):
    per_pool, reward_only, share = training_part_and_reward_only_gradients(tmp_path, "training_tokens")
    assert reward_only.abs().max() > 1e-4  # a real gradient
    torch.testing.assert_close(per_pool, reward_only, rtol=1e-4, atol=1e-7)
    assert share < 0.8  # the penalty groups are a real part of per_pool's batch


@pytest.mark.slow
def test_trl_plain_normaliser_shrinks_the_payoff_gradient_by_the_training_share(tmp_path):
    per_pool, reward_only, share = training_part_and_reward_only_gradients(tmp_path, "all_tokens")
    torch.testing.assert_close(per_pool, reward_only * share, rtol=1e-4, atol=1e-7)


# --- the exact evaluation's prompts ---------------------------------------------------------------------------


class AnswersWithALegalAction(GenerationBackend):
    """Test double of the generation backend only (the engine, renderer, tokenizer and game are real): answers
    each turn with a seeded random legal action read from the prompt's last line, then end-of-turn, and keeps
    every prompt it was asked."""

    def __init__(self, tokenizer, eot: int, seed: int = 0) -> None:
        self.tokenizer, self.eot, self.rng, self.prompts = tokenizer, eot, random.Random(seed), []

    def generate(self, prompts, sampling, session=None):
        out = []
        for p in prompts:
            self.prompts.append(list(p.ids))
            legal = p.messages[-1]["content"].rsplit("Actions: ", 1)[1].split(" or ")
            action = self.rng.choice(legal)
            ids = self.tokenizer.encode(action, add_special_tokens=False) + [self.eot]
            out.append(Generation(token_ids=ids, logprobs=[0.0] * len(ids), text=action, finished=True))
        return out

    def generate_choice(self, prompts, choices, sampling, session=None):
        raise AssertionError("every turn parses: no fallback")

    def score_choices(self, prompts, choices):
        raise AssertionError("not used")


@pytest.mark.parametrize("seat", [0, 1])
def test_training_prompts_at_an_infoset_equal_the_exact_evaluations_token_for_token(seat):
    from sepo.eval.exact import state_prompts
    from sepo.generation import SamplingSpec
    from sepo.rollout.chat import ChatRenderer
    from sepo.rollout.engine import EpisodeSpec, play_episodes

    _, tok = build_tiny_model("llama")
    renderer = ChatRenderer(tok)
    backend = AnswersWithALegalAction(tok, renderer.end_of_turn_id)
    specs = [EpisodeSpec(game="kuhn", game_params=ORGANISM_GAME["kuhn"], pool="training", opponent="random_legal",
                         seed=s, seat=seat) for s in range(120)]
    play_episodes(specs, backend, renderer, SamplingSpec(max_new_tokens=4), trajectories=True)
    evaluation = [tuple(p.ids) for p in state_prompts(renderer, "kuhn", ORGANISM_GAME["kuhn"], seat)]
    assert len(set(evaluation)) == 12
    trained = {tuple(ids) for ids in backend.prompts}
    assert trained <= set(evaluation)  # every prompt training shows is one the evaluation scores
    assert trained == set(evaluation)  # and 120 one-hand episodes visit all 12 information sets
