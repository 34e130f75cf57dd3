"""Helpers for the kill-and-resume tests: start a CLI run in a subprocess, SIGKILL it at a random point, and
fingerprint what it left on disk.

The kill point is drawn from a `random.Random` whose seed the test prints in every assertion message
(`KILL_SEED=<n>` in the environment replays it): the property under test is "a kill *anywhere* resumes to the
same result", so each run of the suite tries another point.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def kill_rng() -> tuple[random.Random, int]:
    """A fresh RNG for the kill point and its seed (from `KILL_SEED` when set, else from the clock)."""
    seed = int(os.environ.get("KILL_SEED", time.time_ns() % 1_000_000))
    return random.Random(seed), seed


def cli_env() -> dict[str, str]:
    """One torch thread and an offline environment, the same for the uninterrupted and the killed runs, so
    their floating-point reductions run in the same order."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
            "WANDB_MODE": "offline", "TOKENIZERS_PARALLELISM": "false", "TRL_EXPERIMENTAL_SILENCE": "1"}


def run_cli(args: list[str], log: Path, timeout_s: float = 600) -> None:
    """Run `python -m <args>` to completion in the repository root; fail with the log's tail otherwise."""
    with open(log, "wb") as fh:
        proc = subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=cli_env(), stdout=fh,
                              stderr=subprocess.STDOUT, timeout=timeout_s)  # fmt: skip
    assert proc.returncode == 0, f"{args[:2]} exited {proc.returncode}:\n{log.read_text(errors='replace')[-4000:]}"


def run_and_kill(args: list[str], log: Path, ready: Callable[[], bool], delay_s: float,
                 timeout_s: float = 600) -> None:  # fmt: skip
    """Start `python -m <args>`, wait until `ready()` holds, sleep `delay_s`, then SIGKILL the process.

    Fails if the run ended on its own before the kill (the test would then prove nothing)."""
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", *args], cwd=REPO, env=cli_env(), stdout=fh,
                                stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + timeout_s
        while not _holds(ready):
            assert proc.poll() is None, f"the run exited ({proc.returncode}) before the kill point:\n" + \
                log.read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, "timed out waiting for the kill point"
            time.sleep(0.005)
        time.sleep(delay_s)
        assert proc.poll() is None, "the run finished before the kill: choose an earlier kill point"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


def _holds(predicate: Callable[[], bool]) -> bool:
    try:
        return bool(predicate())
    except (OSError, ValueError):  # a file not yet there, or caught half-written by a non-atomic writer
        return False


def fingerprint(root: Path) -> dict[str, tuple[str, int]]:
    """{relative path: (sha256, mtime_ns)} of every file under `root`."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(root))] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    return out


def mean_interval(paths: list[Path]) -> float:
    """Mean seconds between the modification times of files written one after another (e.g. each step's
    checkpoint state in an uninterrupted run): the unit for drawing a kill delay on this machine today."""
    times = sorted(p.stat().st_mtime for p in paths)
    return (times[-1] - times[0]) / max(1, len(times) - 1)
