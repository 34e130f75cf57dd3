"""The writers behind the README's figures: the quick start's record, `benchmarks.record`, and the pytest
`--record-timing` plugin. Each is fed known inputs and its files are compared with hand-written expectations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.record import main as record_main
from sepo.quickstart import format_line, write_quickstart_record

TESTS = Path(__file__).resolve().parent

EVAL_MD = "# ipd\n\n| Model | Pay | Exploit |\n|---|---|---|\n| Base | 2.438 | 0.625 |\n| SFT | 2.500 | 3.750 |\n"


def test_quickstart_record_holds_the_eval_table_and_stage_timings(tmp_path):
    out = tmp_path / "runs"
    (out / "eval").mkdir(parents=True)
    (out / "eval" / "results.md").write_text(EVAL_MD)
    (out / "eval" / "results.json").write_text('{"config": {"games": ["ipd"]}, "results": {"Base": {"pay": 2.438}}}')
    checkpoint = out / "sepo" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"log_history": [
        {"step": 1, "loss": 0.5, "step_time": 101.0, "sepo/time/generation_s": 38.0, "sepo/time/rollout_s": 41.5},
        {"step": 2, "loss": 0.4, "step_time": 99.0, "sepo/time/generation_s": 40.0, "sepo/time/rollout_s": 43.0},
        {"step": 2, "train_runtime": 200.0},
    ]}))  # fmt: skip
    (out / "sepo" / "checkpoint-3").mkdir()  # torn by a kill: no trainer state, skipped
    (out / "format").mkdir()
    form = {"decisions": 140, "strict": 119, "token_limit": 5, "ended_unparsed": 16, "strict_rate": 0.85,
            "failing_examples": ["Opponent cooperated; DEFECT; DEFECT"]}
    (out / "format" / "results.json").write_text(json.dumps({"config": {"seed": 1}, "results": {"SFT": {"ipd": {
        "metrics": {"parse_failure_rate": {"value": 0.15, "ci": [0.1, 0.2], "n": 35}}, "answer_format": form}}}}))
    seconds = {"prepare_model": 6.0, "sft": 291.0, "sepo": 207.0, "eval": 109.0, "total": 613.0}
    record = write_quickstart_record(tmp_path / "rec", "sepo quickstart", out, seconds, load_before=0.5)

    data = json.loads((record / "results.json").read_text())
    assert data["command"] == "sepo quickstart" and data["wall_s"] == 613.0
    assert data["load_average"]["start"] == 0.5 and data["machine"]["cores"] == os.cpu_count()
    assert data["figures"]["stages_s"] == seconds
    assert data["figures"]["grpo_steps"] == [
        {"step": 1, "step_time": 101.0, "sepo/time/generation_s": 38.0, "sepo/time/rollout_s": 41.5},
        {"step": 2, "step_time": 99.0, "sepo/time/generation_s": 40.0, "sepo/time/rollout_s": 43.0},
    ]
    assert data["figures"]["eval"] == {"config": {"games": ["ipd"]}, "results": {"Base": {"pay": 2.438}}}
    answers = data["figures"]["answer_format"]  # one minus the parse-failure rate, with its interval flipped
    assert answers["strict_rate"] == pytest.approx(0.85) and answers["ci"] == pytest.approx([0.8, 0.9])
    assert answers["seed"] == 1 and answers["decisions"] == 140
    md = (record / "RESULTS.md").read_text()
    assert "Written by `sepo quickstart`" in md and "Wall time 10.2 min" in md
    for row in ("| sft | 291 |", "| total | 613 |", "| 1 | 101.0 | 38.0 | 41.5 |", "| 2 | 99.0 | 40.0 | 43.0 |"):
        assert row in md
    assert ("SFT strict answers 0.850 [0.800, 0.900] of 140 decisions (goal ≥ 0.80 on ≥ 128 decisions: met); "
            "of the others, 5 cut at the token limit and 16 ended without one.") in md
    assert "- 'Opponent cooperated; DEFECT; DEFECT'" in md
    assert "goal ≥ 0.80 on ≥ 128 decisions: not met" in format_line({**answers, "strict_rate": 0.79})
    assert "too few decisions to tell" in format_line({**answers, "decisions": 24})
    assert md.endswith(EVAL_MD)  # the evaluation table verbatim


def test_benchmarks_record_runs_the_command_and_keeps_its_outputs(tmp_path, capsys):
    made = tmp_path / "made"
    script = (f"import pathlib; p = pathlib.Path({str(made)!r}); p.mkdir(); "
              "(p / 'summary.json').write_text('{\"loop_s\": 23.3}'); (p / 'table.md').write_text('| a |\\n|---|\\n| 1 |\\n')")  # fmt: skip
    command = [sys.executable, "-c", script]
    assert record_main([str(tmp_path / "rec"), "--title", "A demo", "--copy", str(made / "summary.json"),
                        "--copy", str(made / "table.md"), "--", *command]) == 0  # fmt: skip
    data = json.loads((tmp_path / "rec" / "results.json").read_text())
    assert data["title"] == "A demo" and data["wall_s"] > 0
    assert data["figures"]["files"] == {str(made / "summary.json"): {"loop_s": 23.3},
                                        str(made / "table.md"): "| a |\n|---|\n| 1 |\n"}  # fmt: skip
    md = (tmp_path / "rec" / "RESULTS.md").read_text()
    assert md.startswith("# A demo\n") and f"## {made / 'table.md'}\n\n| a |\n|---|\n| 1 |\n" in md

    # a failing command records nothing and passes its exit code on
    assert record_main([str(tmp_path / "failed"), "--title", "x", "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    assert not (tmp_path / "failed").exists()


def test_record_timing_counts_outcomes_and_ranks_the_slowest(tmp_path):
    (tmp_path / "test_sample.py").write_text(
        "import time, pytest\n"
        "def test_a(): pass\n"
        "def test_slow(): time.sleep(1.0)\n"
        "def test_fails(): assert False\n"
        "@pytest.mark.skip(reason='demo')\n"
        "def test_skipped(): pass\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "timing_plugin", "-p", "no:cacheprovider",
                           str(tmp_path / "test_sample.py"), "--record-timing", str(tmp_path / "rec")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr  # one test fails
    data = json.loads((tmp_path / "rec" / "results.json").read_text())
    assert data["figures"]["counts"] == {"passed": 2, "failed": 1, "skipped": 1, "error": 0, "xfailed": 0, "xpassed": 0}
    assert data["figures"]["exit_status"] == 1
    assert data["figures"]["slowest"][0]["test"].endswith("test_sample.py::test_slow")
    assert data["figures"]["slowest"][0]["seconds"] >= 1.0
    assert "| passed | 2 |" in (tmp_path / "rec" / "RESULTS.md").read_text()


def test_sft_format_counts_strict_turns_by_what_the_model_read_before(tmp_path):
    """benchmarks.sft_format's round split: the first decision, and later ones after a strict or a failed turn
    (the model's own earlier turns are in its history), counted from stored episode rows."""
    from benchmarks.sft_format import by_round

    def episode(*parsed: bool) -> dict:
        return {"turns": [{"round": i, "parsed": p} for i, p in enumerate(parsed)]}

    shard = tmp_path / "episodes" / "SFT" / "ipd"
    shard.mkdir(parents=True)
    (shard / "training.a.json").write_text(json.dumps({"data": [episode(True, True, False, False)]}))
    (shard / "exploit.b.json").write_text(json.dumps({"data": [episode(False, True, True), episode(False, False)]}))
    assert by_round(tmp_path) == {"first": {"strict": 1, "of": 3},
                                  "after_strict": {"strict": 2, "of": 3},  # T->T, T->F, T->T
                                  "after_failure": {"strict": 1, "of": 3}}  # F->F, F->T, F->F
