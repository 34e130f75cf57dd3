"""Measured = played, at CI size: the study of `configs/experiments/lm_kuhn/study.yaml` (SmolLM2 with LoRA on
compact one-hand Kuhn) with a tiny Llama built from config standing in for SmolLM2 (`sepo.tiny_models`, shape
"organism", saved as a checkpoint and named by `model.name_or_path`, as a pretrained model is), its LoRA SFT warm
start (few steps, so the end-of-turn after an answer is far from certain) and 2 LoRA steps of exploitability
descent through `sepo.grpo.train.train`. On the final checkpoint the table scored by teacher forcing must be what
the rollout engine plays at temperature 1.

The bound. With n samples per information set, a frequency f of an event of probability p is checked by
|f - p| <= Z * sqrt(p (1 - p) / n) + Z^2 / n, Z = 4 (about 6e-5 two-sided per check under the normal
approximation, the Z^2 / n term covering probabilities near 0 or 1): 36 checks, family-wise error below 0.003.
Two checks per information set I with canonical mass m_I:

- each action's canonical answer: the rate at which the rollout plays exactly its canonical text then
  end-of-turn equals its scored mass P(action + end-of-turn) = m_I * scored(action);
- the played table: played(a) = m_I * scored(a) + r(a), where r >= 0 is the rest (aliases, fallback) and sums to
  1 - m_I, so |played(a) - scored(a)| <= (1 - m_I) + the sampling bound.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest

from envs.kuhn import INFO_STATES

RECIPE = Path(__file__).parents[1] / "configs" / "experiments" / "lm_kuhn" / "study.yaml"
SAMPLES = 400  # per information set
Z = 4.0
PARAMS = {"num_hands": 1, "first_mover": "random", "prompt_style": "compact"}


def bound(p: float, n: int) -> float:
    """The sampling bound of a frequency of n samples around probability p (module docstring)."""
    return Z * math.sqrt(max(p * (1 - p), 0.0) / n) + Z * Z / n


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A tiny Llama built from config (the project's tokenizer and ChatML template): SmolLM2's stand-in."""
    from sepo.tiny_models import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("stand_in") / "model", "llama", seed=0, shape="organism")


def small(recipe: dict, root: Path, model: Path) -> dict:
    """The lm_kuhn recipe at CI size: the stand-in model, a short LoRA warm start, G 4, 2 groups per step."""
    recipe = copy.deepcopy(recipe)
    recipe["output_dir"] = str(root)
    recipe["model"] = {"name_or_path": str(model), "seed": 0}
    recipe["warm_start"].update(steps=8, learning_rate=3e-3, batch_size=144, lora_r=8, lora_alpha=16)
    recipe["train"].update(num_generations=4, lora_r=8, lora_alpha=16, learning_rate=1e-4)
    for arm in recipe["arms"].values():
        arm["per_device_train_batch_size"] = 8
    recipe["eval_every"] = 2
    recipe["played"] = {"samples": SAMPLES, "batch": 400}
    return recipe


@pytest.fixture(scope="module")
def final(tiny_model, tmp_path_factory) -> dict:
    """The final exact checkpoint of a 2-step run of exploitability descent from the LoRA warm start."""
    from sepo.study.organism import load_recipe, run_one, warm_start

    root = tmp_path_factory.mktemp("lm_kuhn")
    recipe = small(load_recipe(RECIPE), root, tiny_model)
    start = warm_start(recipe, root)
    run = run_one(recipe, "exploitability_descent", 0, 2, root / "run.json", str(start))
    assert [c["step"] for c in run["checkpoints"]] == [0, 2]
    assert run["config"]["use_peft"] is True and run["config"]["model_name_or_path"] == str(start)
    return run["checkpoints"][-1]


def test_each_canonical_answer_is_played_at_its_scored_mass(final):
    n = final["played_n"]
    assert n == SAMPLES
    misses = []
    for info in INFO_STATES:
        mass = final["canonical_mass_by_state"][info]
        for action, p in final["policy"][info].items():
            scored, played = mass * p, final["played_canonical"][info][action]
            if abs(played - scored) > bound(scored, n):
                misses.append((info, action, round(scored, 4), played))
    assert not misses, misses


def test_the_played_table_is_the_scored_one_within_the_non_canonical_mass(final):
    n = final["played_n"]
    misses = []
    for info in INFO_STATES:
        rest = 1.0 - final["canonical_mass_by_state"][info]
        for action, p in final["policy"][info].items():
            if abs(final["played"][info][action] - p) > rest + bound(p, n):
                misses.append((info, action, round(p, 4), final["played"][info][action], round(rest, 4)))
    assert not misses, misses
    assert final["played_gap"] == max(abs(final["played"][i][a] - p) for i, row in final["policy"].items()
                                      for a, p in row.items())


def test_the_played_episodes_reach_each_information_set_at_its_scored_prompt(tiny_model):
    """The rollout engine puts the model at each information set with exactly the prompt tokens the scoring
    reads (`infoset_messages`): the deal, the opponent's move and, at "Xpb", the opening PASS; and the episode
    holds that one sampled decision."""
    from sepo.backends.hf import HFBackend
    from sepo.eval.kuhn import infoset_messages
    from sepo.eval.kuhn_played import OPPONENTS, infoset_episode
    from sepo.generation import SamplingSpec
    from sepo.rollout.engine import play_episodes

    backend = HFBackend.from_model(str(tiny_model), device="cpu")
    setups = [infoset_episode(info, PARAMS) for info in INFO_STATES]
    assert [o for _, o in setups] == [()] * 9 + [("PASS",)] * 3
    results = play_episodes([s for s, _ in setups], backend, backend.renderer,
                            SamplingSpec(temperature=1.0, top_p=1.0, max_new_tokens=4, seed=1), opponents=OPPONENTS,
                            openings=[o for _, o in setups])
    for info, (_, opening), (record, traj) in zip(INFO_STATES, setups, results):
        assert len(record.turns) == len(opening) + 1, info  # the opening, then the one sampled decision
        assert [t.action for t in record.turns[: len(opening)]] == list(opening)
        expected = backend.renderer.prompt_ids(infoset_messages(info, PARAMS))
        assert (traj.prompt_ids + traj.completion_ids)[: len(expected)] == expected, info
