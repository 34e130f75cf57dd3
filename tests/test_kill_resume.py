"""kill -9 anywhere, then the CLI's own resume, must end where an uninterrupted run of the same seed ends.

Each test runs the real command line in subprocesses on a tiny model (or the scripted FM test double): one
uninterrupted run, one run SIGKILLed at a random point (see `kill_resume`) and resumed with the same command.
Both run with one torch thread on the same machine, so the comparison is exact: CPU kernels are deterministic
for a fixed thread count, and everything random is seeded or restored from the checkpoint.

Checked for each: the same final step; the same data order (what was played or trained on after the resume);
the optimizer state and final weights bit for bit; files completed before the kill neither lost, changed nor
rewritten by the resumed run (so it did resume rather than start over).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from kill_resume import fingerprint, kill_rng, mean_interval, run_and_kill, run_cli
from safetensors.torch import load_file

from sepo.files import complete_checkpoints, last_complete_checkpoint, resolve_resume

slow = pytest.mark.slow  # several CLI processes each

def _timing(key: str) -> bool:
    """Wall-clock log keys (step_time, train_runtime, samples per second, sepo/time/*, ..._s), which differ
    between any two runs."""
    return key.endswith("_s") or "time" in key or "per_second" in key


def _untimed(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in h.items() if not _timing(k)} for h in history]


def _state(checkpoint: Path) -> dict:
    return json.loads((checkpoint / "trainer_state.json").read_text())


def _assert_same_tensors(a: dict, b: dict, what: str) -> None:
    assert a.keys() == b.keys(), what
    for key in a:
        assert torch.equal(a[key], b[key]), f"{what}: {key} differs"


def _assert_same_optimizer(a: Path, b: Path) -> None:
    oa, ob = (torch.load(p / "optimizer.pt", weights_only=False) for p in (a, b))
    assert oa["param_groups"] == ob["param_groups"]
    assert oa["state"].keys() == ob["state"].keys() and oa["state"]
    for i in oa["state"]:
        _assert_same_tensors(oa["state"][i], ob["state"][i], f"optimizer state {i}")


def _assert_nothing_lost(before: dict, after: dict, finished: list[str], why: str) -> None:
    """Files of work finished before the kill are still there, byte for byte, and were not rewritten."""
    for rel, value in before.items():
        if any(rel.startswith(prefix) for prefix in finished):
            assert after.get(rel) == value, f"{rel} was lost, changed or rewritten by the resumed run ({why})"


# --- the resume-point resolver (the fix for a kill during a checkpoint save) ----------------------------------


def test_resume_skips_a_checkpoint_torn_by_a_kill(tmp_path):
    for step, state in ((1, "{}"), (2, '{"global_step": 2}'), (3, '{"global_st')):  # 3: killed mid-write
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(state)
    (tmp_path / "checkpoint-10").mkdir()  # killed before it wrote its trainer state
    (tmp_path / "checkpoint-10" / "optimizer.pt").write_bytes(b"\0")
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")
    assert resolve_resume("true", tmp_path) == resolve_resume("auto", tmp_path) == str(tmp_path / "checkpoint-2")
    assert resolve_resume(True, tmp_path) == str(tmp_path / "checkpoint-2")
    assert resolve_resume("false", tmp_path) is None and resolve_resume(None, tmp_path) is None
    assert resolve_resume("x/checkpoint-1", tmp_path) == "x/checkpoint-1"
    assert resolve_resume("true", tmp_path / "missing") is None  # a fresh start


def test_best_checkpoint_choice_survives_a_kill_around_its_save(tmp_path):
    """`best/` follows checkpoints.json's best right after each checkpoint's evaluation; a kill between that
    file's write and the swap of `best/` (or between the swap and the copy of its record) must not change the
    choice on resume."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from sepo.grpo.callbacks import CheckpointEvalCallback, keep_best

    args = TrainingArguments(output_dir=str(tmp_path), save_strategy="steps", save_steps=1, report_to="none")
    for step in (1, 2, 3):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "weights").write_text(f"weights of step {step}")

    def choice(step: int, safety: float) -> dict:
        return {"step": step, "checkpoint": str(tmp_path / f"checkpoint-{step}"), "safety": safety}

    def killed_after_evaluating(best: dict) -> None:  # checkpoints.json written, best/ not yet swapped
        records = [{"step": s, "safety": None} for s in (1, 2, 3)]  # every step evaluated: nothing re-run
        (tmp_path / "checkpoints.json").write_text(json.dumps({"checkpoints": records, "best": best}))

    keep_best(tmp_path, choice(1, 1.0))
    killed_after_evaluating(choice(3, 3.0))
    CheckpointEvalCallback(cfg=None).on_train_begin(args, TrainerState(global_step=3), TrainerControl())
    assert (tmp_path / "best" / "weights").read_text() == "weights of step 3"
    assert json.loads((tmp_path / "best.json").read_text()) == json.loads((tmp_path / "best" / "best.json").read_text())
    assert json.loads((tmp_path / "best.json").read_text())["safety"] == 3.0
    # killed between the swap of best/ and the copy of its record: the copy is restored from the record
    (tmp_path / "best.json").write_text(json.dumps(choice(1, 1.0)))
    CheckpointEvalCallback(cfg=None).on_train_begin(args, TrainerState(global_step=3), TrainerControl())
    assert json.loads((tmp_path / "best.json").read_text())["step"] == 3


# --- sepo train ------------------------------------------------------------------------------------------------

TRAIN_STEPS = 8


def _train_args(model_dir: str, out: Path) -> list[str]:
    """`sepo train` on the IPD recipe, shrunk: 2 groups of G=2 per step over 2 micro-batches (so each step
    generates once and accumulates twice), LoRA, KL to the reference, completions logged every step."""
    return ["sepo.cli", "train", "--config", "configs/sepo/ipd_default.yaml", "--model_name_or_path", model_dir,
            "--output_dir", str(out), "--max_steps", str(TRAIN_STEPS), "--save_steps", "1",
            "--save_total_limit", "100", "--num_generations", "2", "--per_device_train_batch_size", "2",
            "--gradient_accumulation_steps", "2",
            "--pool_mix", '{"training": ["tit_for_tat", "mixed", "generous_tit_for_tat"], "exploit": ["always_defect"]}',
            "--game_params", '{"ipd": {"num_rounds": 2}}', "--max_turn_tokens", "4", "--learning_rate", "1e-2",
            "--log_completions", "true", "--resume_from_checkpoint", "true"]  # fmt: skip


@pytest.fixture(scope="module")
def train_uninterrupted(tmp_path_factory, tiny_model_dir) -> Path:
    out = tmp_path_factory.mktemp("train") / "uninterrupted"
    run_cli(_train_args(tiny_model_dir, out), out.parent / "uninterrupted.log")
    return out


def _completions(run: Path, step: int):
    import pandas as pd

    return pd.read_parquet(run / "completions" / f"completions_{step:05d}.parquet")


@slow
@pytest.mark.parametrize("kill_point", ["random", "mid_save"])
def test_sepo_train_sigkill_resume_matches_uninterrupted(kill_point, train_uninterrupted, tiny_model_dir, tmp_path):
    full, out = train_uninterrupted, tmp_path / "killed"
    rng, seed = kill_rng()
    step = rng.randint(1, TRAIN_STEPS - 4)
    if kill_point == "mid_save":  # as soon as the checkpoint directory appears: its files are being written
        ready, delay = (lambda: (out / f"checkpoint-{step}").is_dir()), 0.0
    else:  # anywhere in the next two steps, checkpoint saves included
        ready = lambda: (out / f"checkpoint-{step}" / "trainer_state.json").is_file()  # noqa: E731
        delay = rng.uniform(0, 2 * mean_interval(list(full.glob("checkpoint-*/trainer_state.json"))))
    why = f"KILL_SEED={seed}: killed {delay:.3f} s after checkpoint-{step} ({kill_point})"
    run_and_kill(_train_args(tiny_model_dir, out), tmp_path / "killed.log", ready, delay)
    before = fingerprint(out)
    done = complete_checkpoints(out)
    resumed_from = int(done[-1].name.split("-")[1]) if done else 0
    for checkpoint in done:  # what was completely written before the kill is what the uninterrupted run wrote
        _assert_same_tensors(load_file(checkpoint / "adapter_model.safetensors"),
                             load_file(full / checkpoint.name / "adapter_model.safetensors"), f"{checkpoint} ({why})")
    assert json.loads((out / "sepo_config.json").read_text())["sepo"]["max_steps"] == TRAIN_STEPS, why

    run_cli(_train_args(tiny_model_dir, out), tmp_path / "resumed.log")

    final = out / f"checkpoint-{TRAIN_STEPS}"
    assert _state(final)["global_step"] == _state(full / final.name)["global_step"] == TRAIN_STEPS, why
    finished = [f"{c.name}/" for c in done] + [f"completions/completions_{s:05d}" for s in range(1, resumed_from + 1)]
    _assert_nothing_lost(before, fingerprint(out), finished, why)
    # the same groups in the same order, the same sampled completions and advantages, step by step
    for s in range(1, TRAIN_STEPS + 1):
        a, b = _completions(full, s), _completions(out, s)
        assert list(b["prompt"]) == list(a["prompt"]), f"step {s}: other groups played ({why})"
        assert list(b["completion"]) == list(a["completion"]), f"step {s}: other completions sampled ({why})"
        assert list(b["advantage"]) == list(a["advantage"]), f"step {s} ({why})"
    assert _untimed(_state(final)["log_history"]) == _untimed(_state(full / final.name)["log_history"]), why
    _assert_same_optimizer(full / final.name, final)
    _assert_same_tensors(load_file(full / "adapter_model.safetensors"), load_file(out / "adapter_model.safetensors"),
                         f"final weights ({why})")
    assert json.loads((out / "best.json").read_text())["safety"] == json.loads((full / "best.json").read_text())["safety"]


# --- sepo sft --------------------------------------------------------------------------------------------------

SFT_STEPS = 12


@pytest.fixture(scope="module")
def sft_data(tmp_path_factory) -> str:
    from sepo.sft.data import main as data_main

    out = tmp_path_factory.mktemp("sft_data")
    assert data_main(["--games", "ipd", "--out", str(out), "--episodes-scale", "0.05", "--seed", "1"]) == 0
    return str(out / "dataset")


def _sft_args(model_dir: str, data: str, out: Path) -> list[str]:
    """`sepo sft` with LoRA (dropout on: the RNG must be restored too), a checkpoint and a log line per step."""
    return ["sepo.cli", "sft", "--model_name_or_path", model_dir, "--dataset_path", data, "--output_dir", str(out),
            "--max_steps", str(SFT_STEPS), "--save_strategy", "steps", "--save_steps", "1", "--logging_steps", "1",
            "--per_device_train_batch_size", "2", "--lora_r", "4", "--lora_alpha", "8", "--lora_dropout", "0.1",
            "--learning_rate", "5e-3", "--max_length", "512", "--report_to", "none", "--use_cpu", "true",
            "--bf16", "false", "--gradient_checkpointing", "false", "--eval_strategy", "no", "--seed", "0",
            "--resume_from_checkpoint", "true"]  # fmt: skip


@slow
def test_sepo_sft_sigkill_resume_matches_uninterrupted(tiny_model_dir, sft_data, tmp_path):
    full, out = tmp_path / "uninterrupted", tmp_path / "killed"
    run_cli(_sft_args(tiny_model_dir, sft_data, full), tmp_path / "uninterrupted.log")
    rng, seed = kill_rng()
    step = rng.randint(1, SFT_STEPS - 5)
    delay = rng.uniform(0, 2 * mean_interval(list(full.glob("checkpoint-*/trainer_state.json"))))
    why = f"KILL_SEED={seed}: killed {delay:.3f} s after checkpoint-{step}"
    ready = lambda: (out / f"checkpoint-{step}" / "trainer_state.json").is_file()  # noqa: E731
    run_and_kill(_sft_args(tiny_model_dir, sft_data, out), tmp_path / "killed.log", ready, delay)
    before, done = fingerprint(out), complete_checkpoints(out)
    for checkpoint in done:
        _assert_same_tensors(load_file(checkpoint / "adapter_model.safetensors"),
                             load_file(full / checkpoint.name / "adapter_model.safetensors"), f"{checkpoint} ({why})")

    run_cli(_sft_args(tiny_model_dir, sft_data, out), tmp_path / "resumed.log")

    final = out / f"checkpoint-{SFT_STEPS}"
    assert _state(final)["global_step"] == _state(full / final.name)["global_step"] == SFT_STEPS, why
    _assert_nothing_lost(before, fingerprint(out), [f"{c.name}/" for c in done], why)
    # one log line per step: the loss of each step's batch, so another data order (or dropout mask) shows here.
    # `num_tokens` is left out: TRL's SFTTrainer counts it in memory, so it restarts at 0 after any resume.
    history, expected = (_untimed(_state(run / final.name)["log_history"]) for run in (out, full))
    assert len([h for h in history if "loss" in h]) == SFT_STEPS
    assert [{k: v for k, v in h.items() if k != "num_tokens"} for h in history] == \
        [{k: v for k, v in h.items() if k != "num_tokens"} for h in expected], why
    _assert_same_optimizer(full / final.name, final)
    _assert_same_tensors(load_file(full / "adapter_model.safetensors"), load_file(out / "adapter_model.safetensors"),
                         f"final adapter ({why})")
    _assert_same_tensors(load_file(full / "merged" / "model.safetensors"), load_file(out / "merged" / "model.safetensors"),
                         f"merged model ({why})")


# --- resumed at the last step ----------------------------------------------------------------------------------


@slow
@pytest.mark.parametrize("command", ["train", "sft"])
def test_a_run_resumed_from_its_last_checkpoint_takes_no_further_step(command, tiny_model_dir, sft_data, tmp_path):
    """A kill after the last checkpoint (during its evaluation, the final save or the card) leaves a run whose
    resume point is step max_steps; resumed, it must not train step max_steps + 1 (transformers' Trainer would)."""
    out = tmp_path / command
    args = _train_args(tiny_model_dir, out) if command == "train" else _sft_args(tiny_model_dir, sft_data, out)
    args[args.index("--max_steps") + 1] = "2"
    run_cli(args, tmp_path / "first.log")
    weights = "adapter_model.safetensors"
    before = load_file(out / weights)

    run_cli(args, tmp_path / "resumed.log")

    assert sorted(c.name for c in complete_checkpoints(out)) == ["checkpoint-1", "checkpoint-2"]
    assert _state(out / "checkpoint-2")["global_step"] == 2
    _assert_same_tensors(before, load_file(out / weights), "final weights after the resume")
    _assert_same_tensors(load_file(out / "checkpoint-2" / weights), load_file(out / weights), "checkpoint-2")


# --- fmsp run --------------------------------------------------------------------------------------------------

FMSP_ITERATIONS = 6


def _fmsp_args(out: Path) -> list[str]:
    """QDSP on IPD with the scripted FM test double (configs/fmsp/ipd_qdsp_scripted.yaml), 2 episodes a match. Both
    runs get one rng_key: the episodes' rngs are keyed by it (a run without one makes its own, kept for resume)."""
    return ["fmsp.cli", "run", "--config", "configs/fmsp/ipd_qdsp_scripted.yaml", "--output_dir", str(out),
            "--iterations", str(FMSP_ITERATIONS), "--domain_config", "{n_episodes: 2, seed: 0}", "--progress", "false",
            "--rng_key", "5eed" * 16]


def _archive(run: Path) -> dict:
    """Every entry of both archives without its wall-clock timings, and the embedding matrices."""
    import numpy as np

    out = {}
    for side in sorted(p.name for p in (run / "archive").iterdir()):
        lines = (run / "archive" / side / "entries.jsonl").read_text().splitlines()
        out[side] = ([{k: v for k, v in json.loads(line).items() if k != "timings"} for line in lines],
                     np.load(run / "archive" / side / "embeddings.npy").tolist())
    return out


def _records(run: Path) -> list[dict]:
    drop = ("timings", "fm_s", "test_s", "wall_s", "cpu_s")  # wall-clock and CPU seconds
    strip = lambda x: {k: strip(v) for k, v in x.items() if k not in drop} if isinstance(x, dict) else (  # noqa: E731
        [strip(v) for v in x] if isinstance(x, list) else x)
    return [strip(json.loads(line)) for line in (run / "iterations.jsonl").read_text().splitlines()]


@slow
def test_fmsp_run_sigkill_resume_matches_uninterrupted(tmp_path):
    full, out = tmp_path / "uninterrupted", tmp_path / "killed"
    run_cli(_fmsp_args(full), tmp_path / "uninterrupted.log")
    per_iteration = json.loads((full / "summary.json").read_text())["wall_s_this_session"] / FMSP_ITERATIONS
    rng, seed = kill_rng()
    after = rng.randint(1, FMSP_ITERATIONS - 3)
    delay = rng.uniform(0, 1.5 * per_iteration)
    why = f"KILL_SEED={seed}: killed {delay:.3f} s after iteration {after} completed"
    ready = lambda: json.loads((out / "state.json").read_text())["completed_iteration"] >= after  # noqa: E731
    run_and_kill(_fmsp_args(out), tmp_path / "killed.log", ready, delay)
    completed = json.loads((out / "state.json").read_text())["completed_iteration"]
    assert completed < FMSP_ITERATIONS and not (out / "summary.json").exists(), why
    # what the killed run finished is what the uninterrupted run wrote, and the resume keeps it
    finished = [r for r in _records(out) if r["iteration"] <= completed]
    assert finished == _records(full)[:completed], why

    run_cli(_fmsp_args(out), tmp_path / "resumed.log")

    assert _records(out)[:completed] == finished, why
    assert [r["iteration"] for r in _records(out)] == list(range(1, FMSP_ITERATIONS + 1))
    # the same contexts, FM answers, judge verdicts, evaluations and decisions, iteration by iteration
    assert _records(out) == _records(full), why
    assert _archive(out) == _archive(full), why  # entries (lineage, scores, status) and embeddings, exactly
    a, b = (json.loads((run / "summary.json").read_text()) for run in (full, out))
    assert {k: v for k, v in b.items() if k not in ("run_dir", "wall_s_this_session")} == \
        {k: v for k, v in a.items() if k not in ("run_dir", "wall_s_this_session")}, why


# --- sepo study ------------------------------------------------------------------------------------------------

STUDY_STEPS = 6


def _study_args(model_dir: str, out: Path) -> list[str]:
    """`sepo study` of one arm (auxiliary credit, so each batch records probe episodes too) and one seed on the
    tiny model, a checkpoint per step; the recipe is written next to `out`."""
    recipe = out.parent / f"{out.name}.yaml"
    recipe.write_text(json.dumps({  # JSON is YAML
        "output_dir": str(out), "eval_base": False, "seeds": [0],
        "train": {"model_name_or_path": model_dir, "games": ["ipd"], "game_params": {"ipd": {"num_rounds": 2}},
                  "pool_mix": {"training": ["tit_for_tat", "mixed"]}, "num_generations": 2,
                  "per_device_train_batch_size": 2, "max_turn_tokens": 4, "max_completion_length": 128,
                  "learning_rate": 1e-2, "use_cpu": True, "bf16": False, "max_steps": STUDY_STEPS,
                  "save_strategy": "steps", "save_steps": 1, "save_total_limit": 100, "logging_steps": 1,
                  "report_to": "none", "disable_tqdm": True},
        "arms": {"auxiliary": {"credit": "auxiliary"}},
        "eval": {"episodes_per_opponent": 1, "max_turn_tokens": 4, "progress": False, "bootstrap_resamples": 200},
    }))
    return ["sepo.cli", "study", "--config", str(recipe)]


@slow
def test_sepo_study_sigkill_resume_matches_uninterrupted(tiny_model_dir, tmp_path):
    """A study killed inside an arm's training resumes that arm from its last complete checkpoint, and its
    recorded rollouts (what the study's exact checks read) are every batch once, as an uninterrupted run's."""
    full, out = tmp_path / "uninterrupted", tmp_path / "killed"
    run_cli(_study_args(tiny_model_dir, full), tmp_path / "uninterrupted.log")
    arm = lambda run: run / "auxiliary" / "seed_0"  # noqa: E731
    rng, seed = kill_rng()
    step = rng.randint(1, STUDY_STEPS - 3)
    delay = rng.uniform(0, mean_interval(list(arm(full).glob("checkpoint-*/trainer_state.json"))))
    why = f"KILL_SEED={seed}: killed {delay:.3f} s after checkpoint-{step}"
    ready = lambda: (arm(out) / f"checkpoint-{step}" / "trainer_state.json").is_file()  # noqa: E731
    run_and_kill(_study_args(tiny_model_dir, out), tmp_path / "killed.log", ready, delay)
    assert not (arm(out) / "study_arm.json").exists(), f"the kill came after the arm's training ({why})"
    before, done = fingerprint(arm(out)), complete_checkpoints(arm(out))

    run_cli(_study_args(tiny_model_dir, out), tmp_path / "resumed.log")

    assert f"resumed from {done[-1].name}" in (tmp_path / "resumed.log").read_text(), why
    _assert_nothing_lost(before, fingerprint(arm(out)), [f"{c.name}/" for c in done], why)
    episodes = [(run / "auxiliary" / "seed_0" / "episodes.jsonl").read_text().splitlines() for run in (full, out)]
    assert [json.loads(line)["batch"] for line in episodes[1]] == list(range(STUDY_STEPS)), why
    assert episodes[1] == episodes[0], why  # the same episodes and probes, batch by batch
    final = f"checkpoint-{STUDY_STEPS}"
    assert _untimed(_state(arm(out) / final)["log_history"]) == _untimed(_state(arm(full) / final)["log_history"]), why
    _assert_same_tensors(load_file(arm(full) / "model.safetensors"),
                         load_file(arm(out) / "model.safetensors"), f"final weights ({why})")
    summary = json.loads((arm(out) / "study_arm.json").read_text())
    assert summary["resumed_from_step"] == int(done[-1].name.split("-")[1]), why
    a, b = (json.loads((run / "report.json").read_text()) for run in (full, out))
    played = lambda report: {label: {k: v for k, v in e.items() if k != "model"}  # noqa: E731
                             for label, e in report["eval"].items()}  # the model's path differs
    assert b["checks"] == a["checks"] and played(b) == played(a), why
