"""The organism study's bookkeeping: arm names and overrides from the recipe, per-step intervals across seeds,
and the goals read off the final checkpoints (synthetic runs; the study itself is `make figures-kuhn-organism`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from scipy import stats

from sepo.study.organism import arm_overrides, load_recipe, run_keys
from sepo.study.organism_report import goals, intervals

RECIPE = Path(__file__).parents[1] / "configs" / "experiments" / "kuhn_organism" / "study.yaml"


def run(values: list[float]) -> dict:
    return {"checkpoints": [{"step": 10 * i, "exploitability": v, "game_value": 0.0, "J": -v, "u_train": v / 2}
                            for i, v in enumerate(values)]}


def test_the_adaptive_arm_takes_its_weight_from_its_name():
    recipe = load_recipe(RECIPE)
    keys = arm_overrides(recipe, "per_pool_adaptive_w3")
    assert keys["pool_weights"] == {"exploit": 3.0} and keys["adaptive_exploiter"] is True
    assert arm_overrides(recipe, "reward_only")["credit"] == "reward_only"
    with pytest.raises(KeyError, match="no arm 'per_poool'"):
        arm_overrides(recipe, "per_poool")


def test_organism_runs_train_without_gradient_checkpointing_unless_the_recipe_asks():
    """TRL turns gradient checkpointing on by default; on the organism's tiny model it only repeats every forward
    pass in the backward pass. The Kuhn recipe does not name the key: its runs train without it. A recipe that
    names it is obeyed."""
    recipe = load_recipe(RECIPE)
    assert "gradient_checkpointing" not in recipe["train"]
    for arm in ("reward_only", "exploitability_descent", "per_pool_adaptive_w10"):
        keys = run_keys(recipe, arm, 1001, 500, "work", "start")
        assert keys["gradient_checkpointing"] is False and keys["max_steps"] == 500 and keys["save_steps"] == 10
    recipe["train"]["gradient_checkpointing"] = True
    assert run_keys(recipe, "reward_only", 1001, 500, "work", "start")["gradient_checkpointing"] is True


def test_intervals_are_t_intervals_across_seeds_at_every_shared_step():
    seeds = {1: run([0.2, 0.1, 0.05]), 2: run([0.2, 0.15, 0.08]), 3: run([0.2, 0.12])}
    rows = intervals(seeds)
    assert [r["step"] for r in rows] == [0, 10]  # step 20 is not shared by every seed
    values = [0.1, 0.15, 0.12]
    mean = sum(values) / 3
    half = stats.t.ppf(0.975, 2) * stats.tstd(values) / 3 ** 0.5
    assert rows[1]["exploitability"]["mean"] == pytest.approx(mean)
    assert rows[1]["exploitability"]["low"] == pytest.approx(mean - half)
    assert rows[1]["exploitability"]["high"] == pytest.approx(mean + half)
    assert rows[0]["exploitability"]["low"] == pytest.approx(0.2) and rows[0]["exploitability"]["high"] == pytest.approx(0.2)


def test_goals_are_read_off_the_final_intervals():
    def arm(values):
        return intervals({s: run(v) for s, v in enumerate(values)})

    results = {"intervals": {"reward_only": arm([[0.2, 0.25], [0.2, 0.24]]),
                             "per_pool": arm([[0.2, 0.21], [0.2, 0.22]]),
                             "exploitability_descent": arm([[0.2, 0.04], [0.2, 0.05]]),
                             "per_pool_adaptive_w3": arm([[0.2, 0.23], [0.2, 0.2]])},
               "arms": {a: {"seconds_per_step": {"mean": 0.5}} for a in
                        ("reward_only", "per_pool", "exploitability_descent", "per_pool_adaptive_w3")}}
    (ed, _, ed_ok), (below, _, below_ok), (adaptive, _, adaptive_ok), (step, _, step_ok) = \
        [(g, None, ok) for g, ok, _ in goals(results)]
    assert "<= 0.05" in ed and ed_ok is True  # mean 0.045
    assert "below reward_only's" in below and below_ok is True
    assert adaptive.startswith("per_pool_adaptive_w3") and adaptive_ok is False  # overlaps per_pool's interval
    assert "<= 1 s" in step and step_ok is True  # 0.5 s per step
