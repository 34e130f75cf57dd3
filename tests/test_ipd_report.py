"""The IPD organism report's bookkeeping: run keys, the Markov summary, the tit-for-tat test, paired differences
and the exact frontier (synthetic runs; the study itself is `make figures-ipd-organism`)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from envs.ipd_exact import ANALYSIS, full_keys, markov_keys
from sepo.config.checks import UsageError
from sepo.study.ipd_report import frontier, passes, summary_goal, wording
from sepo.study.organism import load_recipe
from sepo.study.organism_games import organism_of
from sepo.study.organism_stats import paired, run_key

PARAMS = {"num_rounds": 3, "prompt_style": "compact"}
RECIPE = Path(__file__).parents[1] / "configs" / "experiments" / "ipd_organism" / "study.yaml"


def test_run_keys_name_the_warm_start_and_the_seed():
    assert run_key(3001) == "0/3001"
    assert run_key("ws1_seed_3001") == "1/3001"


def test_markov_summary_averages_the_histories_ending_in_each_joint_move():
    table = {key: 0.0 for key in full_keys(3)} | {"1|--": 0.9, "2|CD": 0.2, "3|CC.CD": 0.4, "3|DD.CD": 1.0}
    summary = ANALYSIS.summary(table)
    assert summary["1|--"] == 0.9
    assert summary["CD"] == pytest.approx((0.2 + 0.4 + 1.0) / 5)  # 2|CD and the four 3|xy.CD histories
    tft = {"1|--": 1.0, "CC": 0.9, "CD": 0.1, "DC": 0.9, "DD": 0.1}
    goal = summary_goal(load_recipe(RECIPE))  # the recipe's tit-for-tat test
    assert passes(tft, goal) and not passes(tft | {"CD": 0.31}, goal)
    assert not passes(tft | {"1|--": 0.79}, goal)


def test_the_recipe_words_the_report_and_its_reference_line_is_exact():
    """The reference line is tit-for-tat's exact e* at the recipe's 4 rounds (1.25, the analysis's own note), and
    a recipe without the goal is a one-line error naming the key."""
    recipe = load_recipe(RECIPE)
    words = wording(recipe)
    assert words.title == "IPD" and words.reference == (1.25, "tit-for-tat (1.25 at T=4)")
    assert list(words.summary_labels) == ["1|--", "CC", "CD", "DC", "DD"]
    with pytest.raises(UsageError, match="summary_goal"):
        summary_goal({k: v for k, v in recipe.items() if k != "summary_goal"})
    with pytest.raises(UsageError, match="unknown comparison '<'"):
        summary_goal({"summary_goal": {**recipe["summary_goal"], "bounds": {"CD": ["<", 0.3]}}})


def test_paired_differences_use_the_runs_both_arms_have():
    runs = {"a": {"0/1": [{"e_star": 1.0}], "0/2": [{"e_star": 2.0}], "1/1": [{"e_star": 3.0}]},
            "b": {"0/1": [{"e_star": 0.5}], "0/2": [{"e_star": 1.0}]}}
    d = paired(runs, "a", "b", "e_star")
    assert d["n"] == 2 and d["mean"] == pytest.approx(0.75)
    assert paired(runs, "a", "missing", "e_star") is None


def test_the_frontier_at_w_zero_is_the_best_payoff_over_pure_markov_tables():
    """At w = 0 the frontier maximises u_train alone: no pure Markov table does better (brute force)."""
    point = frontier(organism_of("ipd"), PARAMS, weights=(0.0, 1.0))
    keys = markov_keys(3)
    best = max(organism_of("ipd").checkpoint(dict(zip(keys, map(float, bits))), PARAMS)["u_train"]
               for bits in itertools.product((0, 1), repeat=len(keys)))
    assert point[0]["u_train"] >= best - 1e-12
    assert point[1]["e_star"] <= point[0]["e_star"] + 1e-12  # a weight on e* never raises it
