"""End-to-end FMSP runs with the named FM test double: bookkeeping, the three variants, kill-and-resume, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fmsp_doubles import NumberDuel, ScriptedFMTestDouble

import fmsp.run as fmsp_run
from fmsp.archive import Archive
from fmsp.config import FMSPConfig
from fmsp.embeddings import SentenceTransformerEmbedder
from fmsp.sandbox import Sandbox, SandboxLimits

TESTS = str(Path(__file__).parent)
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


def toy_run(tmp_path: Path, embedder, variant: str, iterations: int, judge=None, **kw):
    config = FMSPConfig(domain="number_duel", variant=variant, iterations=iterations, output_dir=str(tmp_path),
                        max_repairs=1, eval_opponents=2, progress=False, **kw)  # fmt: skip
    sandbox = Sandbox(SandboxLimits(timeout_s=20), sys_path=[TESTS])
    return fmsp_run.run(config, domain=NumberDuel(games=2, rounds=10), fm=ScriptedFMTestDouble(judge),
                        embedder=embedder, sandbox=sandbox)  # fmt: skip


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "iterations.jsonl").read_text().splitlines()]


def archive_dump(run_dir: Path, drop: tuple[str, ...] = ()) -> dict:
    return {s: [{k: v for k, v in vars(e).items() if k not in drop} for e in Archive.load(run_dir / "archive" / s).entries]
            for s in ("high", "low")}  # fmt: skip


def test_qdsp_run_bookkeeping(tmp_path, embedder):
    summary = toy_run(tmp_path, embedder, "qdsp", 6, judge=["Decision: Yes", "no idea", "Decision: No"])
    recs = records(tmp_path)
    assert [r["iteration"] for r in recs] == [1, 2, 3, 4, 5, 6]
    assert [r["side"] for r in recs] == ["high", "low"] * 3
    # The third scripted answer has a syntax error: its iteration shows a failed attempt, then a repair.
    failed = [a for r in recs for a in r["attempts"] if a["stage"] == "unit_test"]
    assert failed and "SyntaxError" in failed[0]["error"]
    counters = summary["counters"]
    assert counters["unit_test_failures"] == len(failed) and counters["judge_unparseable"] >= 1
    assert counters["added"] + counters["replaced"] + counters["rejected"] + counters["eval_errors"] \
        + sum(r["outcome"] in ("fm_error", "unit_test_failed") for r in recs) == 6
    for r in recs:
        if r["outcome"] in ("add", "replace", "reject"):
            assert r["judge"]["verdict"] in (True, False, None) and r["neighbours"]
    dump = archive_dump(tmp_path)
    assert sum(e["origin"] == "baseline" for s in dump.values() for e in s) == 2
    assert summary["archive_sizes"] == {s: sum(e["removed_at"] is None for e in dump[s]) for s in dump}


def test_vfmsp_keeps_one_incumbent_per_side(tmp_path, embedder):
    summary = toy_run(tmp_path, embedder, "vfmsp", 4)
    assert summary["archive_sizes"] == {"high": 1, "low": 1}
    assert all(r["judge"] is None for r in records(tmp_path))  # vFMSP has no novelty judge


def test_nssp_never_removes(tmp_path, embedder):
    toy_run(tmp_path, embedder, "nssp", 4, judge=["Decision: No"])
    dump = archive_dump(tmp_path)
    assert all(e["removed_at"] is None for s in dump.values() for e in s)
    assert all(r["outcome"] in ("reject", "unit_test_failed") for r in records(tmp_path))


def test_resume_after_failure_mid_iteration_matches_uninterrupted_run(tmp_path, embedder, monkeypatch):
    judge = ["Decision: Yes", "Decision: No"]
    full = toy_run(tmp_path / "full", embedder, "qdsp", 6, judge=judge)

    real_save = fmsp_run._save_state

    def crash_in_iteration_4(run_dir, completed, *args):
        if completed == 4:  # iteration 4's archive change is already on disk: it must be rolled back
            raise KeyboardInterrupt("injected")
        real_save(run_dir, completed, *args)

    monkeypatch.setattr(fmsp_run, "_save_state", crash_in_iteration_4)
    with pytest.raises(KeyboardInterrupt):
        toy_run(tmp_path / "killed", embedder, "qdsp", 6, judge=judge)
    assert json.loads((tmp_path / "killed" / "state.json").read_text())["completed_iteration"] == 3
    monkeypatch.setattr(fmsp_run, "_save_state", real_save)
    resumed = toy_run(tmp_path / "killed", embedder, "qdsp", 6, judge=judge)  # a fresh FM double: state restored

    assert resumed["completed_iterations"] == full["completed_iterations"] == 6
    assert resumed["counters"] == full["counters"]
    # Everything but wall-clock timings is identical, embeddings included.
    assert archive_dump(tmp_path / "killed", ("timings",)) == archive_dump(tmp_path / "full", ("timings",))
    for side in ("high", "low"):
        a, b = (Archive.load(tmp_path / run / "archive" / side) for run in ("killed", "full"))
        assert all((a.embedding(e.id) == b.embedding(e.id)).all() for e in a.entries)
    strip = [{k: v for k, v in r.items() if k not in ("timings", "attempts", "evaluation")} for r in records(tmp_path / "full")]
    again = [{k: v for k, v in r.items() if k not in ("timings", "attempts", "evaluation")}
             for r in records(tmp_path / "killed")]  # fmt: skip
    assert again == strip


@pytest.mark.slow  # ~90 s on 2 shared cores: three CLI processes, each loading the embedder
def test_cli_car_tag_qdsp_with_scripted_double_and_sigkill_resume(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "fmsp.cli", "run", "--config", "configs/fmsp/car_tag_qdsp_scripted.yaml",
           "--output_dir", str(out), "--iterations", "4", "--domain_config", "{n_games: 8, max_steps: 200}",
           "--progress", "false"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed_iterations"] == 4 and summary["domain"] == "car_tag"
    assert len(records(out)) == 4
    # Continue to 6 iterations, killing the process (SIGKILL) once iteration 5 has started.
    proc = subprocess.Popen([*cmd[:-4], "--iterations", "6", "--progress", "false"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        _wait_for(lambda: json.loads((out / "state.json").read_text())["completed_iteration"] >= 5, 200)
    finally:
        proc.kill()
        proc.wait()
    proc = subprocess.run([*cmd[:-4], "--iterations", "6", "--progress", "false"], cwd=REPO,
                          capture_output=True, text=True, timeout=240)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["iteration"] for r in records(out)] == [1, 2, 3, 4, 5, 6]


def _wait_for(predicate, timeout_s: float) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (FileNotFoundError, json.JSONDecodeError):
            pass
        time.sleep(0.05)
    raise AssertionError("timed out waiting for the run")


@pytest.mark.parametrize("model", ["tiny", pytest.param("default", marks=pytest.mark.slow)])
def test_local_transformers_fm_real_path(tmp_path, embedder, tiny_model_dir, model):
    """A real (weak) model: its answers mostly fail; the repair loop and the counters must say so honestly."""
    from fmsp.fm import LocalTransformersFM

    fm = LocalTransformersFM(model=tiny_model_dir if model == "tiny" else "default", max_tokens=96)
    config = FMSPConfig(domain="number_duel", variant="qdsp", iterations=2, output_dir=str(tmp_path),
                        max_repairs=1, eval_opponents=1, progress=False)  # fmt: skip
    summary = fmsp_run.run(config, domain=NumberDuel(games=1, rounds=5), fm=fm, embedder=embedder,
                           sandbox=Sandbox(SandboxLimits(timeout_s=20), sys_path=[TESTS]))  # fmt: skip
    recs = records(tmp_path)
    assert len(recs) == 2 and summary["fm_usage"]["calls"] >= 2
    assert summary["fm_usage"]["completion_tokens"] > 0
    attempts = [a for r in recs for a in r["attempts"]]
    failed = [a for a in attempts if a["stage"] != "passed"]
    assert summary["counters"]["unit_test_failures"] == len(failed)
    for r in recs:
        assert (r["outcome"] == "unit_test_failed") == all(a["stage"] != "passed" for a in r["attempts"])
