"""The organisms' statistics across runs, one definition for every organism report.

A run is one (warm start, training seed) pair, keyed `"<k>/<seed>"` (`run_key`). Every figure of a checkpoint is
exact given the weights, so the only spread is across runs: intervals are 95% t-intervals over runs (warm starts
and training seeds together), and comparisons between arms are paired by run (same warm start, seed and deals).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sepo.eval.stats import t_interval

Runs = Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]]  # arm -> run key -> checkpoints


def run_key(path_stem: str | int) -> str:
    """`"<k>/<seed>"` of a run (`sepo.study.organism.finished` keys a first-warm-start run by its seed, others
    by ws<k>_seed_<s>)."""
    if isinstance(path_stem, int):
        return f"0/{path_stem}"
    k, seed = path_stem.removeprefix("ws").split("_seed_")
    return f"{k}/{seed}"


def intervals(runs: Mapping[str, Sequence[Mapping[str, Any]]], metrics: Sequence[str]) -> list[dict[str, Any]]:
    """Per evaluated step (those every run has), each metric's mean and 95% t-interval across the runs (a metric
    is left out at a step where some run lacks it)."""
    steps = sorted(set.intersection(*(set(c["step"] for c in cps) for cps in runs.values())))
    out = []
    for step in steps:
        at = [next(c for c in cps if c["step"] == step) for cps in runs.values()]
        out.append({"step": step, **{m: t_interval([c[m] for c in at]) for m in metrics
                                     if all(m in c for c in at)}})
    return out


def paired(runs: Runs, a: str, b: str, metric: str) -> dict[str, float] | None:
    """The final `metric` of arm a minus arm b over the runs both have (same warm start and seed: paired); None
    with fewer than two such runs."""
    common = sorted(set(runs.get(a, {})) & set(runs.get(b, {})))
    if len(common) < 2:
        return None
    return t_interval([runs[a][k][-1][metric] - runs[b][k][-1][metric] for k in common])


def changes(runs: Runs, metric: str) -> dict[str, dict[str, float]]:
    """Per arm, the final `metric` minus the run's own step 0 (its warm start), with a 95% t-interval across runs:
    paired by run, so warm starts of different figures can be pooled."""
    return {arm: t_interval([cps[-1][metric] - cps[0][metric] for cps in seeds.values()])
            for arm, seeds in runs.items() if len(seeds) >= 2}


def below(a: Mapping[str, float], b: Mapping[str, float]) -> bool:
    """Interval a lies entirely below interval b."""
    return bool(a["high"] < b["low"])


def fmt(entry: Mapping[str, float] | None) -> str:
    """`mean [low, high]`, or – when there is no interval."""
    if not entry:
        return "–"
    return f"{entry['mean']:.3f} [{entry['low']:.3f}, {entry['high']:.3f}]"
