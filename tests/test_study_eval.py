"""The study's evaluation on a tiny model: every arm's final and best checkpoints side by side with intervals,
and the differences between arms with paired intervals, marked when they exclude zero."""

from __future__ import annotations

import json

import yaml

from sepo.eval.study.report import report_markdown
from sepo.eval.study.run import main


def test_study_reports_best_and_final_checkpoints_and_arm_differences(tmp_path, tiny_model_dir):
    config = {
        "output_dir": str(tmp_path / "study"),
        "eval_base": False,
        "train": {
            "model_name_or_path": tiny_model_dir, "games": ["ipd"], "game_params": {"ipd": {"num_rounds": 2}},
            "pool_mix": {"training": ["tit_for_tat"]}, "num_generations": 2, "per_device_train_batch_size": 2,
            "max_turn_tokens": 4, "max_completion_length": 128, "learning_rate": 5e-2, "use_cpu": True,
            "bf16": False, "max_steps": 2, "save_strategy": "steps", "save_steps": 1, "report_to": "none",
            "logging_steps": 1, "keep_best_by_safety": True, "checkpoint_eval_episodes": 1, "seed": 0,
            "disable_tqdm": True,
        },
        "arms": {"reward_only": {"credit": "reward_only"},
                 "per_pool": {"credit": "per_pool", "pool_mix": {"training": ["tit_for_tat"], "exploit": ["always_defect"]},
                              "per_device_train_batch_size": 4}},
        "eval": {"episodes_per_opponent": 2, "max_turn_tokens": 4, "progress": False, "bootstrap_resamples": 200},
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["--config", str(path)]) in (0, 1)  # 1 only if the exact check failed, which is not tested here
    out = tmp_path / "study"
    report = json.loads((out / "report.json").read_text())
    for arm in ("reward_only", "per_pool"):
        ck = report["checkpoints"][arm]
        curve = json.loads((out / arm / "train" / "checkpoints.json").read_text())
        assert ck["final_step"] == 2 and [r["step"] for r in ck["curve"]] == [1, 2]
        assert ck["best_step"] == curve["best"]["step"]
        labels = ck["labels"]
        assert labels["final"] == arm and labels["best"] == (arm if ck["best_step"] == 2 else f"{arm}@best")
        for label in set(labels.values()):
            m = report["eval"][label]["metrics"]
            assert m["safety"]["ci"][0] <= m["safety"]["value"] <= m["safety"]["ci"][1]
            assert m["u"]["n"] == 8  # 4 training opponents x 2 episodes, on the study's own seeds
    for kind in ("best", "final"):
        (d,) = report["differences"][kind].values()  # the one pair of arms
        for name in ("safety", "u", "e", "c", "x"):
            assert d[name]["paired"] and d[name]["ci"][0] <= d[name]["diff"] <= d[name]["ci"][1]
            assert d[name]["excludes_zero"] == (d[name]["ci"][0] > 0 or d[name]["ci"][1] < 0)
    md = (out / "report.md").read_text()
    assert md == report_markdown(json.loads((out / "report.json").read_text()))
    assert "| reward_only | final | 2 |" in md and "## Differences between arms" in md
    assert "## Evaluated J per checkpoint" in md and "| per_pool | " in md


def test_difference_table_marks_intervals_that_exclude_zero():
    entry = {"value": 0.5, "ci": [0.4, 0.6], "n": 8}
    metrics = {k: entry for k in ("u", "e", "c", "x", "safety", "nra_gtbench", "nra_sepo", "fallback_rate")}
    diff = {"diff": 0.3, "ci": [0.1, 0.5], "excludes_zero": True, "paired": True}
    none = {"diff": -0.1, "ci": [-0.3, 0.2], "excludes_zero": False, "paired": True}
    report = {
        "config": "t", "games": ["ipd"], "model": "m", "wall_seconds": 1.0, "machine": "here",
        "intervals": {"method": "bootstrap"},
        "arms": {"a": {"train_seconds": 3.0, "credit": "per_pool", "abs_adv_per_round": [0.1],
                       "frac_zero_std_rounds": 0.0, "train_safety": [0.2]},
                 "b": {"train_seconds": 4.0, "credit": "shared", "abs_adv_per_round": [0.1],
                       "frac_zero_std_rounds": 0.0, "train_safety": [0.2]}},
        "eval": {"a": {"metrics": metrics}, "a@best": {"metrics": metrics}, "b": {"metrics": metrics}},
        "checkpoints": {"a": {"final_step": 4, "best_step": 2, "curve": [], "labels": {"final": "a", "best": "a@best"}},
                        "b": {"final_step": 4, "best_step": 4, "curve": [], "labels": {"final": "b", "best": "b"}}},
        "differences": {"best": {"a − b": {"safety": diff, "u": none, "e": none, "c": none, "x": none}}},
        "checks": {"tolerance": 1e-6, "shared_equals_reward_only_passed": True, "shared_equals_reward_only": {},
                   "auxiliary_uncorrelated": None, "per_pool_contrast": None},
    }
    md = report_markdown(report)
    row = next(line for line in md.splitlines() if line.startswith("| a − b |"))
    assert "**+0.300 [+0.100, +0.500]** *" in row and "−0.100 [−0.300, +0.200] |" in row
    assert "| a | best | 2 |" in md and "| b | best (= final) | 4 |" in md and "| a | final | 4 |" in md
