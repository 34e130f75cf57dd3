"""Elo (Bradley-Terry + bootstrap), QD-score on a fixed PCA grid, and `fmsp eval` end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fmsp.archive import Archive, ArchiveEntry
from fmsp.config import FMSPConfig, save_config
from fmsp.domain import PolicyCode
from fmsp.domains import make_domain
from fmsp.evaluation import (
    Player,
    Projection,
    elo_markdown,
    elo_ratings,
    elo_table,
    fit_pca,
    fit_projection,
    load_run,
    main,
    qd_map,
    qd_scores,
    sandbox_runner,
    win_share,
)
from fmsp.sandbox import Sandbox
from sepo.config.checks import UsageError


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


def make_run(path, seed: int, n: int = 4, embedder: str = "test-embedder") -> None:
    """A run directory like `fmsp run` writes: config.yaml and archive/<side>/ with embeddings."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True)
    save_config(
        FMSPConfig(domain="car_tag", domain_config={"n_games": 6, "max_steps": 60}), path / "config.yaml"
    )
    for side, template in (("pursuer", PURSUER), ("evader", EVADER)):
        archive = Archive(side, 8, path / "archive" / side, embedder)
        for k in range(1, n + 1):
            code = template.format(k=k + seed)
            v = rng.normal(size=8)
            entry = ArchiveEntry(id=archive.next_id(), name=f"m{k}", description="", code=code, side=side,
                                 iteration=k, scores={"quality": float(k) / n})  # fmt: skip
            archive.add(entry, v / np.linalg.norm(v))


def test_evaluate_runs_in_process_and_through_the_cli(tmp_path):
    for name, seed in (("qdsp", 1), ("vfmsp", 5)):
        make_run(tmp_path / name, seed)
    # the sandboxed runner, counting what it is asked to play
    from fmsp.evaluation import evaluate

    domain = make_domain("car_tag", n_games=6, max_steps=60)
    calls = []

    def play(pairs):
        calls.append(len(pairs))
        return sandbox_runner(domain, Sandbox())(pairs)

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
    # a third run, on the first evaluation's grid: the first two runs' cells do not move
    make_run(tmp_path / "nssp", 9)
    rc = main(["--run", f"qdsp={tmp_path / 'qdsp'}", "--run", str(tmp_path / "vfmsp"), "--run", str(tmp_path / "nssp"),
               "--out", str(tmp_path / "cli3"), "--top", "1", "--random", "0", "--bootstrap", "20",
               "--projection", str(tmp_path / "cli" / "projection.json")])  # fmt: skip
    assert rc == 0
    again = json.loads((tmp_path / "cli3" / "results.json").read_text())
    for side in ("pursuer", "evader"):
        for run in ("qdsp", "vfmsp"):
            assert again["qd"][side]["runs"][run] == results["qd"][side]["runs"][run]
        assert again["qd"][side]["runs"]["nssp"]["members"] == 4


def sandboxed_play(domain):
    return sandbox_runner(domain, Sandbox())


def test_qd_cells_do_not_move_when_a_run_is_added(tmp_path):
    for name, seed in (("a", 1), ("b", 5), ("c", 9)):
        make_run(tmp_path / name, seed)
    domain = make_domain("car_tag", n_games=4, max_steps=40)
    play = sandboxed_play(domain)
    two = [load_run(tmp_path / "a"), load_run(tmp_path / "b")]
    three = [*two, load_run(tmp_path / "c")]
    first, projections = qd_scores(domain, two, play, cells=4)
    reused, same = qd_scores(domain, three, play, cells=4, projections=projections)
    refit, _ = qd_scores(domain, three, play, cells=4)
    assert same == projections
    for side in ("pursuer", "evader"):
        for run in ("a", "b"):
            assert reused[side]["runs"][run]["points"] == first[side]["runs"][run]["points"]
            assert reused[side]["runs"][run]["map"] == first[side]["runs"][run]["map"]
        # refitting on three runs would have moved them: the fixed projection is what keeps them
        assert refit[side]["runs"]["a"]["points"] != first[side]["runs"]["a"]["points"]


