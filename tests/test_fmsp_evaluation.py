"""Elo (Bradley-Terry + bootstrap), QD-score on a shared PCA grid, and `fmsp eval` end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fmsp.archive import Archive, ArchiveEntry
from fmsp.config import FMSPConfig, save_config
from fmsp.domains import make_domain
from fmsp.domains.loading import run_entry_in_process
from fmsp.evaluation import elo_ratings, fit_pca, load_run, main, qd_map, sandbox_runner, win_share
from fmsp.sandbox import Sandbox


def test_elo_recovers_known_ratings_from_synthetic_matches():
    rng = np.random.default_rng(0)
    true = {"p": np.array([1300.0, 1150, 1000, 850, 700]), "e": np.array([1250.0, 1100, 950, 800])}
    ratings = np.concatenate([true["p"], true["e"]])
    first, second, score = [], [], []
    for i in range(5):
        for j in range(5, 9):
            p = 1.0 / (1.0 + 10 ** ((ratings[j] - ratings[i]) / 400))
            first.append(i), second.append(j), score.append(rng.binomial(100, p) / 100)
    elo, lo, hi = elo_ratings(first, second, score, 9, n_boot=200, seed=1)
    shifted = ratings - ratings.mean() + 1000.0  # the fit is anchored at mean 1000
    assert np.array_equal(np.argsort(-elo[:5]), np.argsort(-shifted[:5]))
    assert np.array_equal(np.argsort(-elo[5:]), np.argsort(-shifted[5:]))
    assert np.max(np.abs(elo - shifted)) < 60
    covered = np.mean((lo <= shifted) & (shifted <= hi))
    assert covered >= 0.75, (lo, shifted, hi)
    assert np.all(hi - lo > 0)


def test_bootstrap_ci_ignores_resamples_without_the_player():
    """2 x 2 round robin: a resample misses player 0's matches with probability (1/2)^4 > 2.5%; such a
    replicate holds only the prior (Elo 1000) and must not drag the CI of a player who wins every match to 1000."""
    first, second, score = [0, 0, 1, 1], [2, 3, 2, 3], [0.95, 0.95, 0.5, 0.5]
    elo, lo, hi = elo_ratings(first, second, score, 4, n_boot=400, seed=0)
    assert elo[0] > 1200 and lo[0] > 1100 and lo[0] <= elo[0] <= hi[0]


def test_win_share():
    assert win_share(0.7, 0.3) == pytest.approx(0.7)
    assert win_share(0.6, 0.2) == pytest.approx(0.75)
    assert win_share(0.0, 0.0) == 0.5


def test_qd_map_matches_a_hand_count():
    points = np.array([[0.1, 0.1], [0.2, 0.2], [0.9, 0.9], [0.6, 0.1], [1.0, 1.0]])
    quality = np.array([0.3, 0.5, 0.2, 0.4, 0.7])
    grid = qd_map(points, quality, np.array([0.0, 0.0]), np.array([1.0, 1.0]), cells=2)
    # cells: (0,0) holds 0.3 and 0.5 -> 0.5; (1,1) holds 0.2 and 0.7 (the upper edge) -> 0.7; (1,0) 0.4; (0,1) empty
    assert grid.tolist() == [[0.5, 0.0], [0.4, 0.7]]
    assert grid.sum() == pytest.approx(1.6)


def test_pca_finds_the_spread_direction():
    rng = np.random.default_rng(0)
    x = np.outer(rng.normal(size=200), [3.0, 0, 0, 0]) + 0.01 * rng.normal(size=(200, 4))
    mean, axes = fit_pca(x)
    assert abs(axes[0, 0]) == pytest.approx(1.0, abs=1e-3)


PURSUER = """import numpy as np


class Gain{k}:
    name = "pursuit_gain_{k}"
    description = "pure pursuit with gain {k}"

    def __call__(self, obs):
        bearing = np.arctan2(obs["evader_y"] - obs["pursuer_y"], obs["evader_x"] - obs["pursuer_x"])
        error = (bearing - obs["pursuer_heading"] + np.pi) % (2 * np.pi) - np.pi
        return np.clip({k} * error, -1.0, 1.0)
"""
EVADER = """import numpy as np


class Offset{k}:
    name = "flee_offset_{k}"
    description = "flee at an angle offset {k}"

    def __call__(self, obs):
        return np.arctan2(obs["evader_y"] - obs["pursuer_y"], obs["evader_x"] - obs["pursuer_x"]) + 0.{k}
