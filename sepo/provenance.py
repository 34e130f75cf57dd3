"""Where a figure was measured: the machine and the code version, recorded beside every benchmark and report."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo ('unknown CPU' elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def machine() -> str:
    """CPU model and core count, one line."""
    return f"{cpu_name()}, {os.cpu_count()} cores"


def machine_info(gpu: bool = False) -> dict[str, Any]:
    """CPU, cores, Python (and the CUDA device's name with `gpu`)."""
    info: dict[str, Any] = {"cpu": machine(), "cores": os.cpu_count(), "python": platform.python_version()}
    if gpu:
        import torch

        info["gpu"] = torch.cuda.get_device_name()
    return info


def git_sha(cwd: str | Path | None = None) -> str:
    """The repository's HEAD commit (with -dirty when tracked files changed), or 'unknown'."""
    try:
        run = {"capture_output": True, "text": True, "check": True, "cwd": cwd}
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], **run).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], **run).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
