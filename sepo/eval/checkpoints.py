"""Per-checkpoint evaluation: every `checkpoint-<step>` of a training run against the pools, J, u, e, c, x and
NRA per step with intervals, the best checkpoint by evaluated J, and a plot of each metric against the step.

Used by `sepo eval --checkpoints DIR` (after training) and by the training callback
(`sepo.grpo.callbacks.CheckpointEvalCallback`, at every save). Both write checkpoints.json:

    {"intervals": {...}, "checkpoints": [{"step", "checkpoint", "safety", "games": {game: {metric: entry}}}],
     "best": {"step", "checkpoint", "safety"} | null}

"safety" is the evaluated J (each game at its evaluation λ; the mean over games when there are several);
"best" is the checkpoint with the highest, the earliest on a tie.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sepo.eval.stats import METHOD
from sepo.files import write_json_atomic

CHECKPOINTS_FILE = "checkpoints.json"
CHECKPOINTS_PLOT = "checkpoints.png"
# a training run's per-checkpoint evaluation (sepo.grpo.callbacks): the best checkpoint's copy, its record, and
# the evaluated episodes; `sepo export` reads them back
BEST_DIR = "best"
BEST_FILE = "best.json"
EVAL_DIR = "checkpoint_eval"
HEADLINE = (("safety", "J"), ("u", "u"), ("e", "e"), ("c", "c"), ("x", "x"), ("nra_gtbench", "NRA (GTBench)"),
            ("nra_sepo", "NRA (method)"))
_STEP = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_models(run_dir: str | Path) -> list[tuple[str, str]]:
    """("step-<N>", path) for every checkpoint-<N> directory of a training run, by step."""
    run = Path(run_dir)
    if not run.is_dir():
        raise ValueError(f"checkpoints={str(run_dir)!r} is not a directory")
    found = sorted((int(m.group(1)), p) for p in run.iterdir() if p.is_dir() and (m := _STEP.match(p.name)))
    if not found:
        raise ValueError(f"checkpoints={str(run_dir)!r} holds no checkpoint-<step> directory")
    return [(f"step-{step}", str(path)) for step, path in found]


def step_of(label: str) -> int:
    """The step of a `step-<N>` label."""
    return int(label.removeprefix("step-"))


def checkpoint_record(step: int, checkpoint: str, per_game: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One checkpoint's headline metrics per game (with intervals and n) and its evaluated J."""
    games = {}
    for game, result in per_game.items():
        games[game] = {name: result["metrics"][name] for name, _ in HEADLINE}
        if "exploitability" in result:
            games[game]["exploitability"] = result["exploitability"]
    js = [g["safety"]["value"] for g in games.values()]
    safety = sum(js) / len(js) if js and all(j is not None for j in js) else None
    return {"step": step, "checkpoint": checkpoint, "safety": safety, "games": games}


def best_record(records: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The record with the highest evaluated J (the earliest step on a tie), None when no J was measured."""
    scored = [r for r in records if r["safety"] is not None]
    if not scored:
        return None
    best = max(scored, key=lambda r: (r["safety"], -r["step"]))
    return {"step": best["step"], "checkpoint": best["checkpoint"], "safety": best["safety"]}


def write_checkpoints(path: Path, records: Sequence[Mapping[str, Any]], confidence: float,
                      resamples: int) -> dict[str, Any]:
    """Write checkpoints.json (records by step, the best) and return its content."""
    ordered = sorted(records, key=lambda r: r["step"])
    data = {"intervals": {"method": METHOD, "confidence": confidence, "resamples": resamples},
            "checkpoints": ordered, "best": best_record(ordered)}
    write_json_atomic(path, data)
    return data


def plot_checkpoints(records: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """checkpoints.png (see `checkpoint_figure`)."""
    # deferred: matplotlib takes ~1 s to import; only plots need it
    import matplotlib.pyplot as plt

    fig = checkpoint_figure(records)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def checkpoint_figure(records: Sequence[Mapping[str, Any]]) -> Any:
    """Each headline metric against the step, one line per game, interval error bars; a grid of panels (2 rows),
    the checkpoints' steps as ticks, and y limits that hold 0, every value and every interval (a single
    checkpoint is not blown up to a 0.95-1.05 axis)."""
    # deferred: matplotlib takes ~1 s to import; only plots need it
    import matplotlib

    matplotlib.use("Agg")
    # deferred: pyplot only after matplotlib.use("Agg") has chosen the headless backend
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    cols = (len(HEADLINE) + 1) // 2
    fig, grid = plt.subplots(2, cols, figsize=(3.3 * cols, 6.4), squeeze=False)
    axes = list(grid.flat)
    games = sorted({g for r in records for g in r["games"]})
    steps_all = sorted({r["step"] for r in records}) or [0]
    pad = max(0.5, 0.05 * (steps_all[-1] - steps_all[0]))
    for ax, (name, title) in zip(axes, HEADLINE):
        seen = [0.0]
        for k, game in enumerate(games):
            points = [(r["step"], r["games"][game][name]) for r in records if game in r["games"]]
            points = [(s, e) for s, e in points if e["value"] is not None]
            if not points:
                continue
            steps = [s for s, _ in points]
            values = [e["value"] for _, e in points]
            err = [[max(0.0, e["value"] - e["ci"][0]) if e["ci"] else 0.0 for _, e in points],
                   [max(0.0, e["ci"][1] - e["value"]) if e["ci"] else 0.0 for _, e in points]]
            ax.errorbar(steps, values, yerr=err, marker="o", capsize=3, color=f"C{k}", label=game)
            seen += values + [v - lo for v, lo in zip(values, err[0])] + [v + hi for v, hi in zip(values, err[1])]
        low, high = min(seen), max(seen)
        margin = max(0.08 * (high - low), 0.05 * max(1.0, abs(low), abs(high)))
        ax.set(title=title, xlabel="step", ylim=(low - margin, high + margin),
               xlim=(steps_all[0] - pad, steps_all[-1] + pad))  # fmt: skip
        if len(steps_all) <= 8:
            ax.set_xticks(steps_all)  # the checkpoints' own steps
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.axhline(0, color="black", linewidth=0.5)
    for ax in axes[len(HEADLINE) :]:  # the spare panel holds the legend
        ax.axis("off")
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        (axes[-1] if len(axes) > len(HEADLINE) else axes[0]).legend(handles, labels, title="game", loc="center")
    fig.tight_layout()
    return fig


def write_checkpoint_report(cfg: Any, models: Sequence[tuple[str, str]], results: Mapping[str, Any]) -> Path:
    """`sepo eval --checkpoints`: checkpoints.json and checkpoints.png in the eval's output_dir."""
    out = Path(cfg.output_dir)
    records = [checkpoint_record(step_of(label), model, results[label]) for label, model in models]
    write_checkpoints(out / CHECKPOINTS_FILE, records, cfg.confidence, cfg.bootstrap_resamples)
    return plot_checkpoints(records, out / CHECKPOINTS_PLOT)
