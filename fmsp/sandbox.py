"""Run a domain entry on untrusted policy code in a separate, limited, killable process.

Design: one fresh `python -m fmsp.sandbox_worker` subprocess per job (a batch of calls, e.g. all games of one
evaluation), started in its own session so the parent can `os.killpg` the whole group on a wall-clock timeout.
The worker applies rlimits (CPU, address space, file size, processes), a network namespace + socket block, an
audit hook (no process creation, no writes outside its scratch dir) and an import guard before any policy code
runs; see `fmsp.sandbox_worker`. A fresh process per job means no state (module globals, builtins) can leak
between evaluations. Only a JSON result comes back; stdout/stderr are captured and truncated.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_REPO_ROOT = str(Path(__file__).resolve().parent.parent)
_ENV_KEEP = ("PATH", "LANG", "LC_ALL", "HOME", "TMPDIR", "VIRTUAL_ENV")


@dataclass(frozen=True)
class SandboxLimits:
    """Per-job limits. `timeout_s` is wall clock (enforced by the parent); the others are worker rlimits."""

    timeout_s: float = 30.0
    cpu_s: int = 30
    memory_mb: int = 2048
    max_file_mb: int = 16
    max_processes: int = 0  # RLIMIT_NPROC: no fork/threads (not enforced by the kernel for root; the audit hook is)
    max_output_chars: int = 20_000
    max_result_bytes: int = 1_000_000
    unshare_network: bool = True


@dataclass
class SandboxResult:
    """What one sandboxed job produced: `value` is the list of per-call return values when `ok`."""

    ok: bool
    value: Any = None
    error: str | None = None
    error_type: str | None = None
    timed_out: bool = False
    killed: bool = False
    stdout: str = ""
    stderr: str = ""
    wall_s: float = 0.0
    cpu_s: float = 0.0
    traceback: str | None = None
    call_index: int | None = None
    isolation: dict[str, bool] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _read_capped(path: Path, limit: int) -> str:
    if not path.exists():
        return ""
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    text = data[:limit].decode(errors="replace")
    return text + ("\n...[truncated]" if len(data) > limit else "")


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n...[truncated {len(text) - limit} chars]"


def _worker_env(sys_path: list[str]) -> dict[str, str]:
    """A minimal environment: no API keys or proxies reach untrusted code; single-threaded numerics."""
    env = {k: os.environ[k] for k in _ENV_KEEP if k in os.environ}
    env.update(PYTHONPATH=os.pathsep.join([*sys_path, _REPO_ROOT]), PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1",
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore")  # fmt: skip
    return env


def _wait(pid: int, timeout_s: float) -> tuple[int | None, float]:
    """Wait for `pid` up to `timeout_s`; returns (wait status or None on timeout, child CPU seconds)."""
    deadline = time.monotonic() + timeout_s
    delay = 0.002
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return status, usage.ru_utime + usage.ru_stime
        if time.monotonic() >= deadline:
            return None, 0.0
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


class Sandbox:
    """Runs `entry(*call)` for a batch of calls in a fresh limited worker process; never raises for bad code."""

    def __init__(self, limits: SandboxLimits | None = None, sys_path: list[str] | None = None) -> None:
        self.limits = limits or SandboxLimits()
        self.sys_path = [str(p) for p in (sys_path or [])]

    def run(self, entry: str, calls: list[list[Any]], allowed_imports: tuple[str, ...] = (),
            timeout_s: float | None = None) -> SandboxResult:  # fmt: skip
        """Run every call in one worker; stops at the first raising call (reported with its index)."""
        limits = self.limits
        timeout = limits.timeout_s if timeout_s is None else timeout_s
        control = Path(tempfile.mkdtemp(prefix="fmsp-sbx-"))
        scratch = control / "scratch"
        scratch.mkdir()
        job = {
            "entry": entry, "calls": calls, "allowed_imports": list(allowed_imports), "scratch": str(scratch),
            "result_path": str(control / "result.json"), "unshare_network": limits.unshare_network,
            "max_output_chars": limits.max_output_chars, "max_result_bytes": limits.max_result_bytes,
            "rlimits": {"RLIMIT_CPU": limits.cpu_s, "RLIMIT_AS": limits.memory_mb << 20,
                        "RLIMIT_FSIZE": limits.max_file_mb << 20, "RLIMIT_NPROC": limits.max_processes},
        }  # fmt: skip
        (control / "job.json").write_text(json.dumps(job))
        start = time.monotonic()
        try:
            with open(control / "stdout", "wb") as out, open(control / "stderr", "wb") as err:
                pid = self._spawn(control, scratch, out, err)
            status, cpu_s = _wait(pid, timeout)
            timed_out = status is None
            try:
                os.killpg(pid, signal.SIGKILL)  # the whole group: stragglers too, not only on timeout
            except ProcessLookupError:
                pass
            if timed_out:
                status, cpu_s = _wait(pid, 10.0)
            wall_s = time.monotonic() - start
            return self._collect(control, status, timed_out, wall_s, cpu_s)
        finally:
            shutil.rmtree(control, ignore_errors=True)

    def _spawn(self, control: Path, scratch: Path, out: Any, err: Any) -> int:
        import subprocess

        proc = subprocess.Popen(  # noqa: S603 - fixed argv, our own worker module
            [sys.executable, "-u", "-m", "fmsp.sandbox_worker", str(control / "job.json")],
            cwd=scratch, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=_worker_env(self.sys_path),
            start_new_session=True, close_fds=True,
        )  # fmt: skip
        proc.returncode = 0  # reaped by os.wait4 in _wait; stop Popen.__del__ from tracking it
        return proc.pid

    def _collect(self, control: Path, status: int | None, timed_out: bool, wall_s: float,
                 cpu_s: float) -> SandboxResult:  # fmt: skip
        limits = self.limits
        stdout = _read_capped(control / "stdout", limits.max_output_chars)
        stderr = _read_capped(control / "stderr", limits.max_output_chars)
        signalled = status is not None and os.WIFSIGNALED(status)
        killed = timed_out or signalled
        base = {"timed_out": timed_out, "killed": killed, "wall_s": wall_s, "cpu_s": cpu_s}
        if timed_out:
            return SandboxResult(ok=False, error=f"wall-clock timeout after {wall_s:.1f} s", error_type="Timeout",
                                 stdout=stdout, stderr=stderr, **base)  # fmt: skip
        result_path = control / "result.json"
        if signalled or not result_path.exists() or result_path.stat().st_size == 0:
            sig = os.WTERMSIG(status) if signalled else None
            why = {signal.SIGXCPU: "CPU time limit exceeded", signal.SIGKILL: "killed (memory or limit)"}.get(
                sig, f"worker died (signal {sig}, exit {os.waitstatus_to_exitcode(status) if status else '?'})"
            )  # fmt: skip
            return SandboxResult(ok=False, error=why, error_type="WorkerDied", stdout=stdout, stderr=stderr, **base)
        data = json.loads(result_path.read_text())
        return SandboxResult(
            ok=bool(data.get("ok")), value=data.get("value"), error=data.get("error"),
            error_type=data.get("error_type"), stdout=_cap(data.get("stdout", "") + stdout, limits.max_output_chars),
            stderr=_cap(data.get("stderr", "") + stderr, limits.max_output_chars), traceback=data.get("traceback"),
            call_index=data.get("call_index"), isolation=data.get("isolation", {}), **base,
        )  # fmt: skip