"""


def make_run(path, seed: int, n: int = 4) -> None:
    """A run directory like `fmsp run` writes: config.yaml and archive/<side>/ with embeddings."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True)
    save_config(
        FMSPConfig(domain="car_tag", domain_config={"n_games": 6, "max_steps": 60}), path / "config.yaml"
    )
    for side, template in (("pursuer", PURSUER), ("evader", EVADER)):
        archive = Archive(side, 8, path / "archive" / side)
        for k in range(1, n + 1):
            code = template.format(k=k + seed)
            v = rng.normal(size=8)
            entry = ArchiveEntry(id=archive.next_id(), name=f"m{k}", description="", code=code, side=side,
                                 iteration=k, scores={"quality": float(k) / n})  # fmt: skip
            archive.add(entry, v / np.linalg.norm(v))


def test_evaluate_runs_in_process_and_through_the_cli(tmp_path):
    for name, seed in (("qdsp", 1), ("vfmsp", 5)):
        make_run(tmp_path / name, seed)
    # in-process match runner (trusted test code): the evaluation pipeline itself
    from fmsp.evaluation import evaluate

    domain = make_domain("car_tag", n_games=6, max_steps=60)
    cfg = domain.match_config()
    calls = []

    def play(pairs):
        calls.append(len(pairs))
        return [run_entry_in_process(domain.match_entry, a.to_dict(), b.to_dict(), cfg) for a, b in pairs]

    runs = [load_run(tmp_path / "qdsp"), load_run(tmp_path / "vfmsp")]
    out = evaluate(domain, runs, play, tmp_path / "eval", top=2, n_random=1, cells=4, n_boot=50)
    rows = out["elo"]
    # 2 baselines + 3 per run per side
    assert sum(r["side"] == "pursuer" for r in rows) == 8 and sum(r["side"] == "evader" for r in rows) == 8
    assert calls[0] == 64  # the full round robin between the sides
    assert abs(np.mean([r["elo"] for r in rows]) - 1000) < 1e-6
    assert all(r["ci_low"] <= r["elo"] <= r["ci_high"] for r in rows)
    qd = out["qd"]["pursuer"]["runs"]["qdsp"]
    assert qd["members"] == 4 and 1 <= qd["filled_cells"] <= 4
    assert qd["qd_score"] == pytest.approx(sum(map(sum, qd["map"])))
    assert (tmp_path / "eval" / "elo.png").stat().st_size > 1000
    assert (tmp_path / "eval" / "map_qdsp_pursuer.png").exists()
    assert json.loads((tmp_path / "eval" / "elo.json").read_text()) == rows
    table = (tmp_path / "eval" / "elo.md").read_text()
    best = max((r for r in rows if r["side"] == "evader"), key=lambda r: r["elo"])
    assert f"| 1 | {best['name']}" in table.split("## evader")[1]
    # one row per player and per (run, side), plus a header row per side table and for the run table
    assert table.count("\n| ") == len(rows) + 2 * 2 + 2 + 1

    # the CLI through the real sandbox
    rc = main(["--run", f"qdsp={tmp_path / 'qdsp'}", "--run", str(tmp_path / "vfmsp"), "--out", str(tmp_path / "cli"),
               "--top", "1", "--random", "0", "--bootstrap", "20", "--cells", "3"])  # fmt: skip
    assert rc == 0
    results = json.loads((tmp_path / "cli" / "results.json").read_text())
    assert set(results["summary"]) == {"qdsp", "vfmsp"} and results["domain"] == "car_tag"
    assert len(results["elo"]) == 2 * (2 + 2)


def test_sandbox_runner_reports_failing_matches_as_none():
    domain = make_domain("car_tag", n_games=4, max_steps=30)
    good = domain.baselines("pursuer")[0]
    crash = type(good)(
        "crash",
        "",
        "class C:\n    name='c'\n    description=''\n    def __call__(self, o):\n        raise RuntimeError('x')\n",
        "pursuer",
    )  # noqa: E501
    evader = domain.baselines("evader")[0]
    results = sandbox_runner(domain, Sandbox(), chunk=4)([(good, evader), (crash, evader)])
    assert results[0] is not None and results[1] is None


def test_cli_errors_are_clear(tmp_path, capsys):
    from fmsp.cli import main as fmsp_main

    assert fmsp_main(["eval", "--run", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "fmsp eval: error: --run " in (err := capsys.readouterr().err) and "not an FMSP run directory" in err
