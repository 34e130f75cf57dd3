"""The study's evaluation on a tiny model: every arm's final and best checkpoints side by side with intervals,
and the differences between arms with paired intervals, marked when they exclude zero; with two training seeds,
the intervals across seeds (checked against scipy's t quantile) and a resume that reuses every finished
(arm, seed)."""

from __future__ import annotations

import json
import math

import pytest
import torch
import yaml

from sepo.study.report import report_markdown
from sepo.study.run import main


def recipe(tmp_path, tiny_model_dir) -> dict:
    """Two arms on the tiny model, every checkpoint evaluated by the training callback."""
    return {
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


def test_study_reports_best_and_final_checkpoints_and_arm_differences(tmp_path, tiny_model_dir):
    config = recipe(tmp_path, tiny_model_dir)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["--config", str(path)]) in (0, 1)  # 1 only if the exact check failed, which is not tested here
    out = tmp_path / "study"
    report = json.loads((out / "report.json").read_text())
    for arm in ("reward_only", "per_pool"):
        ck = report["checkpoints"][arm]
        curve = json.loads((out / arm / "seed_0" / "checkpoints.json").read_text())
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


def test_shared_arm_trains_exactly_as_reward_only(tmp_path, tiny_model_dir):
    """The shared penalty is a group constant, so per-round normalisation cancels it; the probe episodes it
    needs sample from their own seeded stream, so the shared arm plays the same training episodes as
    reward_only and ends with the same weights, bit for bit, while its credited rewards differ."""
    from safetensors.torch import load_file

    config = recipe(tmp_path, tiny_model_dir)
    config["train"].update(keep_best_by_safety=False, pool_mix={"training": ["tit_for_tat", "mixed"]})
    config["arms"] = {"reward_only": {"credit": "reward_only"}, "shared": {"credit": "shared"}}
    config["eval"]["episodes_per_opponent"] = 1
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["--config", str(path)]) == 0
    out = tmp_path / "study"
    runs = {arm: [json.loads(line) for line in (out / arm / "seed_0" / "episodes.jsonl").read_text().splitlines()]
            for arm in ("reward_only", "shared")}
    assert all(ep["probes"] for b in runs["shared"] for ep in b["episodes"])  # the shared arm played its probes
    strip = lambda batches: [[{k: v for k, v in ep.items() if k != "probes"} for ep in b["episodes"]]  # noqa: E731
                             for b in batches]
    assert len(runs["shared"]) == 2 and strip(runs["shared"]) == strip(runs["reward_only"])
    logs = {arm: json.loads((out / arm / "seed_0" / "trainer_state.json").read_text())["log_history"]
            for arm in runs}
    credited = {arm: [h["sepo/round_reward_mean"] for h in log if "sepo/round_reward_mean" in h] for arm, log in logs.items()}
    assert len(credited["shared"]) == 2 and all(s < r - 0.1 for s, r in zip(credited["shared"], credited["reward_only"]))
    a, b = (load_file(out / arm / "seed_0" / "model.safetensors") for arm in runs)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    start = load_file(f"{tiny_model_dir}/model.safetensors")
    assert any(not torch.equal(a[k], start[k]) for k in a if k in start)  # they trained: equal, but not by standing still
    report = json.loads((out / "report.json").read_text())
    assert report["eval"]["shared"]["metrics"] == report["eval"]["reward_only"]["metrics"]


