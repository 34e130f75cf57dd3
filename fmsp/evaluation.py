"""`fmsp eval`: Elo over a shared population and QD-score of finished FMSP runs, with plots.

Elo. The population of each side is the domain's human-designed baselines plus, from every run, the
`top` active archive members by archive quality and `random` further active members (seeded), as in
FMSP's evaluation. Every policy of the first side plays every policy of the second (sandboxed, the
domain's match config). A Bradley-Terry model, P(a beats b) = sigmoid(t_a - t_b), is fitted by
maximum likelihood to the fractional match scores (score_a as a's share of the win; for non-constant-
sum domains score_a / (score_a + score_b)) with a weak Gaussian prior that keeps unbeaten players
finite, and put on the Elo scale R = 1000 + 400 * t / ln(10) (mean 1000 over the rated players).
Confidence intervals are percentiles over bootstrap refits on pairings resampled with replacement. A
policy that fails a match (crash, timeout, invalid action; see `fmsp.sandbox`) is not rated: its row
names the failure, and all its matches are left out of the fit, so its opponents are rated as if it had
not been in the population (they are not flagged).

QD-score. Per side, the code embeddings of every active generated member of every run are projected on a
fixed 2-D plane with a fixed `cells` x `cells` grid (`Projection`): PCA axes and a box (the projected points'
bounding box plus a 10% margin) fitted ONCE, on the first evaluation's runs and the domain's baselines, saved
to `projection.json` and reused by passing it back (`--projection`), so that adding runs never moves a cell
(members outside the box fall in its edge cells; `outside` counts them). A run's map holds in each cell the best quality of its members falling there
(quality = mean score against the other side's human baselines, a reference shared by all runs);
empty cells count 0. QD-score = the sum over cells of the map (Pugh et al. 2015); `qd_score_mean`
divides by the number of cells (the "mean of the map" form FMSP reports).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from envs.sandbox import SandboxConfig, SandboxUnavailable
from envs.sandbox.rng import persist_run_rng_key
from fmsp.archive import Archive, ArchiveEntry
from fmsp.config import load_config
from fmsp.domain import Domain, PolicyCode
from fmsp.domains import DOMAINS, make_domain
from fmsp.sandbox import MatchOutcome, Sandbox
from sepo.config.checks import (
    COUNT,
    NON_NEGATIVE_INT,
    POSITIVE,
    Range,
    UsageError,
    check_choice,
    check_output_dir,
)
from sepo.files import write_atomic, write_json_atomic, write_text_atomic

ELO_SCALE = 400.0 / math.log(10.0)


# --- Bradley-Terry / Elo ------------------------------------------------------------------------


def fit_bradley_terry(
    first: np.ndarray, second: np.ndarray, score: np.ndarray, n_players: int, prior: float = 0.01
) -> np.ndarray:
    """MLE strengths t (mean 0) from matches `first[k]` vs `second[k]` where `first` won a share `score[k]`.

    Newton's method on the penalised log-likelihood (strictly concave thanks to the prior).
    """
    first, second, score = np.asarray(first), np.asarray(second), np.asarray(score, dtype=float)
    t = np.zeros(n_players)
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-(t[first] - t[second])))
        resid = score - p
        grad = np.bincount(first, resid, n_players) - np.bincount(second, resid, n_players) - prior * t
        w = p * (1.0 - p)
        hess = prior * np.eye(n_players)
        np.add.at(hess, (first, first), w)
        np.add.at(hess, (second, second), w)
        np.add.at(hess, (first, second), -w)
        np.add.at(hess, (second, first), -w)
        step = np.linalg.solve(hess, grad)
        t += step
        if np.max(np.abs(step)) < 1e-10:
            break
    return t - t.mean()


def elo_ratings(
    first: Sequence[int], second: Sequence[int], score: Sequence[float], n_players: int,
    n_boot: int = 200, seed: int = 0, level: float = 0.95,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Elo ratings (mean 1000) and bootstrap percentile CIs (lower, upper) from match scores."""
    first, second, score = np.asarray(first), np.asarray(second), np.asarray(score, dtype=float)
    elo = 1000.0 + ELO_SCALE * fit_bradley_terry(first, second, score, n_players)
    rng = np.random.default_rng(seed)
    boots = np.empty((n_boot, n_players))
    for b in range(n_boot):
        k = rng.integers(0, len(score), len(score))
        boots[b] = 1000.0 + ELO_SCALE * fit_bradley_terry(first[k], second[k], score[k], n_players)
        # A player with no match in this resample has only the prior's rating (1000): no evidence, not a draw.
        boots[b, np.setdiff1d(np.arange(n_players), np.concatenate([first[k], second[k]]))] = np.nan
    alpha = (1.0 - level) / 2.0
    return elo, np.nanquantile(boots, alpha, axis=0), np.nanquantile(boots, 1.0 - alpha, axis=0)


