"""python -m benchmarks: the suite runs in quick mode and appends a well-formed results line (no timing thresholds)."""

from __future__ import annotations

import json

import pytest

from benchmarks.suite import PARTS, main, results_markdown, rows


def _lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_quick_suite_appends_a_well_formed_line_and_regenerates_results_md(tmp_path, capsys):
    out = tmp_path / "bench" / "results.jsonl"
    assert main(["--quick", "--only", "car_tag,overhead", "--out", str(out)]) == 0
    assert main(["--quick", "--only", "car_tag", "--out", str(out)]) == 0
    first, second = _lines(out)
    for line in (first, second):
        assert set(line) >= {"date", "machine", "git_sha", "quick", "figures", "errors"}
        assert line["quick"] is True and line["errors"] == {}
        assert line["machine"]["cores"] >= 1 and line["machine"]["cpu"]
        car = line["figures"]["car_tag"]
        assert car["steps_played"] == car["games"] * car["max_steps"]  # the pairing ran every step
        assert car["pairing_s"] > 0 and car["speedup"] > 0
    over = first["figures"]["overhead"]
    parts = over["generation_s"] + over["model_compute_s"] + over["sepo_rollout_s"] + over["sepo_rewards_s"] \
        + over["sepo_advantages_s"]
    assert parts == pytest.approx(over["step_s"])
    assert 0 < over["sepo_overhead_share"] < 1 and over["measured_steps"] == 1
    printed = capsys.readouterr().out
    assert "SEPO overhead per GRPO step" in printed and "Car Tag pairing" in printed
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
