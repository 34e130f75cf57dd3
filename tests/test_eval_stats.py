"""Bootstrap intervals of `sepo eval` (sepo/eval/stats.py) against known samples and scipy's bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sepo.eval.stats import bootstrap, paired_difference


def mean(units: list[float]) -> dict[str, float]:
    return {"mean": sum(units) / len(units)}


def test_interval_of_a_known_sample_matches_scipy_and_the_normal_approximation():
    # 120 successes in 400 trials: p = 0.3, normal-approximation half-width 1.96 * sqrt(.3 * .7 / 400) = 0.0449
    sample = [1.0] * 120 + [0.0] * 280
    lo, hi = bootstrap({"all": sample}, mean, resamples=4000, seed=1)["mean"]
    assert (lo + hi) / 2 == pytest.approx(0.3, abs=0.004)
    assert (hi - lo) / 2 == pytest.approx(1.96 * math.sqrt(0.3 * 0.7 / 400), abs=0.004)
    from scipy.stats import bootstrap as scipy_bootstrap

    ref = scipy_bootstrap((np.array(sample),), np.mean, n_resamples=4000, method="percentile",
                          random_state=np.random.default_rng(2)).confidence_interval
    assert lo == pytest.approx(ref.low, abs=0.006) and hi == pytest.approx(ref.high, abs=0.006)


def test_strata_are_resampled_separately():
    # stratum "a" is constant, so a statistic of "a" alone never varies; the pooled mean does
    strata = {"a": [("a", 2.0)] * 5, "b": [("b", 0.0), ("b", 1.0), ("b", 0.0), ("b", 1.0)]}

    def stat(units):
        a = [v for k, v in units if k == "a"]
        return {"a_mean": sum(a) / len(a), "b_count": float(sum(k == "b" for k, _ in units))}

    ci = bootstrap(strata, stat, resamples=300)
    assert ci["a_mean"] == (2.0, 2.0)  # every resample keeps 5 units of "a" ...
    assert ci["b_count"] == (4.0, 4.0)  # ... and 4 of "b": the design is kept


def test_one_unit_per_stratum_gives_no_interval():
    assert bootstrap({"a": [1.0], "b": [3.0]}, mean, resamples=200) == {"mean": None}


def test_undefined_statistic_has_no_interval():
    ci = bootstrap({"a": [1.0, 2.0]}, lambda u: {"defined": 1.0, "never": None}, resamples=200)
    assert ci["never"] is None and ci["defined"] == (1.0, 1.0)


def test_paired_difference_keeps_the_pairing():
    rng = np.random.default_rng(0)
    a = {"opp": list(rng.normal(0, 1, 30))}
    b = {"opp": [v - 0.3 for v in a["opp"]]}  # the same episodes, every one 0.3 lower
    d = paired_difference(a, b, mean, resamples=500)["mean"]
    assert d["paired"] and d["diff"] == pytest.approx(0.3)
    assert d["ci"] == pytest.approx([0.3, 0.3]) and d["excludes_zero"]
    # resampled independently, the same difference is swamped by the episode-to-episode spread (SE 0.26)
    unpaired = paired_difference(a, {"other": b["opp"]}, mean, resamples=500)["mean"]
    assert not unpaired["paired"] and unpaired["ci"][0] < 0 < unpaired["ci"][1] and not unpaired["excludes_zero"]
