"""`kill -9` in the middle of `sepo eval`, then the same command again: the rerun keeps every opponent stored
before the kill (byte for byte), plays only the rest, and writes the results an uninterrupted run writes."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _command(model_dir: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "sepo.cli", "eval", "--models", f"Tiny={model_dir}", "--games", "ipd",
            "--game_params", '{"ipd": {"num_rounds": 3}}', "--pools", "training", "exploit",
            "--episodes_per_opponent", "2", "--batch_episodes", "2", "--max_turn_tokens", "8",
            "--bootstrap_resamples", "200", "--progress", "false", "--output_dir", str(out)]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}


def _shards(out: Path) -> dict[Path, bytes]:
    folder = out / "episodes" / "Tiny" / "ipd"
    return {p: p.read_bytes() for p in sorted(folder.glob("*.json"))} if folder.is_dir() else {}


def _kill_mid_run(model_dir: str, out: Path) -> None:
    """Start the eval and SIGKILL it at a random moment: after a random number (1 to 5) of its 6 opponents
    are stored, plus a random fraction of a second. The point is printed, so a failure can be replayed."""
    for _attempt in range(4):
        shutil.rmtree(out, ignore_errors=True)
        stored, delay = random.randint(1, 5), random.uniform(0.0, 0.3)
        proc = subprocess.Popen(_command(model_dir, out), env=_env(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        while len(_shards(out)) < stored and proc.poll() is None:
            time.sleep(0.02)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        print(f"kill after {stored} stored opponents + {delay:.2f} s: exit {proc.returncode}, "
              f"{len(_shards(out))} stored")
        if proc.returncode == -signal.SIGKILL and len(_shards(out)) < 6:
            return
    pytest.fail("the eval finished before every attempt to kill it")


def test_sigkill_then_rerun_equals_an_uninterrupted_run(tiny_model_dir, tmp_path):
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    subprocess.run(_command(tiny_model_dir, reference), env=_env(), check=True, timeout=600,
                   stdout=subprocess.DEVNULL)
    _kill_mid_run(tiny_model_dir, killed)
    before = _shards(killed)
    assert 1 <= len(before) < 6
    for data in before.values():  # everything on disk at the kill is whole (atomic writes)
        assert len(json.loads(data)["data"]) == 2
    assert not (killed / "results.md").exists()
    rerun = subprocess.run(_command(tiny_model_dir, killed), env=_env(), check=True, timeout=600,
                           capture_output=True, text=True)
    assert rerun.stdout.count("stored, reused") == len(before)
    assert rerun.stdout.count("episodes in") == 6 - len(before)
    after = _shards(killed)
    assert all(after[p] == data for p, data in before.items())  # nothing stored before the kill was rewritten
    got = json.loads((killed / "results.json").read_text())
    want = json.loads((reference / "results.json").read_text())
    assert got["complete"] and got["results"] == want["results"]
    assert {p.name: d for p, d in after.items()} == {p.name: d for p, d in _shards(reference).items()}
