"""End-to-end FMSP runs with the named FM test double: bookkeeping, the three variants, kill-and-resume, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from fmsp_doubles import (
    MANY_BASELINES,
    NumberDuel,
    RecordingFM,
    ScriptedFMTestDouble,
    assert_honest_failed_iteration,
    run_that_fails,
)
from vllm_server import free_port

import fmsp.run as fmsp_run
from envs.sandbox import SandboxConfig
from fmsp.archive import Archive
from fmsp.config import FMSPConfig
from fmsp.embeddings import SentenceTransformerEmbedder
from fmsp.sandbox import Sandbox

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


QDSP_JUDGE = ["Decision: Yes", "no idea", "Decision: No"]


@pytest.fixture(scope="module")
def qdsp_run(tmp_path_factory, embedder) -> tuple[Path, dict]:
    """One uninterrupted 6-iteration QDSP run, shared by the bookkeeping and the resume tests."""
    run_dir = tmp_path_factory.mktemp("qdsp_full")
    return run_dir, toy_run(run_dir, embedder, "qdsp", 6, judge=QDSP_JUDGE)


def toy_run(tmp_path: Path, embedder, variant: str, iterations: int, judge=None, domain=None, fm=None, **kw):
    config = FMSPConfig(domain="number_duel", variant=variant, iterations=iterations, output_dir=str(tmp_path),
                        max_repairs=1, eval_opponents=2, progress=False, **kw)  # fmt: skip
    sandbox = Sandbox(SandboxConfig(total_timeout_s=20))
    return fmsp_run.run(config, domain=domain or NumberDuel(games=2, rounds=10), fm=fm or ScriptedFMTestDouble(judge),
                        embedder=embedder, sandbox=sandbox)  # fmt: skip


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "iterations.jsonl").read_text().splitlines()]


def archive_dump(run_dir: Path, drop: tuple[str, ...] = (), sides: tuple[str, ...] = ("high", "low")) -> dict:
    return {s: [{k: v for k, v in vars(e).items() if k not in drop} for e in Archive.load(run_dir / "archive" / s).entries]
            for s in sides}  # fmt: skip


def test_qdsp_run_bookkeeping(qdsp_run):
    tmp_path, summary = qdsp_run
    recs = records(tmp_path)
    assert [r["iteration"] for r in recs] == [1, 2, 3, 4, 5, 6]
    assert [r["side"] for r in recs] == ["high", "low"] * 3
    # The third scripted answer has a syntax error: its iteration shows a failed attempt, then a repair.
    failed = [a for r in recs for a in r["attempts"] if a["stage"] == "unit_test"]
    assert failed and "SyntaxError" in failed[0]["error"]
    counters = summary["counters"]
    assert counters["unit_test_failures"] == len(failed) and counters["judge_unparseable"] >= 1
    assert (
        counters["added"]
        + counters["replaced"]
        + counters["rejected"]
        + counters["eval_errors"]
        + sum(r["outcome"] in ("fm_error", "unit_test_failed") for r in recs)
        == 6
    )
    for r in recs:
        if r["outcome"] in ("add", "replace", "reject"):
            assert r["judge"]["verdict"] in (True, False, None) and r["neighbours"]
    dump = archive_dump(tmp_path)
    assert sum(e["origin"] == "baseline" for s in dump.values() for e in s) == 2
    assert summary["archive_sizes"] == {s: sum(e["removed_at"] is None for e in dump[s]) for s in dump}
    assert summary["status"] == "finished" and summary["stopped_because"] is None
    assert summary["outcomes"] == dict(Counter(r["outcome"] for r in recs))


def test_outcome_line_counts_iterations_by_outcome():
    line = fmsp_run.outcome_line(Counter({"fm_error": 2, "add": 3, "reject": 1}))
    assert line == "6 iterations: 3 add, 1 reject, 2 fm_error"
    assert fmsp_run.outcome_line(Counter()) == "0 iterations"


def dead_endpoint() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there: connection refused


def test_dead_endpoint_stops_the_run_and_resume_redoes_the_failed_iterations(tmp_path, embedder, capsys):
    """A real OpenAI client against a closed local port: after 2 FM errors in a row the run stops, naming the
    endpoint, the model and the error; state.json still holds iteration 0, so a resume with a working FM
    redoes iterations 1 and 2."""
    url = dead_endpoint()
    kw = {"fm_base_url": url, "fm_model": "m-test", "fm_max_retries": 0, "fm_timeout_s": 2.0,
          "max_consecutive_fm_errors": 2}  # fmt: skip
    with pytest.raises(fmsp_run.FMUnavailable) as caught:
        toy_run(tmp_path, embedder, "qdsp", 5, fm=fmsp_run.build_fm(FMSPConfig(fm_provider="openai", **kw)), **kw)
    message = str(caught.value)
    assert "\n" not in message and "stopped after 2 iterations in a row failed for an FM error (iterations 1-2)" in message
    assert f"endpoint {url}/" in message and "model 'm-test'" in message and "APIConnectionError" in message
    assert "fmsp run: 2 iterations: 2 fm_error" in capsys.readouterr().err
    assert json.loads((tmp_path / "state.json").read_text())["completed_iteration"] == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["stopped_because"] == message
    assert summary["completed_iterations"] == 0 and summary["outcomes"] == {"fm_error": 2}
    assert [r["outcome"] for r in records(tmp_path)] == ["fm_error", "fm_error"]

    resumed = toy_run(tmp_path, embedder, "qdsp", 3, max_consecutive_fm_errors=2)  # the FM answers again
    assert resumed["status"] == "finished" and resumed["completed_iterations"] == 3
    recs = records(tmp_path)
    assert [r["iteration"] for r in recs] == [1, 2, 3] and "fm_error" not in {r["outcome"] for r in recs}


def test_fewer_fm_errors_than_the_limit_are_committed_and_a_run_of_failures_fails(tmp_path, embedder):
    """max_consecutive_fm_errors 0 never stops: every iteration is recorded as fm_error and committed; but a run
    in which every iteration failed is a failure (RunFailed, status failed, the endpoint's error named), never
    "finished"."""
    kw = {"fm_base_url": dead_endpoint(), "fm_max_retries": 0, "fm_timeout_s": 2.0, "max_consecutive_fm_errors": 0}
    with pytest.raises(fmsp_run.RunFailed, match=r"every iteration failed.*\(3 iterations: 3 fm_error\); last "
                                                 r"error: .*APIConnectionError"):
        toy_run(tmp_path, embedder, "qdsp", 3, fm=fmsp_run.build_fm(FMSPConfig(**kw)), **kw)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["outcomes"] == {"fm_error": 3}
    assert "APIConnectionError" in summary["failed_because"]
    assert json.loads((tmp_path / "state.json").read_text())["completed_iteration"] == 3


def test_cli_every_iteration_failed_below_the_stop_limit_exits_1(tmp_path, embedder, monkeypatch, capsys):
    """A dead endpoint and fewer iterations than max_consecutive_fm_errors: the run never stops early, yet
    every iteration failed, so it exits 1 naming the endpoint's error (it used to end "finished", exit 0)."""
    from fmsp.cli import main as fmsp_main

    monkeypatch.setattr(fmsp_run, "build_embedder", lambda config: embedder)
    code = fmsp_main(["run", "--domain", "number_duel", "--domain_config", "{games: 1, rounds: 5}",
                      "--fm_base_url", dead_endpoint(), "--fm_max_retries", "0", "--fm_timeout_s", "2",
                      "--iterations", "2", "--max_consecutive_fm_errors", "3", "--output_dir", str(tmp_path / "run"),
                      "--progress", "false"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[-1].startswith("fmsp run: error: every iteration failed, no policy was generated (2 iterations: "
                              "2 fm_error); last error: APIConnectionError")


def test_cli_dead_endpoint_exits_1_with_one_line(tmp_path, embedder, monkeypatch, capsys):
    from fmsp.cli import main as fmsp_main

    monkeypatch.setattr(fmsp_run, "build_embedder", lambda config: embedder)  # the module's, loaded once
    url = dead_endpoint()
    code = fmsp_main(["run", "--domain", "number_duel", "--domain_config", "{games: 1, rounds: 5}",
                      "--fm_base_url", url, "--fm_max_retries", "0", "--fm_timeout_s", "2", "--iterations", "9",
                      "--output_dir", str(tmp_path / "run"), "--progress", "false"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[-2] == f"fmsp run: 3 iterations: 3 fm_error ({tmp_path / 'run'})"
    assert err[-1].startswith("fmsp run: error: stopped after 3 iterations in a row failed for an FM error")
    assert f"endpoint {url}/, model 'gpt-4o'; last error: APIConnectionError" in err[-1]


def test_cli_missing_api_key_is_a_usage_error(tmp_path, monkeypatch, capsys):
    from fmsp.cli import main as fmsp_main

    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "run"
    assert fmsp_main(["run", "--domain", "ipd", "--output_dir", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("fmsp run: error: fm_provider openai needs an API key")
    assert "fm_api_key" in line and "OPENAI_API_KEY" in line and not out.exists()
    args = ["run", "--domain", "ipd", "--output_dir", str(out), "--fm_provider", "scripted_test_double",
            "--fm_policies_path", str(tmp_path), "--embedder", "openai"]  # fmt: skip
    assert fmsp_main(args) == 2
    assert "embedder_api_key" in capsys.readouterr().err and not out.exists()


def hand_quality(entry, side: str, domain: NumberDuel) -> float:
    """Mean score of `entry` against the other side's baselines, replayed match by match (test code)."""
    other, sandbox = ("low" if side == "high" else "high"), Sandbox()
    scores = [sandbox.play(domain, entry.policy(), ref).score_a if side == "high"
              else sandbox.play(domain, ref, entry.policy()).score_b
              for ref in domain.baselines(other)]  # fmt: skip
    return sum(scores) / len(scores)


def test_vfmsp_keeps_a_single_incumbent_that_changes_only_when_beaten(tmp_path, embedder):
    domain = NumberDuel(games=2, rounds=10, baselines=MANY_BASELINES)
    fm = RecordingFM(ScriptedFMTestDouble())
    summary = toy_run(tmp_path, embedder, "vfmsp", 8, domain=domain, fm=fm)
    assert summary["archive_sizes"] == {"high": 1, "low": 1}
    archives = {s: Archive.load(tmp_path / "archive" / s) for s in ("high", "low")}
    quality = {}
    for side, archive in archives.items():
        other = "low" if side == "high" else "high"
        reference = [e.id for e in archives[other].entries if e.origin == "baseline"]
        for e in archive.entries:
            quality[e.id] = hand_quality(e, side, domain)
            assert e.quality == pytest.approx(quality[e.id]) and e.scores["reference"] == reference
    # The starting incumbent is the best baseline; the others are retired at iteration 0.
    incumbent = {}
    for side, archive in archives.items():
        base = [e for e in archive.entries if e.origin == "baseline"]
        incumbent[side] = max(base, key=lambda e: quality[e.id]).id
        assert [e.id for e in base if e.removed_at != 0] == [incumbent[side]]
    outcomes = []
    for r in records(tmp_path):
        side, other = r["side"], "low" if r["side"] == "high" else "high"
        assert r["judge"] is None  # vFMSP has no novelty judge
        if r["outcome"] not in ("replace", "reject"):
            continue
        # context and rival are the current incumbents, never an older member
        assert (r["context"]["own"], r["context"]["opponent"]) == (incumbent[side], incumbent[other])
        assert r["evaluation"]["rival"] == incumbent[side]
        beaten = quality[r["candidate"]["id"]] > quality[incumbent[side]] if r["outcome"] == "replace" else None
        outcomes.append(r["outcome"])
        if r["outcome"] == "replace":
            assert beaten
            incumbent[side] = r["candidate"]["id"]
        else:
            assert r["evaluation"]["score"] <= quality[incumbent[side]] + 1e-12
    assert {"replace", "reject"} <= set(outcomes)  # both branches were exercised
    assert {s: [e.id for e in a.elites()] for s, a in archives.items()} == {s: [i] for s, i in incumbent.items()}
    generate = [c for c in fm.calls if "Answer in exactly this format" in c[-1]["content"] and len(c) == 2]
    assert generate and all("IMPROVED version of the incumbent" in c[-1]["content"] for c in generate)


def test_quality_is_measured_against_the_fixed_reference_set(qdsp_run):
    """Every stored quality equals a hand replay against the other side's baselines, whatever the archive held
    when it was measured (the candidates also played current, generated opponents: those must not count)."""
    run_dir, _ = qdsp_run
    domain = NumberDuel(games=2, rounds=10)
    generated_opponents = 0
    for side in ("high", "low"):
        for e in Archive.load(run_dir / "archive" / side).entries:
            assert e.quality == pytest.approx(hand_quality(e, side, domain))
            generated_opponents += sum(not o.endswith("00000") for o in e.scores["vs"])
    assert generated_opponents > 0  # the property was exercised


def test_open_loop_sees_no_archive_and_keeps_every_working_policy(tmp_path, embedder):
    fm = RecordingFM(ScriptedFMTestDouble(["Decision: No"]))
    summary = toy_run(tmp_path, embedder, "open_loop", 4, fm=fm)
    first_requests = [c[-1]["content"] for c in fm.calls if len(c) == 2]
    assert len(first_requests) == 4
    for text in first_requests:  # no archive member, no opponent, no score: the task and the instruction only
        assert text.count("```") == 2  # only the answer-format template's fence
        assert "Head-to-head" not in text and "return 0.5" not in text and "return 0.3" not in text
    recs = records(tmp_path)
    assert {r["outcome"] for r in recs} <= {"add", "unit_test_failed"} and summary["counters"]["judge_calls"] == 0
    assert summary["counters"]["added"] == sum(r["outcome"] == "add" for r in recs) >= 3


def test_search_sides_limits_generation_to_the_named_side(tmp_path, embedder):
    summary = toy_run(tmp_path, embedder, "qdsp", 3, judge=["Decision: Yes"], search_sides=["low"])
    assert [r["side"] for r in records(tmp_path)] == ["low", "low", "low"]
    assert summary["archive_totals"]["high"] == 1
    with pytest.raises(ValueError, match="search_sides .*middle"):
        toy_run(tmp_path / "bad", embedder, "qdsp", 1, search_sides=["middle"])


def test_embedder_sees_the_whole_policy(embedder):
    """MiniLM reads 256 tokens; policies are longer. Two policies that differ only past the window differ."""
    head = "import numpy as np\n\n\nclass Chase:\n" + "".join(f"    # note {i}: keep turning\n" for i in range(60))
    a = head + "    def __call__(self, obs):\n        return 1.0\n"
    b = head + "    def __call__(self, obs):\n        return np.sin(obs['step'] / 7.0) - 0.5\n"
    truncated = embedder._model.encode([a, b], normalize_embeddings=True)
    assert float(truncated[0] @ truncated[1]) > 1 - 1e-6  # the raw model cannot tell them apart
    va, vb = embedder.embed([a, b])
    assert float(va @ vb) < 1 - 1e-4 and abs(float(va @ va) - 1) < 1e-5
    pieces = embedder.chunks(a)
    assert len(pieces) >= 2 and all(n <= embedder.window for _, n in pieces)
    assert " ".join(p for p, _ in pieces).split() == a.split()  # consecutive, nothing dropped


def test_nssp_never_removes(tmp_path, embedder):
    toy_run(tmp_path, embedder, "nssp", 4, judge=["Decision: No"])
    dump = archive_dump(tmp_path)
    assert all(e["removed_at"] is None for s in dump.values() for e in s)
    assert all(r["outcome"] in ("reject", "unit_test_failed") for r in records(tmp_path))


def test_resume_after_failure_mid_iteration_matches_uninterrupted_run(
    tmp_path, embedder, qdsp_run, monkeypatch
):
    judge = QDSP_JUDGE
    full_dir, full = qdsp_run

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
    resumed = toy_run(
        tmp_path / "killed", embedder, "qdsp", 6, judge=judge
    )  # a fresh FM double: state restored

    assert resumed["completed_iterations"] == full["completed_iterations"] == 6
    assert resumed["counters"] == full["counters"]
    # Everything but wall-clock timings is identical, embeddings included.
    assert archive_dump(tmp_path / "killed", ("timings",)) == archive_dump(full_dir, ("timings",))
    for side in ("high", "low"):
        a, b = (Archive.load(run / "archive" / side) for run in (tmp_path / "killed", full_dir))
        assert all((a.embedding(e.id) == b.embedding(e.id)).all() for e in a.entries)
    strip = [
        {k: v for k, v in r.items() if k not in ("timings", "attempts", "evaluation")}
        for r in records(full_dir)
    ]
    again = [{k: v for k, v in r.items() if k not in ("timings", "attempts", "evaluation")}
             for r in records(tmp_path / "killed")]  # fmt: skip
    assert again == strip


@pytest.mark.slow  # two CLI processes, each loading the embedder
def test_cli_car_tag_qdsp_sigkill_resume_then_eval(tmp_path):
    """`fmsp run` on the scripted-double Car Tag recipe, SIGKILLed mid-run and resumed; then `fmsp eval`."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "fmsp.cli", "run", "--config", "configs/fmsp/car_tag_qdsp_scripted.yaml",
           "--output_dir", str(out), "--domain_config", "{n_games: 6, max_steps: 100}", "--iterations", "4",
           "--progress", "false"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # SIGKILL once iteration 2 is done: iterations 3 and 4 cannot finish within one 50 ms poll
        _wait_for(lambda: json.loads((out / "state.json").read_text())["completed_iteration"] >= 2, 200)
    finally:
        proc.kill()
        proc.wait()
    assert json.loads((out / "state.json").read_text())["completed_iteration"] < 4
    assert not (out / "summary.json").exists()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["iteration"] for r in records(out)] == [1, 2, 3, 4]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed_iterations"] == 4 and summary["domain"] == "car_tag"

    from fmsp.cli import main as fmsp_main

    assert fmsp_main(["eval", "--run", f"qdsp={out}", "--out", str(tmp_path / "eval"), "--random", "1",
                      "--bootstrap", "20", "--cells", "3"]) == 0  # fmt: skip
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    dump = archive_dump(out, sides=("pursuer", "evader"))
    for side in ("pursuer", "evader"):
        active = [e for e in dump[side] if e["removed_at"] is None]
        rows = [r for r in results["elo"] if r["side"] == side]
        # 2 human baselines plus the run's top 3 and one random further member (as many as it has)
        n_generated = sum(e["origin"] != "baseline" for e in active)
        assert len(rows) == 2 + min(n_generated, 4) and {r["run"] for r in rows} <= {"baseline", "qdsp"}
        assert results["summary"]["qdsp"][side]["qd_score"] is not None or n_generated == 0
        assert (tmp_path / "eval" / f"map_qdsp_{side}.png").exists() == (n_generated > 0)
    assert json.loads((tmp_path / "eval" / "elo.json").read_text()) == results["elo"]
    assert "| rank | policy | run | Elo | 95% CI |" in (tmp_path / "eval" / "elo.md").read_text()
    assert (tmp_path / "eval" / "elo.png").read_bytes()[:4] == b"\x89PNG"


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


def test_local_transformers_fm_device_and_dtype(tiny_model_dir, monkeypatch):
    import torch

    from fmsp.fm import LocalTransformersFM, resolve_device_dtype

    assert resolve_device_dtype(None, None) == ("cpu", "float32")  # this machine has no GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device_dtype(None, None) == ("cuda", "bfloat16")
    assert resolve_device_dtype("cuda:1", "float16") == ("cuda:1", "float16")
    with pytest.raises(ValueError, match="unknown dtype 'bf17'"):
        resolve_device_dtype("cpu", "bf17")
    monkeypatch.undo()
    fm = LocalTransformersFM(model=tiny_model_dir, max_tokens=4, device="cpu", dtype="bfloat16")
    assert next(fm._backend.model.parameters()).dtype == torch.bfloat16
    assert fm.complete([{"role": "user", "content": "hi"}]).usage.completion_tokens <= 4
    config = FMSPConfig(fm_provider="local_transformers", fm_model=tiny_model_dir, fm_device="cpu", fm_dtype="float16")
    assert next(fmsp_run.build_fm(config)._backend.model.parameters()).dtype == torch.float16


@pytest.mark.parametrize("model", ["tiny", pytest.param("default", marks=pytest.mark.slow)])
def test_local_transformers_fm_real_path(tmp_path, embedder, tiny_model_dir, model, one_torch_thread):
    """A real (weak) model: its answers fail; the repair loop, counters and token usage must say so honestly."""
    from fmsp.fm import LocalTransformersFM

    max_tokens = 48
    fm = RecordingFM(LocalTransformersFM(model=tiny_model_dir if model == "tiny" else "default",
                                         max_tokens=max_tokens))  # fmt: skip
    config = FMSPConfig(domain="number_duel", variant="qdsp", iterations=1, output_dir=str(tmp_path),
                        max_repairs=1, eval_opponents=1, progress=False)  # fmt: skip
    summary = run_that_fails(config, domain=NumberDuel(games=1, rounds=5), fm=fm, embedder=embedder,
                             sandbox=Sandbox(SandboxConfig(total_timeout_s=20)))  # fmt: skip
    assert_honest_failed_iteration(tmp_path, summary, fm.calls, max_tokens)
