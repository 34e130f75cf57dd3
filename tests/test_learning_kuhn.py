"""SEPO-GRPO's machinery lowers exact exploitability: the Kuhn model organism end to end, at CI size.

The organism of `configs/experiments/kuhn_organism/study.yaml` (a 2-layer Llama of hidden 128 built from config,
the compact one-hand Kuhn prompt, the study's answer-only SFT warm start with half its rows: 6 demonstrator rows
per information set instead of 12, so the fixture's SFT takes half the time), then `exploitability_descent`:
the adaptive exact exploiter's group alone (one group per step; the study's arms play 6) with the signed reward, through the real SEPOTrainer (TRL's GRPO
step, the rollout engine, per-pool credit, per-round normalisation, the adaptive exploiter's refresh every
step). What is measured: the exact exploitability of the policy scored at the 12 information sets on the
training prompts (`sepo.eval.exact.scored_policy`, `envs.kuhn_exact.exploitability`), one thread, seeded.

MEASURED (2026-12-01, this project's 2-core machine, one thread, lr 1e-4 for 60 steps, G = 8, the recipe's
round-2 design: linear decay, centred advantages, no gradient clipping; the study itself runs at 3e-5 for 300-500
steps), exploitability at steps 0 / 30 / 60:

    warm start (6 rows per info set)  0.2450
    seed 0                            0.1550 -> 0.1219   (drop 0.123)
    seed 1                            0.0834 -> 0.0700   (drop 0.175)
    seed 2                            0.1104 -> 0.1047   (drop 0.140)
    seed 0, exploiter never refreshed 0.1478 -> 0.1273   (drop 0.118: at this size a fixed best response to
                                                         the start is still a descent direction; not a break
                                                         this test can see)
    seed 0, advantages negated        0.3761 -> 0.4591   (rises by 0.214: the first test fails)

MARGIN is half the smallest drop over seeds 0-2. The fixture's SFT (150 steps) took 96 s and each 60-step run
8-9 s on an idle machine; with the study's 12 rows the SFT alone took about 190 s. Learning rate 0 leaves the
scored policy exactly as it was (the weights do not move), so its exploitability is the warm start's to float
round-off.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

RECIPE = Path(__file__).parents[1] / "configs" / "experiments" / "kuhn_organism" / "study.yaml"
ROWS_PER_INFOSET = 6
STEPS = 60
LEARNING_RATE = 1e-4
SEED = 0
MARGIN = 0.061


@pytest.fixture(scope="module")
def organism(tmp_path_factory):
    """(recipe at CI size, warm-start checkpoint, root): the study's warm start recipe with ROWS_PER_INFOSET rows."""
    from sepo.study.organism import load_recipe, warm_start

    recipe = copy.deepcopy(load_recipe(RECIPE))
    recipe["warm_start"]["rows_per_infoset"] = ROWS_PER_INFOSET
    recipe["train"]["learning_rate"] = LEARNING_RATE
    # one group per step, as when MARGIN was measured (the study's arms play 6), and no played measure
    recipe["train"]["per_device_train_batch_size"] = recipe["train"]["num_generations"]
    recipe["arms"]["exploitability_descent"]["pool_mix"] = {"exploit": ["best_response_to_current"]}
    recipe["played"] = None
    root = tmp_path_factory.mktemp("organism")
    return recipe, str(warm_start(recipe, root)), root


def descend(organism, learning_rate: float) -> list[float]:
    from sepo.study.organism import run_one

    recipe, start, root = organism
    recipe = copy.deepcopy(recipe)
    recipe["train"]["learning_rate"] = learning_rate
    out = root / f"ed_{learning_rate}.json"
    return [c["exploitability"] for c in run_one(recipe, "exploitability_descent", SEED, STEPS, out, start)["checkpoints"]]


def test_exploitability_descent_lowers_exact_exploitability(organism):
    curve = descend(organism, LEARNING_RATE)
    assert len(curve) == STEPS // 10 + 1
    assert curve[0] - curve[-1] >= MARGIN, curve


def test_learning_rate_zero_leaves_exploitability_unchanged(organism):
    curve = descend(organism, 0.0)
    assert max(abs(x - curve[0]) for x in curve) <= 1e-6, curve
