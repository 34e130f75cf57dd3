"""Bootstrap confidence intervals over episodes (numpy, stratified percentile bootstrap).

The sample is a set of strata (one per (pool, opponent): every opponent was played the same number of times,
and each resample keeps that design) of independent units (episodes). A resample draws, within every
stratum, as many units with replacement as it holds, and recomputes the statistic on them through the very
function that computed the point estimate, so an interval is the interval of exactly the reported number.
The interval is the (1−confidence)/2 and (1+confidence)/2 percentiles of the resampled values
(`numpy.percentile`, linear interpolation). A metric undefined in a resample (e.g. a rate with no
opportunity) is left out of that resample; with one unit per stratum nothing varies and the interval is
None (not a zero-width interval that would claim certainty).

`paired_difference` resamples the same unit indices in two samples played on the same seeds (the same
opponents, seeds and seats for two models), so the interval of a difference keeps the pairing.

`t_interval` is the other kind: the Student t-interval of a mean across training seeds (one value per seed).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")
Strata = Mapping[Hashable, Sequence[T]]
Statistic = Callable[[list[T]], Mapping[str, float | None]]
Interval = tuple[float, float] | None

METHOD = "stratified percentile bootstrap over episodes (numpy)"


def _flatten(strata: Strata, picks: Mapping[Hashable, np.ndarray]) -> list:
    return [strata[key][i] for key in strata for i in picks[key]]


def _draws(strata: Strata, resamples: int, seed: int) -> list[dict[Hashable, np.ndarray]]:
    rng = np.random.default_rng(seed)
    sizes = {key: len(units) for key, units in strata.items()}
    return [{key: rng.integers(0, n, n) for key, n in sizes.items()} for _ in range(resamples)]


def _percentiles(values: dict[str, list[float]], point: Mapping[str, float | None],
                 confidence: float) -> dict[str, Interval]:
    tail = (1.0 - confidence) / 2.0 * 100.0
    out: dict[str, Interval] = {}
    for name, estimate in point.items():
        vals = values.get(name, [])
        if estimate is None or not vals:
            out[name] = None
            continue
        lo, hi = np.percentile(np.asarray(vals, dtype=float), [tail, 100.0 - tail])
        out[name] = (float(lo), float(hi))
    return out


def _resamplable(strata: Strata) -> bool:
    return any(len(units) > 1 for units in strata.values())


def bootstrap(strata: Strata, statistic: Statistic, resamples: int = 1000, confidence: float = 0.95,
              seed: int = 0) -> dict[str, Interval]:
    """Percentile interval of every value `statistic` returns, over `resamples` stratified resamples."""
    point = statistic([u for units in strata.values() for u in units])
    if not _resamplable(strata):
        return dict.fromkeys(point)
    values: dict[str, list[float]] = {}
    for picks in _draws(strata, resamples, seed):
        for name, v in statistic(_flatten(strata, picks)).items():
            if v is not None:
                values.setdefault(name, []).append(v)
    return _percentiles(values, point, confidence)


def paired_difference(a: Strata, b: Strata, statistic: Statistic, resamples: int = 1000,
                      confidence: float = 0.95, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Interval of statistic(a) − statistic(b) for every value both define.

    Paired when a and b have the same strata of the same sizes (unit i of a stratum in a was played on the
    same seed as unit i in b): one index draw serves both. Otherwise the two are resampled independently.
    Returns {name: {"diff", "ci", "excludes_zero", "paired"}}.
    """
    pa, pb = statistic([u for s in a.values() for u in s]), statistic([u for s in b.values() for u in s])
    point = {k: (pa[k] - pb[k]) if pa.get(k) is not None and pb.get(k) is not None else None for k in pa}
    paired = list(a) == list(b) and all(len(a[k]) == len(b[k]) for k in a)
    values: dict[str, list[float]] = {}
    if _resamplable(a) or _resamplable(b):
        draws_a = _draws(a, resamples, seed)
        draws_b = draws_a if paired else _draws(b, resamples, seed + 1)
        for picks_a, picks_b in zip(draws_a, draws_b):
            ra, rb = statistic(_flatten(a, picks_a)), statistic(_flatten(b, picks_b))
            for name in point:
                if ra.get(name) is not None and rb.get(name) is not None:
                    values.setdefault(name, []).append(ra[name] - rb[name])
    intervals = _percentiles(values, point, confidence)
    out = {}
    for name, ci in intervals.items():
        excludes = ci is not None and (ci[0] > 0 or ci[1] < 0)
        out[name] = {"diff": point[name], "ci": None if ci is None else list(ci), "excludes_zero": excludes,
                     "paired": paired}
    return out


def t_interval(values: Sequence[float], confidence: float = 0.95) -> dict[str, float]:
    """Mean and the two-sided t-interval of the mean across `values` (training seeds): mean ± t(n−1)·sd/√n with
    the sample sd (n − 1); n = 1 gives no width."""
    # deferred: scipy.stats takes ~1.5 s to import; only t intervals need it
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return {"mean": mean, "low": mean, "high": mean, "n": n}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}