def test_fit_projection_box_and_checks(tmp_path):
    x = np.array([[0.0, 0.0, 1.0], [2.0, 0.0, 1.0], [4.0, 0.0, 1.0]])
    p = fit_projection(x, "m", cells=5)
    assert abs(p.axes[0, 0]) == pytest.approx(1.0)
    # projections -2, 0, 2 along the first axis: box [-2, 2] widened by 10% of its span; no spread on the second
    assert p.lo.tolist() == pytest.approx([-2.4, -0.5]) and p.hi.tolist() == pytest.approx([2.4, 0.5])
    assert abs(p.project(np.array([[3.0, 0.0, 1.0]]))[0, 0]) == pytest.approx(1.0)
    make_run(tmp_path / "run", 1, embedder="another-model")
    other = Projection("test-embedder", np.zeros(8), np.eye(2, 8), -np.ones(2), np.ones(2), 3)
    domain = make_domain("car_tag", n_games=2, max_steps=10)
    with pytest.raises(ValueError, match="another-model"):
        qd_scores(domain, [load_run(tmp_path / "run")], sandboxed_play(domain), 3, {"pursuer": other})
    with pytest.raises(UsageError, match="--projection .* does not exist"):
        main(["--run", str(tmp_path / "run"), "--out", str(tmp_path / "o"), "--projection", str(tmp_path / "none")])


def test_a_failing_policy_is_named_unrated_and_leaves_the_others_unchanged():
    """A crashing pursuer: its row says it failed (and against whom); it gets no rating; every other player's
    rating is exactly the one of a round robin without it, and none of them is flagged."""
    domain = make_domain("car_tag", n_games=4, max_steps=30)
    pursuers, evaders = domain.baselines("pursuer"), domain.baselines("evader")
    crash = PolicyCode("crash", "", "class C:\n    name='c'\n    description=''\n    def __call__(self, o):\n"
                       "        raise RuntimeError('x')\n", "pursuer")  # fmt: skip
    players = [Player(f"p:{p.name}", "baseline", "pursuer", p) for p in [*pursuers, crash]]
    players += [Player(f"e:{p.name}", "baseline", "evader", p) for p in evaders]
    play = sandbox_runner(domain, Sandbox(), chunk=3)
    rows = elo_table(domain, players, play, n_boot=30, seed=0)
    clean = elo_table(domain, [p for p in players if p.policy is not crash], play, n_boot=30, seed=0)
    failed = next(r for r in rows if r["name"] == "crash")
    assert failed["elo"] is None and failed["ci_low"] is None
    assert failed["failure"]["kind"] == "exception" and "RuntimeError: x" in failed["failure"]["message"]
    assert failed["failure"]["opponent"] == "e:" + evaders[0].name
    others = [r for r in rows if r["name"] != "crash"]
    assert [r["elo"] for r in others] == [r["elo"] for r in clean]
    assert all(r["failure"] is None for r in others)
    assert "crash (failed: exception against e:" in elo_markdown(rows, {}, domain.sides)


def test_cli_errors_are_clear(tmp_path, capsys):
    from fmsp.cli import main as fmsp_main

    assert fmsp_main(["eval", "--run", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "fmsp eval: error: --run " in (err := capsys.readouterr().err) and "not an FMSP run directory" in err


def test_a_policy_that_fails_only_some_matches_has_all_its_matches_left_out():
    """Hand-made outcomes: pursuer "flaky" beats every evader but fails against "e2". Its wins must not count for
    anyone: every other rating equals the round robin without it."""
    from fmsp.sandbox import MatchOutcome

    domain = make_domain("car_tag")
    code = {name: PolicyCode(name, "", f"# {name}", side) for name, side in
            (("p1", "pursuer"), ("p2", "pursuer"), ("flaky", "pursuer"), ("e1", "evader"), ("e2", "evader"))}  # fmt: skip
    share = {("p1", "e1"): 0.7, ("p1", "e2"): 0.4, ("p2", "e1"): 0.55, ("p2", "e2"): 0.2, ("flaky", "e1"): 1.0}

    def play(pairs):
        out = []
        for a, b in pairs:
            if (a.name, b.name) == ("flaky", "e2"):
                out.append(MatchOutcome(None, None, {"policy": "flaky", "kind": "crash", "message": "died", "detail": ""}))
            else:
                out.append(MatchOutcome(share[a.name, b.name], 1.0 - share[a.name, b.name]))
        return out

    players = [Player(n, "run", p.side, p) for n, p in code.items()]
    rows = elo_table(domain, players, play, n_boot=20, seed=0)
    clean = elo_table(domain, [p for p in players if p.label != "flaky"], play, n_boot=20, seed=0)
    assert [r["elo"] for r in rows if r["label"] != "flaky"] == [r["elo"] for r in clean]
    flaky = next(r for r in rows if r["label"] == "flaky")
    assert flaky["elo"] is None and flaky["failure"]["kind"] == "crash" and flaky["failure"]["opponent"] == "e2"
