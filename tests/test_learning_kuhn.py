"""SEPO-GRPO's machinery lowers exact exploitability: the Kuhn model organism end to end, at CI size.

The organism of `configs/experiments/kuhn_organism/study.yaml` (a 2-layer Llama of hidden 128 built from config,
the compact one-hand Kuhn prompt, the study's own answer-only SFT warm start), then `exploitability_descent`:
the adaptive exact exploiter's group alone with the signed reward, through the real SEPOTrainer (TRL's GRPO
step, the rollout engine, per-pool credit, per-round normalisation, the adaptive exploiter's refresh every
step). What is measured: the exact exploitability of the policy scored at the 12 information sets on the
training prompts (`sepo.eval.kuhn.scored_policy`, `envs.kuhn_exact.exploitability`), one thread, seeded.

MEASURED (2026-12-01, this project's 2-core machine, lr 1e-4 for 60 steps, G = 8, the recipe's round-2 design:
linear decay, centred advantages, no gradient clipping; the study itself runs at 3e-5 for 300-500 steps),
exploitability at steps 0 / 30 / 60:

    warm start                        0.1922
    seed 0                            0.0923 -> 0.0649   (drop 0.127)
    seed 1                            0.0696 -> 0.0589   (drop 0.133)
    seed 2                            0.0921 -> 0.0704   (drop 0.122)
    seed 0, exploiter never refreshed 0.1921 -> 0.0885   (drop 0.104: at this size a fixed best response to
                                                         the start is still a descent direction; not a break
                                                         this test can see)
    seed 0, advantages negated        0.2648 -> 0.2831   (rises by 0.091: the first test fails)

MARGIN is half the smallest drop over seeds 0-2. The fixture's 150 SFT steps dominate the module's time; each
60-step run takes about a minute on a loaded machine. Learning rate 0 leaves the scored policy exactly as it
was (the weights do not move), so its exploitability is the warm start's to float round-off.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

RECIPE = Path(__file__).parents[1] / "configs" / "experiments" / "kuhn_organism" / "study.yaml"
STEPS = 60
LEARNING_RATE = 1e-4
SEED = 0
MARGIN = 0.061


@pytest.fixture(scope="module")
def organism(tmp_path_factory):
    """(recipe at CI size, warm-start checkpoint, its exploitability): the study's own warm start recipe."""
    from sepo.study.organism import load_recipe, warm_start

    recipe = copy.deepcopy(load_recipe(RECIPE))
    recipe["train"]["learning_rate"] = LEARNING_RATE
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
