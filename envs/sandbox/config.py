"""Limits of a policy process and the one error every sandbox failure becomes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envs.sandbox.rng import run_rng_key
from envs.sandbox.text import safe_text

# What a failure's `kind` can be (the `failure.kind` of `fmsp match` and the FMSP records).
FAILURE_KINDS = (
    "start",  # the sandbox could not start (a missing layer, a bad interpreter path)
    "load",  # the code does not compile or define the policy class
    "exception",  # the policy raised
    "timeout",  # a call or the whole process exceeded its wall-clock budget
    "crash",  # the process died (CPU limit, a signal, os._exit, a memory limit hit outside Python)
    "memory",  # a memory or storage bound was exceeded (address space, the scratch tmpfs, file size)
    "protocol",  # the reply was not one well-formed JSON line answering the request (or had a non-finite number)
    "invalid_action",  # the harness rejected the value (type, shape, NaN, illegal action)
)


@dataclass(frozen=True)
class SandboxConfig:
    """How policy processes are contained. Times are wall-clock seconds, enforced by the harness.

    `unsafe=True` runs policies even when an isolation layer is missing on this machine (the layers
    that are present still apply); it is the `--unsafe-sandbox` flag of the CLIs.
    """

    call_timeout_s: float = 10.0  # one request (one step of all games, one act, one reset)
    start_timeout_s: float = 30.0  # process start-up, imports and the seccomp filter, on top of the first call
    total_timeout_s: float = 600.0  # all the harness's waits on one process (one match, one rollout) together
    cpu_limit_s: int | None = None  # RLIMIT_CPU; None: the total wall-clock budget
    memory_mb: int = 1024  # RLIMIT_AS
    max_file_mb: int = 8  # RLIMIT_FSIZE
    scratch_mb: int = 32  # size of the private writable tmpfs (the working directory)
    max_open_files: int = 64  # RLIMIT_NOFILE
    max_message_bytes: int = 8 << 20  # a longer reply is a protocol failure
    max_output_chars: int = 4000  # what is kept of a policy's prints and tracebacks
    uid: int = 65534  # the unprivileged uid/gid a root harness drops to (nobody)
    gid: int = 65534
    unsafe: bool = False
    # The per-run secret that keys every rng a policy is given (`envs.sandbox.rng`); never sent to a policy.
    rng_key: str = field(default_factory=run_rng_key, repr=False)

    def __post_init__(self) -> None:
        for key in ("call_timeout_s", "start_timeout_s", "total_timeout_s"):
            if not getattr(self, key) > 0:
                raise ValueError(f"SandboxConfig.{key} must be > 0, got {getattr(self, key)!r}")
        for key in ("memory_mb", "max_file_mb", "scratch_mb", "max_open_files", "max_message_bytes"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 1:
                raise ValueError(f"SandboxConfig.{key} must be a positive integer, got {getattr(self, key)!r}")
        if not isinstance(self.rng_key, str) or len(self.rng_key) < 32:
            raise ValueError("SandboxConfig.rng_key must be a secret string of at least 32 characters")

    @property
    def cpu_s(self) -> int:
        """RLIMIT_CPU in seconds: `cpu_limit_s`, or the total wall-clock budget rounded up."""
        return self.cpu_limit_s if self.cpu_limit_s is not None else int(self.total_timeout_s) + 1


class PolicyError(Exception):
    """A policy failed: `label` names which one (e.g. "a"/"b", a pool member), `kind` is in FAILURE_KINDS.

    `detail` is the policy's own account (traceback, prints), capped; it is produced inside the sandbox,
    which holds no host secrets, so it may be shown to users and FMs. Message and detail are written by the
    policy, so both pass `safe_text` here (control characters escaped, length capped) before anyone shows them.
    """

    def __init__(self, label: str, kind: str, message: str, detail: str = "") -> None:
        if kind not in FAILURE_KINDS:
            raise ValueError(f"unknown failure kind {kind!r}; valid: {', '.join(FAILURE_KINDS)}")
        label, message = safe_text(label, 200), safe_text(message, 1000)
        detail = safe_text(detail, 8000, multiline=True)
        super().__init__(f"policy {label!r} failed ({kind}): {message}")
        self.label, self.kind, self.message, self.detail = label, kind, message, detail

    def to_dict(self) -> dict[str, Any]:
        """The `failure` object of match results: kind, message and the policy's detail."""
        return {"kind": self.kind, "message": self.message, "detail": self.detail}