def hand_t_interval(values: list[float]) -> tuple[float, float, float]:
    """mean, low, high of the 95% t-interval, computed here from scipy's t quantile and the sample sd."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def test_two_seed_study_reports_intervals_across_seeds_and_resumes(tmp_path, tiny_model_dir, capsys):
    config = recipe(tmp_path, tiny_model_dir)
    config["seeds"] = [0, 1]
    config["train"]["max_steps"] = 1  # one checkpoint per run, evaluated by the callback
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["--config", str(path)]) in (0, 1)
    out = tmp_path / "study"
    report = json.loads((out / "report.json").read_text())
    arms, seeds = ("per_pool", "reward_only"), (0, 1)  # the arms in the recipe's order (yaml sorts the keys)
    assert report["seeds"] == [0, 1]
    assert set(report["eval"]) == {f"{arm}/seed_{s}" for arm in arms for s in seeds}
    summaries = [json.loads((out / a / f"seed_{s}" / "study_arm.json").read_text()) for a in arms for s in seeds]
    assert [(r["arm"], r["seed"]) for r in summaries] == [(a, s) for a in arms for s in seeds]
    assert set(report["differences"]["final"]) == {f"per_pool/seed_{s} − reward_only/seed_{s}" for s in seeds}
    across = report["across_seeds"]
    widths = []
    for arm in arms:
        for name in ("safety", "u", "e", "c", "x"):
            values = [report["eval"][f"{arm}/seed_{s}"]["metrics"][name]["value"] for s in seeds]
            t = across["arms"][arm]["final"][name]
            assert t["values"] == {"0": values[0], "1": values[1]} and t["n"] == 2
            assert [t["mean"], t["low"], t["high"]] == pytest.approx(hand_t_interval(values))
            widths.append(t["high"] - t["low"])
        (step,) = across["arms"][arm]["curve"]  # the callback's J at step 1, across the seeds
        values = [report["checkpoints"][f"{arm}/seed_{s}"]["curve"][0]["games"]["ipd"]["safety"]["value"]
                  for s in seeds]
        assert step["step"] == 1
        assert [step["safety"]["mean"], step["safety"]["low"], step["safety"]["high"]] == pytest.approx(
            hand_t_interval(values))
    assert max(widths) > 0  # the seeds differ, so the hand computation is not vacuous
    for name in ("safety", "u", "e", "c", "x"):  # paired: the difference at each seed, then its interval
        d = across["differences"]["final"]["per_pool − reward_only"][name]
        diffs = [report["eval"][f"per_pool/seed_{s}"]["metrics"][name]["value"]
                 - report["eval"][f"reward_only/seed_{s}"]["metrics"][name]["value"] for s in seeds]
        assert [d["values"]["0"], d["values"]["1"]] == pytest.approx(diffs)
        assert [d["mean"], d["low"], d["high"]] == pytest.approx(hand_t_interval(diffs))
    md = (out / "report.md").read_text()
    assert md == report_markdown(report)
    assert "## Across training seeds (seeds 0, 1)" in md and "Paired differences across seeds, final" in md
    assert "| reward_only/seed_1 | final | 1 |" in md
    assert (out / "study.png").stat().st_size > 1000  # the across-seed figure
    # resume: every finished (arm, seed) is reused; one whose summary is gone (killed after its last checkpoint)
    # resumes there, alone, and keeps its recorded rollouts
    states = {(a, s): out / a / f"seed_{s}" / "trainer_state.json" for a in arms for s in seeds}
    stamps = {k: p.stat().st_mtime_ns for k, p in states.items()}
    episodes = (out / "per_pool" / "seed_1" / "episodes.jsonl").read_text()
    (out / "per_pool" / "seed_1" / "study_arm.json").unlink()
    capsys.readouterr()
    assert main(["--config", str(path)]) in (0, 1)
    printed = capsys.readouterr().out
    for run in ("per_pool/seed_0", "reward_only/seed_0", "reward_only/seed_1"):
        assert f"{run} already trained with these keys" in printed
    assert "per_pool/seed_1 ({" in printed and "- resumed from checkpoint-1" in printed
    assert printed.count("- training") == 0 and printed.count("- resumed") == 1
    assert [k for k, p in states.items() if p.stat().st_mtime_ns != stamps[k]] == [("per_pool", 1)]
    assert episodes and (out / "per_pool" / "seed_1" / "episodes.jsonl").read_text() == episodes
    assert json.loads(states[("per_pool", 1)].read_text())["global_step"] == 1  # no step past max_steps


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
