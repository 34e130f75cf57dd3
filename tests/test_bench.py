"""python -m benchmarks: the suite runs in quick mode and appends a well-formed results line (no timing thresholds)."""

from __future__ import annotations

import json

import pytest

from benchmarks.gpu import check as gpu_check
from benchmarks.suite import PARTS, main, results_markdown, rows


def _lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_quick_suite_appends_a_well_formed_line_and_regenerates_results_md(tmp_path, capsys):
    out = tmp_path / "bench" / "results.jsonl"
    assert main(["--quick", "--only", "car_tag,engine", "--out", str(out)]) == 0
    assert main(["--quick", "--only", "car_tag", "--out", str(out)]) == 0
    first, second = _lines(out)
    for line in (first, second):
        assert set(line) >= {"date", "machine", "git_sha", "quick", "figures", "errors"}
        assert line["quick"] is True and line["errors"] == {}
        assert line["machine"]["cores"] >= 1 and line["machine"]["cpu"]
        car = line["figures"]["car_tag"]
        assert car["steps_played"] == car["games"] * car["max_steps"]  # the pairing ran every step
        assert car["pairing_s"] > 0 and car["speedup"] > 0
    engine = first["figures"]["engine"]
    # 16 episodes of each game at its default length: one LLM decision per round in the simultaneous games
    rounds = {"ipd": 8, "auction": 6, "negotiation": 4, "negotiation_multi": 4}
    for game, n in rounds.items():
        assert engine["games"][game]["cold"]["decisions"] == engine["games"][game]["warm"]["decisions"] == 16 * n
    assert engine["games"]["kuhn"]["warm"]["fallback_rate"] > 0  # "PASS"/"BET" answers miss call/fold turns
    assert engine["games"]["ipd"]["warm"]["fallback_rate"] == 0
    assert engine["reference"]["us_per_decision"] > 0 and engine["reference"]["speedup"] > 0
    printed = capsys.readouterr().out
    assert "engine cost, ipd" in printed and "Car Tag pairing" in printed
    md = (out.parent / "RESULTS.md").read_text()
    assert md == results_markdown([first, second]) and md.count("## ") == 2


def test_merge_appends_foreign_lines(tmp_path):
    src, dst = tmp_path / "gpu.jsonl", tmp_path / "results.jsonl"
    line = {"date": "2026-01-01T00:00:00+00:00", "machine": {"cpu": "x", "cores": 16, "gpu": "NVIDIA H200"},
            "git_sha": "abc", "quick": False, "figures": {}, "errors": {}}
    src.write_text(json.dumps(line) + "\n")
    assert main(["--merge", str(src), "--out", str(dst)]) == 0
    assert _lines(dst) == [line]
    assert "NVIDIA H200" in (tmp_path / "RESULTS.md").read_text()


def test_unknown_part_is_a_clear_error(capsys, tmp_path):
    assert main(["--only", "rollout,warp", "--out", str(tmp_path / "r.jsonl")]) == 2
    assert f"unknown part(s) ['warp']; choose from: {', '.join(PARTS)}" in capsys.readouterr().err
    assert not (tmp_path / "r.jsonl").exists()


def test_rows_name_their_baselines():
    figures = {"envs": {"ipd": {"turns": 200, "ours_ms_per_match": 1.0, "axelrod_ms_per_match": 3.0, "speedup": 3.0},
                        "kuhn": {"ours_ms_per_call": 0.1, "openspiel_ms_per_call": 2.0, "speedup": 20.0}}}
    text = " ".join(" ".join(r) for r in rows(figures))
    assert "Axelrod" in text and "OpenSpiel" in text and "3.0x" in text and "20.0x" in text


def test_gpu_check_smoke_mode_runs_every_part_and_merges(tmp_path, capsys):
    """benchmarks/gpu/check.py --tiny --cpu: every part runs on a tiny model, both files are written, and the
    results line merges into the suite's files (goals are not enforced on a tiny CPU model)."""
    assert gpu_check.main(["--tiny", "--cpu", "--out", str(tmp_path)]) == 0
    check = json.loads((tmp_path / "gpu_check.json").read_text())
    assert check["errors"] == {} and check["goals_enforced"] is False and set(check["seconds"]) == set(check["figures"])
    assert {"torch", "trl", "datasets", "transformers"} <= set(check["versions"])
    figures = check["figures"]
    assert figures["rollout"]["episodes"] == 4 and figures["rollout"]["speedup"] > 0
    decode = figures["decode"]
    # tiny Llama by hand: embeddings and head 2 x 512 x 64, two layers of q/k/v/o 4 x 64 x 64, MLP 3 x 64 x 128
    # and two norms of 64, a final norm of 64: 147,776 fp32 parameters; key/value cache per token
    # 2 (k, v) x 2 layers x 2 heads x 32 x 4 bytes = 1,024; 8 rows at a mean context of 16 + 8 / 2 tokens
    assert decode["weight_gb"] * 1e9 == pytest.approx(147_776 * 4)
    assert decode["roofline_tokens_per_s"] == pytest.approx(8 * 4.8e12 / (147_776 * 4 + 8 * 20 * 1024))
    assert decode["decode_tokens_per_s"] > 0
    over = figures["overhead"]
    # every part is timed on its own: disjoint windows inside the step add up to at most the step, and what no
    # timer covers (TRL's tensor bookkeeping) is a small rest; a part counted twice or left untimed shows here
    parts = over["generation_s"] + over["model_compute_s"] + over["sepo_rollout_s"] + over["sepo_rewards_s"] \
        + over["sepo_advantages_s"]
    assert parts <= over["step_s"] + 1e-6
    assert over["other_s"] < 0.1 * over["step_s"]
    assert min(over["logprob_forward_s"], over["backward_s"], over["optimizer_s"], over["generation_s"]) > 0
    assert over["backward_calls"] == over["optimizer_calls"] == over["measured_steps"] == 1
    assert 0 < over["sepo_overhead_share"] < 1
    dst = tmp_path / "merged" / "results.jsonl"
    assert main(["--merge", str(tmp_path / "results.jsonl"), "--out", str(dst)]) == 0
    md = (dst.parent / "RESULTS.md").read_text()
    assert "decode at batch 8" in md and "SEPO overhead per GRPO step" in md and "rollouts: 4 IPD episodes" in md


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_gpu_check_refuses_to_run_without_cuda(tmp_path, capsys):
    assert gpu_check.main(["--out", str(tmp_path)]) == 2
    assert "no CUDA device" in capsys.readouterr().err and not list(tmp_path.iterdir())
    assert gpu_check.main(["--tiny", "--out", str(tmp_path)]) == 2  # the 4B model never runs on the CPU


def test_gpu_check_goals():
    met = {"rollout": {"speedup": 45.0}, "decode": {"roofline_fraction": 0.31}, "overhead": {"sepo_overhead_share": 0.01}}
    assert gpu_check.missed_goals(met) == []
    missed = gpu_check.missed_goals({"rollout": {"speedup": 12.0}, "decode": {"roofline_fraction": 0.5},
                                     "overhead": {"sepo_overhead_share": 0.08}})
    assert missed == ["rollout.speedup = 12, goal >= 30", "overhead.sepo_overhead_share = 0.08, goal <= 0.05"]
    assert gpu_check.missed_goals({}) == [f"{k}: not measured" for k in gpu_check.GOALS]
