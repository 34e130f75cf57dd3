"""The learning-curves command (sepo.study.curves) on hand-made checkpoints.json files: the curves it reads,
the MOVER intervals of its differences (hand-computed), and that a difference is called one only when its
interval excludes zero."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sepo.study.curves import main

HYPOT_005_002 = math.sqrt(0.05**2 + 0.02**2)  # 0.053852
HYPOT_010_005 = math.sqrt(0.10**2 + 0.05**2)  # 0.111803


def _entry(value: float, lo: float | None = None, hi: float | None = None, n: int = 12) -> dict:
    return {"value": value, "ci": None if lo is None else [lo, hi], "n": n}


def _entries(expl: dict, j: dict) -> dict:
    return {"exploitability": expl, "safety": j, "u": _entry(0.1, 0.0, 0.2), "e": _entry(0.5, 0.4, 0.6),
            "c": _entry(0.0)}


def _write_arm(study: Path, arm: str, records: list[tuple[int, dict]], seed: int = 42) -> None:
    out = study / arm / f"seed_{seed}"
    out.mkdir(parents=True)
    rows = [{"step": s, "checkpoint": f"checkpoint-{s}", "safety": e["safety"]["value"], "games": {"kuhn": e}}
            for s, e in records]
    (out / "checkpoints.json").write_text(json.dumps({"checkpoints": rows, "best": None}))


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """Two arms evaluated at steps 2 and 4, and a study report whose base row is step 0."""
    base = _entries(_entry(0.20, 0.15, 0.25), _entry(-1.0, -1.5, -0.5))
    report = {"eval": {"base": {"metrics": {k: v for k, v in base.items() if k != "exploitability"},
                                "exploitability": base["exploitability"]}}}
    (tmp_path / "report.json").write_text(json.dumps(report))
    _write_arm(tmp_path, "per_pool", [(2, _entries(_entry(0.30, 0.10, 0.50), _entry(-0.8, -1.2, -0.4))),
                                      (4, _entries(_entry(0.30, 0.25, 0.40), _entry(-0.2, -0.4, 0.1)))])
    _write_arm(tmp_path, "reward_only", [(2, _entries(_entry(0.20, 0.00, 0.40), _entry(-0.9))),
                                         (4, _entries(_entry(0.10, 0.05, 0.12), _entry(-0.3, -0.6, 0.0)))])
    return tmp_path


def test_curves_values_and_difference_rule(study: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["--study", str(study), "--out", str(out)]) == 0
    data = json.loads((out / "curves.json").read_text())
    # the curves: step 0 from the study's base row, then every checkpoint
    assert [p["step"] for p in data["curves"]["per_pool"]] == [0, 2, 4]
    assert data["curves"]["reward_only"][2]["exploitability"] == {"value": 0.10, "ci": [0.05, 0.12], "n": 12}
    assert data["curves"]["per_pool"][0]["J"]["value"] == -1.0
    rows = {r["step"]: r for r in data["between_arms"]["per_pool − reward_only"]}
    assert sorted(rows) == [2, 4]  # step 0 is the arms' shared start: no difference is computed there
    # step 4: 0.30 [0.25, 0.40] − 0.10 [0.05, 0.12] = 0.20 [0.20 − hypot(0.05, 0.02), 0.20 + hypot(0.10, 0.05)]
    d = rows[4]["exploitability"]
    assert d["diff"] == pytest.approx(0.20)
    assert d["ci"] == pytest.approx([0.20 - HYPOT_005_002, 0.20 + HYPOT_010_005])
    assert d["excludes_zero"] is True
    # step 2: 0.30 [0.10, 0.50] − 0.20 [0.00, 0.40] = 0.10 [0.10 − hypot(0.2, 0.2), ...]: contains zero
    d = rows[2]["exploitability"]
    assert d["ci"][0] == pytest.approx(0.10 - math.sqrt(0.08))
    assert d["excludes_zero"] is False
    # no interval for reward_only's J at step 2: never called a difference, however large
    assert rows[2]["J"]["diff"] == pytest.approx(0.1) and rows[2]["J"]["ci"] is None
    assert rows[2]["J"]["excludes_zero"] is False
    # step 4 J: −0.2 [−0.4, 0.1] − (−0.3) [−0.6, 0.0] = 0.1, interval [0.1 − hypot(0.2, 0.3), ...] holds zero
    assert rows[4]["J"]["excludes_zero"] is False
    # each arm's change from step 0: per_pool's J −0.2 [−0.4, 0.1] − (−1.0 [−1.5, −0.5]) = 0.8, lower end
    # 0.8 − hypot(0.2, 0.5) = 0.261 > 0: a rise; its exploitability 0.30 − 0.20 = 0.10, lower end
    # 0.10 − hypot(0.05, 0.05) = 0.029 > 0 as well
    change = data["change"]["per_pool"]
    assert (change["from_step"], change["to_step"]) == (0, 4)
    assert change["J"]["ci"][0] == pytest.approx(0.8 - math.hypot(0.2, 0.5))
    assert change["J"]["excludes_zero"] is True
    assert change["exploitability"]["ci"][0] == pytest.approx(0.10 - math.hypot(0.05, 0.05))
    assert data["change"]["reward_only"]["exploitability"]["excludes_zero"] is True  # 0.10 − 0.20 < 0
    # the report bolds exactly the differences whose interval excludes zero
    md = (out / "curves.md").read_text()
    assert "| 4 | **+0.200 [+0.146, +0.312]** * |" in md
    assert "| 2 | +0.100 [−0.183, +0.383] |" in md
    assert "J rose (**+0.800" in md
    assert (out / "curves.png").stat().st_size > 0
    # one training seed: the curves are named by their arms as before; no interval across seeds
    assert data["seeds"] == [42] and data["across_seeds"]["between_arms"] == {}
    assert "n=1, no interval across seeds" in md and "one seed per arm" in md


def test_missing_arm_is_a_clear_error(study: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["--study", str(study), "--arms", "per_pool,shared", "--out", str(tmp_path / "o")]) == 2
    assert "arm 'shared'" in capsys.readouterr().err


def test_experiment_recipe_evaluates_its_start_as_the_callback_evaluates_checkpoints() -> None:
    """Step 0 of the curves is the study's "base" row: its eval settings must be the training callback's (the
    eval seed that of the first training seed; the callback evaluates each training seed on its own seed)."""
    from sepo.grpo.callbacks import eval_config
    from sepo.study.config import StudyConfig, arm_configs

    cfg = StudyConfig.from_yaml("configs/experiments/kuhn_default.yaml")
    assert sorted(cfg.arms) == ["per_pool", "reward_only"] and cfg.seeds == [42, 43, 44]
    for arm in cfg.arms:
        for seed in cfg.seeds:
            args, _ = arm_configs(cfg, arm, seed)
            callback = eval_config(args)
            assert args.seed == seed and callback.seed == seed + 1000
            for key, value in cfg.eval.items():
                if key != "seed" or seed == cfg.seeds[0]:
                    assert getattr(callback, key) == value, (arm, seed, key)
            assert callback.episodes_per_opponent > 1  # an interval in every stratum


def test_two_seed_curves_give_t_intervals_across_seeds(tmp_path: Path) -> None:
    """Two arms x two seeds: per arm and step the mean across seeds with its t-interval, and the paired arm
    difference (at each seed, then the t-interval), each equal to a hand computation from the per-seed values."""
    from scipy import stats

    expl = {("per_pool", 1): 0.30, ("per_pool", 2): 0.40, ("reward_only", 1): 0.10, ("reward_only", 2): 0.15}
    for (arm, seed), value in expl.items():
        _write_arm(tmp_path, arm, [(2, _entries(_entry(value, value - 0.05, value + 0.05), _entry(-value)))], seed)
    out = tmp_path / "out"
    assert main(["--study", str(tmp_path), "--out", str(out)]) == 0
    data = json.loads((out / "curves.json").read_text())
    assert data["seeds"] == [1, 2]
    assert sorted(data["curves"]) == ["per_pool/seed_1", "per_pool/seed_2", "reward_only/seed_1", "reward_only/seed_2"]
    assert sorted(data["between_arms"]) == [f"per_pool/seed_{s} − reward_only/seed_{s}" for s in (1, 2)]
    half = stats.t.ppf(0.975, 1) * math.sqrt(((0.30 - 0.35) ** 2 + (0.40 - 0.35) ** 2) / 1) / math.sqrt(2)
    (step,) = data["across_seeds"]["curves"]["per_pool"]
    t = step["exploitability"]
    assert step["step"] == 2 and t["values"] == {"1": 0.30, "2": 0.40} and t["n"] == 2
    assert [t["mean"], t["low"], t["high"]] == pytest.approx([0.35, 0.35 - half, 0.35 + half])
    assert step["J"]["mean"] == pytest.approx(-0.35)
    # paired: differences 0.20 and 0.25 at the two seeds; mean 0.225, sd = 0.05 / sqrt(2)
    (row,) = data["across_seeds"]["between_arms"]["per_pool − reward_only"]
    half = stats.t.ppf(0.975, 1) * (0.05 / math.sqrt(2)) / math.sqrt(2)
    d = row["exploitability"]
    assert d["values"] == pytest.approx({"1": 0.20, "2": 0.25})
    assert [d["mean"], d["low"], d["high"]] == pytest.approx([0.225, 0.225 - half, 0.225 + half])
    md = (out / "curves.md").read_text()
    assert "## Across training seeds (seeds 1, 2)" in md and "### per_pool − reward_only per step" in md
    assert "only 2 training seeds" in md and (out / "curves.png").stat().st_size > 0


def test_arms_with_different_seeds_are_an_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _write_arm(tmp_path, "per_pool", [(2, _entries(_entry(0.3), _entry(-0.3)))], seed=1)
    _write_arm(tmp_path, "reward_only", [(2, _entries(_entry(0.3), _entry(-0.3)))], seed=2)
    assert main(["--study", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "different seeds" in capsys.readouterr().err


def test_the_game_and_title_default_to_the_one_evaluated_game(study: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    """Without --game the curves read the one game the checkpoints hold, and the default title names it; with
    two games evaluated, --game must choose."""
    out = tmp_path / "out"
    assert main(["--study", str(study), "--out", str(out)]) == 0
    assert json.loads((out / "curves.json").read_text())["game"] == "kuhn"
    assert (out / "curves.md").read_text().startswith("# Learning curves: kuhn, per-pool credit vs reward only")
    both = tmp_path / "both"
    for arm in ("per_pool", "reward_only"):
        _write_arm(both, arm, [(2, _entries(_entry(0.3), _entry(-0.3)))])
        path = both / arm / "seed_42" / "checkpoints.json"
        data = json.loads(path.read_text())
        data["checkpoints"][0]["games"]["ipd"] = data["checkpoints"][0]["games"]["kuhn"]
        path.write_text(json.dumps(data))
    assert main(["--study", str(both), "--out", str(tmp_path / "o")]) == 2
    assert "choose one with --game" in capsys.readouterr().err
    assert main(["--study", str(both), "--out", str(tmp_path / "o"), "--game", "ipd"]) == 0