def win_share(score_a: float, score_b: float) -> float:
    """a's share of the win: score_a when scores sum to 1, else score_a / (score_a + score_b) (0.5 if both 0)."""
    total = score_a + score_b
    return 0.5 if total <= 0 else score_a / total


# --- QD-score -------------------------------------------------------------------------------------


def fit_pca(x: np.ndarray, dims: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Mean and the top `dims` principal axes (rows) of the rows of `x`."""
    mean = x.mean(axis=0)
    _, _, vt = np.linalg.svd(x - mean, full_matrices=False)
    axes = np.zeros((dims, x.shape[1]))
    axes[: min(dims, len(vt))] = vt[:dims]
    return mean, axes


def qd_map(points: np.ndarray, quality: np.ndarray, lo: np.ndarray, hi: np.ndarray, cells: int) -> np.ndarray:
    """The `cells` x `cells` map: best quality of the points in each cell of the box [lo, hi], 0 if empty."""
    grid = np.zeros((cells, cells))
    span = np.where(hi > lo, hi - lo, 1.0)
    idx = np.clip(((points - lo) / span * cells).astype(int), 0, cells - 1)
    for (i, j), q in zip(idx, quality):
        grid[i, j] = max(grid[i, j], q)
    return grid


# --- runs and populations ------------------------------------------------------------------------


@dataclass
class Run:
    """A finished FMSP run: its name, directory, config dict and one archive per side."""

    name: str
    path: Path
    config: dict[str, Any]
    archives: dict[str, Archive]


def load_run(path: str | Path, name: str | None = None) -> Run:
    """Read a run directory written by `fmsp run` (config.yaml + archive/<side>/)."""
    path = Path(path)
    if not (path / "archive").is_dir():
        raise FileNotFoundError(f"{path} is not an FMSP run directory (no archive/ folder)")
    config = load_config(path / "config.yaml").to_dict() if (path / "config.yaml").exists() else {}
    archives = {
        d.name: Archive.load(d) for d in sorted((path / "archive").iterdir()) if (d / "meta.json").exists()
    }
    return Run(name or path.name, path, config, archives)


def generated_members(archive: Archive) -> list[ArchiveEntry]:
    """Active, FM-written members (seed baselines excluded)."""
    return [e for e in archive.elites() if e.origin != "baseline"]


def select_members(archive: Archive, top: int, n_random: int, rng: random.Random) -> list[ArchiveEntry]:
    """The `top` members by archive quality, then `n_random` of the rest drawn uniformly."""
    members = generated_members(archive)
    ranked = sorted(members, key=lambda e: -(e.quality if e.quality is not None else -math.inf))
    rest = ranked[top:]
    return ranked[:top] + rng.sample(rest, min(n_random, len(rest)))


@dataclass(frozen=True)
class Player:
    """One population member: where it comes from and its code."""

    label: str
    run: str  # "baseline" for the domain's human-designed policies
    side: str
    policy: PolicyCode


def _code_key(policy: PolicyCode) -> str:
    return hashlib.sha256(policy.code.encode()).hexdigest()


def build_population(domain: Domain, runs: Sequence[Run], top: int, n_random: int, seed: int) -> list[Player]:
    """Baselines plus each run's selection, per side; identical code is kept once."""
    rng = random.Random(seed)
    players: list[Player] = []
    seen: set[tuple[str, str]] = set()
    for side in domain.sides:
        candidates = [Player(f"baseline:{p.name}", "baseline", side, p) for p in domain.baselines(side)]
        for run in runs:
            picked = select_members(run.archives[side], top, n_random, rng) if side in run.archives else []
            candidates += [Player(f"{run.name}:{e.id}:{e.name}", run.name, side, e.policy()) for e in picked]
        for player in candidates:
            key = (side, _code_key(player.policy))
            if key not in seen:
                seen.add(key)
                players.append(player)
    return players


# --- playing matches -----------------------------------------------------------------------------

MatchRunner = Callable[[list[tuple[PolicyCode, PolicyCode]]], list[MatchOutcome]]


def sandbox_runner(domain: Domain, sandbox: Sandbox, chunk: int = 16) -> MatchRunner:
    """Plays (first-side, second-side) pairs through `sandbox`, each policy in its own process."""

    def play(pairs: list[tuple[PolicyCode, PolicyCode]]) -> list[MatchOutcome]:
        out: list[MatchOutcome] = []
        for start in tqdm(range(0, len(pairs), chunk), desc="matches", leave=False):
            out += sandbox.play_all(domain, pairs[start : start + chunk]).outcomes
        return out

    return play


# --- the evaluation ------------------------------------------------------------------------------


def elo_table(domain: Domain, players: list[Player], play: MatchRunner, n_boot: int, seed: int) -> list[dict]:
    """Round robin between the sides, then Elo with bootstrap CIs; one row per player. A player that failed a
    match gets `elo` None and its first `failure`; its matches are left out of everyone's fit."""
    first = [i for i, p in enumerate(players) if p.side == domain.sides[0]]
    second = [i for i, p in enumerate(players) if p.side == domain.sides[1]]
    pairs = [(i, j) for i in first for j in second]
    outcomes = play([(players[i].policy, players[j].policy) for i, j in pairs])
    failed: dict[int, dict[str, Any]] = {}
    for (i, j), o in zip(pairs, outcomes):
        for k, failure in ((i, o.failure_a), (j, o.failure_b)):
            if failure is not None:
                failed.setdefault(k, {**failure, "opponent": players[j if k == i else i].label})
    kept = [(i, j, win_share(o.score_a, o.score_b)) for (i, j), o in zip(pairs, outcomes)
            if o.ok and i not in failed and j not in failed]  # fmt: skip
    if not kept:
        raise RuntimeError("no match of the round robin finished; check the policies and the sandbox limits")
    rated = sorted({k for i, j, _ in kept for k in (i, j)})
    index = {k: n for n, k in enumerate(rated)}
    a, b, s = (np.array(x) for x in zip(*[(index[i], index[j], w) for i, j, w in kept]))
    elo, lo, hi = elo_ratings(a, b, s, len(rated), n_boot=n_boot, seed=seed)
    rows = []
    for k, p in enumerate(players):
        n = index.get(k)
        rows.append({"label": p.label, "run": p.run, "side": p.side, "name": p.policy.name,
                     "elo": None if n is None else float(elo[n]), "ci_low": None if n is None else float(lo[n]),
                     "ci_high": None if n is None else float(hi[n]), "failure": failed.get(k)})  # fmt: skip
    return rows


def quality_vs_baselines(
    domain: Domain, side: str, entries: list[ArchiveEntry], play: MatchRunner
) -> np.ndarray:
    """Mean score of each entry against the other side's human baselines (failed matches count 0)."""
    other = domain.sides[1 - domain.sides.index(side)]
    refs = domain.baselines(other)
    first = side == domain.sides[0]
    pairs = [(e.policy(), r) if first else (r, e.policy()) for e in entries for r in refs]
    results = play(pairs)
    key = "score_a" if first else "score_b"
    scores = np.array([getattr(r, key) if r.ok else 0.0 for r in results]).reshape(len(entries), len(refs))
    return scores.mean(axis=1)


@dataclass(frozen=True)
class Projection:
    """One side's fixed QD grid: embeddings x map to (x - mean) @ axes.T, in `cells` x `cells` cells over
    the box [lo, hi]; `embedder` names the model whose vectors it was fitted on."""

    embedder: str | None
    mean: np.ndarray
    axes: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    cells: int

    def project(self, x: np.ndarray) -> np.ndarray:
        return (np.asarray(x, dtype=float).reshape(-1, len(self.mean)) - self.mean) @ self.axes.T

    def to_dict(self) -> dict[str, Any]:
        return {"embedder": self.embedder, "mean": self.mean.tolist(), "axes": self.axes.tolist(),
                "lo": self.lo.tolist(), "hi": self.hi.tolist(), "cells": self.cells}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Projection:
        return cls(data["embedder"], *(np.array(data[k], dtype=float) for k in ("mean", "axes", "lo", "hi")),
                   int(data["cells"]))  # fmt: skip


def fit_projection(embeddings: np.ndarray, embedder: str | None, cells: int, margin: float = 0.1) -> Projection:
    """PCA plane of `embeddings` and the box around their projections, widened by `margin` of its span per
    side (an axis without spread gets a unit-wide box)."""
    mean, axes = fit_pca(embeddings)
    points = (embeddings - mean) @ axes.T
    lo, hi = points.min(axis=0), points.max(axis=0)
    pad = np.where(hi - lo > 1e-9, margin * (hi - lo), 0.5)
    return Projection(embedder, mean, axes, lo - pad, hi + pad, cells)


def save_projections(projections: dict[str, Projection], path: Path) -> None:
    write_json_atomic(path, {side: p.to_dict() for side, p in projections.items()})


def load_projections(path: Path) -> dict[str, Projection]:
    return {side: Projection.from_dict(d) for side, d in json.loads(Path(path).read_text()).items()}


def _side_embeddings(run: Run, side: str, members: list[ArchiveEntry]) -> np.ndarray:
    archive = run.archives[side]
    return np.array([archive.embedding(e.id) for e in members], dtype=float).reshape(len(members), archive.dim)


def _check_projection(projection: Projection, runs: Sequence[Run], side: str) -> None:
    for run in runs:
        archive = run.archives.get(side)
        if archive is None:
            continue
        if archive.dim != len(projection.mean):
            raise ValueError(f"run {run.name} ({side}) has {archive.dim}-d embeddings; the projection expects "
                             f"{len(projection.mean)}-d")  # fmt: skip
        if None not in (archive.embedder, projection.embedder) and archive.embedder != projection.embedder:
            raise ValueError(f"run {run.name} ({side}) was embedded by {archive.embedder!r}; the projection was "
                             f"fitted on {projection.embedder!r}")  # fmt: skip


def qd_scores(domain: Domain, runs: Sequence[Run], play: MatchRunner, cells: int,
              projections: dict[str, Projection] | None = None) -> tuple[dict[str, Any], dict[str, Projection]]:  # fmt: skip
    """Per side and run: the QD map on the side's fixed grid and its QD-score (see module docstring).

    `projections` (per side) are reused as they are; a side without one gets one fitted on these runs' members
    and baselines. Returns the results and the projections used (to save for the next evaluation).
    """
    out: dict[str, Any] = {}
    used = dict(projections or {})
    for side in domain.sides:
        with_side = [r for r in runs if side in r.archives]
        members = {r.name: generated_members(r.archives[side]) for r in with_side}
        embeddings = {r.name: _side_embeddings(r, side, members[r.name]) for r in with_side}
        if side not in used:
            pooled = [e for e in embeddings.values() if len(e)]
            if not pooled:
                continue
            baselines = [e for e in with_side[0].archives[side].entries if e.origin == "baseline"]
            fit_on = np.concatenate([*pooled, _side_embeddings(with_side[0], side, baselines)])
            used[side] = fit_projection(fit_on, with_side[0].archives[side].embedder, cells)
        projection = used[side]
        _check_projection(projection, with_side, side)
        out[side] = {"bounds": [projection.lo.tolist(), projection.hi.tolist()], "cells": projection.cells,
                     "runs": {}}  # fmt: skip
        for run in with_side:
            points = projection.project(embeddings[run.name])
            quality = (quality_vs_baselines(domain, side, members[run.name], play) if members[run.name]
                       else np.zeros(0))  # fmt: skip
            grid = qd_map(points, quality, projection.lo, projection.hi, projection.cells)
            outside = int(np.sum(np.any((points < projection.lo) | (points > projection.hi), axis=1)))
            out[side]["runs"][run.name] = {
                "qd_score": float(grid.sum()), "qd_score_mean": float(grid.mean()),
                "filled_cells": int(np.count_nonzero(grid)), "members": len(quality), "outside": outside,
                "map": grid.tolist(), "points": points.tolist(), "quality": quality.tolist(),
            }  # fmt: skip
    return out, used


def elo_markdown(rows: list[dict], summary: dict[str, Any], sides: Sequence[str]) -> str:
    """The Elo table (one section per side, best first) and the per-run summary as markdown."""
    lines = ["# FMSP evaluation", ""]
    for side in sides:
        lines += [f"## {side}", "", "| rank | policy | run | Elo | 95% CI |", "|---:|---|---|---:|---|"]
        ranked = sorted((r for r in rows if r["side"] == side and r["elo"] is not None), key=lambda r: -r["elo"])
        for rank, r in enumerate(ranked, 1):
            lines.append(f"| {rank} | {r['name']} | {r['run']} | {r['elo']:.0f} | "
                         f"[{r['ci_low']:.0f}, {r['ci_high']:.0f}] |")  # fmt: skip
        for r in (r for r in rows if r["side"] == side and r["elo"] is None):
            f = r["failure"]
            why = f"failed: {f['kind']} against {f['opponent']}" if f else "unrated: every opponent failed"
            lines.append(f"| – | {r['name']} ({why}) | {r['run']} | – | – |")
        lines.append("")
    lines += ["## runs", "", "| run | side | mean Elo | max Elo | QD-score |", "|---|---|---:|---:|---:|"]
    for run, by_side in summary.items():
        for side, v in by_side.items():
            mean, best, qd = (("–" if v[k] is None else f"{v[k]:{f}}") for k, f in
                              (("mean_elo", ".0f"), ("max_elo", ".0f"), ("qd_score", ".3f")))
            lines.append(f"| {run} | {side} | {mean} | {best} | {qd} |")
    return "\n".join(lines) + "\n"


# --- plots ----------------------------------------------------------------------------------------


def plot_elo(rows: list[dict], sides: Sequence[str], path: Path) -> None:
    """Elo with CIs per player, grouped by run, one panel per side."""
    # deferred: matplotlib takes ~1 s to import; only plots need it
    import matplotlib

    matplotlib.use("Agg")
    # deferred: pyplot only after matplotlib.use("Agg") has chosen the headless backend
    import matplotlib.pyplot as plt

    runs = sorted({r["run"] for r in rows}, key=lambda n: (n != "baseline", n))
    colors = {run: plt.get_cmap("tab10")(i % 10) for i, run in enumerate(runs)}
    fig, axes = plt.subplots(1, len(sides), figsize=(7 * len(sides), 5), squeeze=False)
    for ax, side in zip(axes[0], sides):
        side_rows = sorted(
            (r for r in rows if r["side"] == side and r["elo"] is not None),
            key=lambda r: (runs.index(r["run"]), -r["elo"]),
        )
        for x, r in enumerate(side_rows):
            err = [[r["elo"] - r["ci_low"]], [r["ci_high"] - r["elo"]]]
            ax.errorbar(x, r["elo"], yerr=err, fmt="o", color=colors[r["run"]], capsize=3)
        ax.set_xticks(range(len(side_rows)), [r["name"][:18] for r in side_rows], rotation=75, fontsize=7)
        ax.set_title(f"{side}: Elo with 95% bootstrap CI")
        ax.set_ylabel("Elo")
        for run in runs:
            ax.plot([], [], "o", color=colors[run], label=run)
        ax.legend(fontsize=8)
    fig.tight_layout()
    _save_figure(fig, path)


def plot_maps(qd: dict[str, Any], out_dir: Path) -> list[Path]:
    """One archive map per side and run on the shared grid; returns the PNG paths."""
    # deferred: matplotlib takes ~1 s to import; only plots need it
    import matplotlib

    matplotlib.use("Agg")
    # deferred: pyplot only after matplotlib.use("Agg") has chosen the headless backend
    import matplotlib.pyplot as plt

    paths = []
    for side, data in qd.items():
        (lo0, lo1), (hi0, hi1) = data["bounds"]
        if hi0 - lo0 < 1e-9:  # a single point (or identical ones) along an axis: show a unit-wide cell range
            lo0, hi0 = lo0 - 0.5, hi0 + 0.5
        if hi1 - lo1 < 1e-9:
            lo1, hi1 = lo1 - 0.5, hi1 + 0.5
        for run, r in data["runs"].items():
            fig, ax = plt.subplots(figsize=(5, 4.5))
            image = ax.imshow(np.array(r["map"]).T, origin="lower", extent=(lo0, hi0, lo1, hi1), aspect="auto",
                              vmin=0.0, vmax=1.0, cmap="viridis")  # fmt: skip
            if r["points"]:
                pts = np.array(r["points"])
                ax.scatter(pts[:, 0], pts[:, 1], s=10, c="white", edgecolors="black", linewidths=0.5)
            fig.colorbar(image, ax=ax, label="best quality in cell")
            ax.set_title(f"{run} / {side}: QD-score {r['qd_score']:.2f} ({r['filled_cells']} cells)")
            ax.set_xlabel("PC 1")
            ax.set_ylabel("PC 2")
            path = out_dir / f"map_{_safe(run)}_{_safe(side)}.png"
            _save_figure(fig, path)
            paths.append(path)
    return paths


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def _save_figure(fig: Any, path: Path) -> None:
    # deferred: matplotlib takes ~1 s to import; only plots need it
    import matplotlib.pyplot as plt

    write_atomic(path, lambda fh: fig.savefig(fh, format="png", dpi=120, bbox_inches="tight"))  # no label cut
    plt.close(fig)


# --- CLI ------------------------------------------------------------------------------------------


def evaluate(
    domain: Domain, runs: Sequence[Run], play: MatchRunner, out_dir: Path, *, top: int = 3, n_random: int = 15,
    cells: int = 10, n_boot: int = 200, seed: int = 0, projections: dict[str, Projection] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Elo table, QD-scores and plots for `runs`; writes results.json, elo.json, elo.md, elo.png,
    map_<run>_<side>.png and projection.json (the QD grids used; pass them back to keep cells fixed) to
    `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    players = build_population(domain, runs, top, n_random, seed)
    rows = elo_table(domain, players, play, n_boot, seed)
    qd, projections = qd_scores(domain, runs, play, cells, projections)
    save_projections(projections, out_dir / "projection.json")
    def elos(run: Run, side: str) -> list[float]:
        return [r["elo"] for r in rows if r["run"] == run.name and r["side"] == side and r["elo"] is not None]

    summary = {
        run.name: {
            side: {
                "mean_elo": float(np.mean(elos(run, side))) if elos(run, side) else None,
                "max_elo": max(elos(run, side)) if elos(run, side) else None,
                "qd_score": qd.get(side, {}).get("runs", {}).get(run.name, {}).get("qd_score"),
            }
            for side in domain.sides
        }
        for run in runs
    }
    results = {"domain": domain.name, "runs": {r.name: str(r.path) for r in runs}, "summary": summary,
               "elo": rows, "qd": qd}  # fmt: skip
    write_json_atomic(out_dir / "results.json", results)
    write_json_atomic(out_dir / "elo.json", rows)
    write_text_atomic(out_dir / "elo.md", elo_markdown(rows, summary, domain.sides))
    plot_elo(rows, domain.sides, out_dir / "elo.png")
    plot_maps(qd, out_dir)
    return results


@dataclass
class FMSPEvalConfig:
    """The keys of `fmsp eval` (command line or `--config` recipe); the checks run when it is built."""

    runs: list[str] = field(metadata={"help": "a run directory, optionally labelled (repeat for several runs)",
                                      "metavar": "[NAME=]DIR", "repeatable": True})
    out: str = field(metadata={"help": "output directory for results.json and the plots"})
    domain: str | None = field(default=None, metadata={"help": "domain name (default: from the first run's config.yaml)"})
    domain_config: dict[str, Any] | None = field(
        default=None, metadata={"help": "the domain's parameters as JSON or YAML flow (default: the first run's)"})
    top: int = field(default=3, metadata={"help": "best archive members per run and side in the population"})
    random: int = field(default=15, metadata={"help": "further archive members per run and side, drawn at random "
                                                      "(seeded)"})  # fmt: skip
    cells: int = field(default=10, metadata={"help": "QD grid: cells per axis of the shared PCA plane"})
    projection: str | None = field(
        default=None,
        metadata={"help": "projection.json of an earlier `fmsp eval` (the same QD grid across evaluations)"})
    bootstrap: int = field(default=200, metadata={"help": "bootstrap refits for the Elo 95%% intervals"})
    seed: int = field(default=0, metadata={"help": "seed of the random members and the bootstrap"})
    timeout: float = field(default=300.0, metadata={"help": "wall-clock seconds per policy process (one match)"})
    unsafe_sandbox: bool = field(
        default=False,
        metadata={"help": "run even where an isolation layer is missing (the present layers still apply)"})
    rng_key: str = field(default="", metadata={"help": "secret key of the policies' rngs and the deals (default: "
                                               "made once and kept in OUT/rng_key.json; pass it again to replay)"})

    def __post_init__(self) -> None:
        NON_NEGATIVE_INT.check("--top", self.top)
        NON_NEGATIVE_INT.check("--random", self.random)
        COUNT.check("--cells", self.cells)
        Range(20, integer=True).check("--bootstrap", self.bootstrap)  # fewer resamples give no percentile interval
        NON_NEGATIVE_INT.check("--seed", self.seed)
        POSITIVE.check("--timeout", self.timeout)
        check_output_dir("--out", self.out)


def load_runs(specs: Sequence[str]) -> list[Run]:
    """The runs named on a command line as `[NAME=]DIR` (one usage error naming the bad spec)."""
    runs = []
    for spec in specs:
        name, _, path = spec.rpartition("=")
        try:
            runs.append(load_run(path, name or None))
        except (FileNotFoundError, ValueError) as exc:
            raise UsageError(f"--run {spec!r}: {exc}") from exc
    return runs


def parser():
    """The command line of `fmsp eval`."""
    # deferred: sepo.config.recipes imports transformers' argument parser (~1.4 s)
    from sepo.config.recipes import RecipeParser

    return RecipeParser((FMSPEvalConfig,), prog="fmsp eval", description=__doc__.split("\n")[0])


def main(argv: list[str] | None = None) -> int:
    (args,) = parser().parse(argv)
    runs = load_runs(args.runs)
    if args.projection is not None and not Path(args.projection).is_file():
        raise UsageError(f"--projection {args.projection} does not exist (it is the projection.json an earlier "
                         f"`fmsp eval` wrote)")  # fmt: skip
    domain_name = args.domain or runs[0].config.get("domain")
    if not domain_name:
        raise UsageError("--domain is required when the run has no config.yaml")
    check_choice("domain", domain_name, DOMAINS)
    domain_config = args.domain_config if args.domain_config is not None else runs[0].config.get("domain_config", {})
    domain = make_domain(domain_name, **domain_config)
    key = persist_run_rng_key(args.out, args.rng_key)  # keys the policies' rngs and the deals (envs.sandbox.rng)
    sandbox = Sandbox(SandboxConfig(total_timeout_s=args.timeout, unsafe=args.unsafe_sandbox, rng_key=key))
    try:
        print(sandbox.check(), file=sys.stderr)
    except SandboxUnavailable as exc:
        raise UsageError(str(exc)) from exc
    results = evaluate(domain, runs, sandbox_runner(domain, sandbox), Path(args.out), top=args.top,
                       n_random=args.random, cells=args.cells, n_boot=args.bootstrap, seed=args.seed,
                       projections=load_projections(Path(args.projection)) if args.projection else None)  # fmt: skip
    print(json.dumps(results["summary"], indent=2))
    return 0
