"""The sandbox worker: `python -m fmsp.sandbox_worker JOB.json` runs one batch of domain calls on untrusted code.

It is started by `fmsp.sandbox.Sandbox` in its own session (process group) with a scratch directory as cwd.
Before any untrusted code runs it (1) imports the trusted domain entry and the allowed modules, (2) moves into a
fresh network namespace when the kernel allows it and replaces `socket.socket`, (3) sets rlimits (CPU, address
space, file size, processes), (4) installs an audit hook that blocks process creation, sockets and writes outside
the scratch directory, (5) installs an import guard: code compiled from a string (policy code) may import only
the domain's allowed modules. Python-level stdout/stderr are captured and truncated, and only the JSON result
(scores or the error) is written to the result file the parent named. These are defence-in-depth layers, not a
security boundary like a container or gVisor.
"""

from __future__ import annotations

import builtins
import ctypes
import importlib
import io
import json
import os
import resource
import socket
import sys
import traceback
from typing import Any

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_BLOCKED_EVENTS = (
    "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.system", "os.kill", "os.killpg",
    "subprocess.Popen", "pty.spawn", "socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo",
    "ctypes.dlopen", "ctypes.cdata", "sys.addaudithook", "os.putenv", "os.chdir", "shutil.rmtree",
    "os.remove", "os.rmdir", "os.rename", "os.symlink", "os.link", "os.truncate", "os.chmod", "os.chown",
)  # fmt: skip


class SandboxViolation(PermissionError):
    """Untrusted code attempted an operation the sandbox forbids (network, processes, writes outside scratch)."""


class _CappedText(io.TextIOBase):
    """A text stream that keeps at most `limit` characters and counts what it dropped."""

    def __init__(self, limit: int) -> None:
        self.limit, self.parts, self.size, self.dropped = limit, [], 0, 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        keep = max(0, min(len(text), self.limit - self.size))
        if keep:
            self.parts.append(text[:keep])
            self.size += keep
        self.dropped += len(text) - keep
        return len(text)

    def value(self) -> str:
        tail = f"\n...[truncated {self.dropped} chars]" if self.dropped else ""
        return "".join(self.parts) + tail


def load_policy(policy: dict[str, Any]) -> dict[str, Any]:
    """Compile a policy's code into a fresh namespace (own builtins, import-restricted) and return the namespace."""
    # A private copy of the builtins (holding the guarded __import__): a policy that rebinds `abs` or `len`
    # cannot change them for the trusted match code or the other policy.
    namespace: dict[str, Any] = {"__name__": f"fmsp_policy_{policy.get('side', 'x')}",
                                 "__builtins__": dict(vars(builtins))}  # fmt: skip
    code = compile(policy["code"], f"<policy:{policy.get('name', '?')}>", "exec")
    exec(code, namespace)  # noqa: S102 - this is the sandbox; the guard below restricts what it may import
    return namespace


def _resolve(entry: str) -> Any:
    module_name, _, func_name = entry.partition(":")
    if not func_name:
        raise ValueError(f"entry {entry!r} must look like 'module:function'")
    return getattr(importlib.import_module(module_name), func_name)


def _unshare_network() -> bool:
    """Move into a fresh, empty network namespace (no interfaces but a down loopback); False if not allowed."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    flags = _CLONE_NEWNET if os.geteuid() == 0 else _CLONE_NEWUSER | _CLONE_NEWNET
    return libc.unshare(flags) == 0


def _set_limits(limits: dict[str, int]) -> None:
    for name, value in limits.items():
        which = getattr(resource, name)
        _, hard = resource.getrlimit(which)
        hard_ok = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (hard_ok, hard_ok))


def _install_audit_hook(scratch: str) -> None:
    scratch = os.path.realpath(scratch)

    def hook(event: str, args: tuple) -> None:
        if event in _BLOCKED_EVENTS:
            raise SandboxViolation(f"sandbox: {event} is not allowed")
        if event == "open" and args and isinstance(args[0], str | bytes):
            mode, flags = (args[1] or "r"), (args[2] or 0)
            writing = any(c in str(mode) for c in "wax+") or flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
            path = os.path.realpath(os.fsdecode(args[0]))
            if writing and not (path == scratch or path.startswith(scratch + os.sep)):
                raise SandboxViolation(f"sandbox: writing {path} outside the scratch directory is not allowed")

    sys.addaudithook(hook)


def _install_import_guard(allowed: set[str]) -> None:
    """Restrict imports made by string-compiled code (policies) to the allowed top-level modules."""
    real_import = builtins.__import__

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002
        caller = sys._getframe(1).f_code.co_filename
        if caller.startswith("<") and not caller.startswith("<frozen"):
            root = name.partition(".")[0]
            if level != 0 or root not in allowed:
                raise ImportError(f"sandbox: import of {name!r} is not allowed (allowed: {sorted(allowed)})")
        return real_import(name, globals, locals, fromlist, level)

    builtins.__import__ = guarded_import


class _NoSocket(socket.socket):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise SandboxViolation("sandbox: network access is not allowed")


def _harden(job: dict[str, Any]) -> dict[str, bool]:
    """Apply every isolation layer; returns which optional layers took effect."""
    for name in job["allowed_imports"]:
        importlib.import_module(name)  # pre-import so policies get cached modules
    netns = _unshare_network() if job.get("unshare_network", True) else False
    socket.socket = _NoSocket  # type: ignore[misc]
    _set_limits(job["rlimits"])
    _install_audit_hook(job["scratch"])
    _install_import_guard(set(job["allowed_imports"]))
    return {"network_namespace": netns}


def _error_dict(exc: BaseException, call_index: int | None) -> dict[str, Any]:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-6)
    return {"error": f"{type(exc).__name__}: {exc}", "error_type": type(exc).__name__,
            "traceback": "".join(tb)[-4000:], "call_index": call_index}  # fmt: skip


def _check_builtins(pristine: dict[str, Any]) -> None:
    """Fail the call if the shared builtins module changed: policies get private copies of its namespace,
    but can still reach the module itself (e.g. `abs.__self__`) and rebind what the trusted match code uses."""
    now = vars(builtins)
    changed = sorted(k for k in pristine.keys() | now.keys() if now.get(k, _MISSING) is not pristine.get(k, _MISSING))
    if changed:
        raise SandboxViolation(f"sandbox: policy code modified the shared builtins module ({', '.join(changed)}); "
                               "the result of this call is discarded")  # fmt: skip


_MISSING = object()


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Run `entry(*call)` for every call of the job in this process; stop at the first exception."""
    out, err = _CappedText(job["max_output_chars"]), _CappedText(job["max_output_chars"])
    result: dict[str, Any] = {"ok": False, "value": None}
    try:
        func = _resolve(job["entry"])
        result["isolation"] = _harden(job)
        sys.stdout, sys.stderr = out, err
        values = []
        pristine = dict(vars(builtins))  # the guarded builtins as hardened, before any policy code ran
        for index, call in enumerate(job["calls"]):
            try:
                try:
                    values.append(func(*call))
                finally:  # a tampered builtin may also be why the call failed: the violation wins
                    _check_builtins(pristine)
            except BaseException as exc:  # noqa: BLE001 - untrusted code may raise anything, even SystemExit
                result.update(_error_dict(exc, index))
                break
        else:
            result.update(ok=True, value=values)
    except BaseException as exc:  # noqa: BLE001
        result.update(_error_dict(exc, None))
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    result["stdout"], result["stderr"] = out.value(), err.value()
    return result


def _encode(result: dict[str, Any], max_bytes: int) -> str:
    try:
        text = json.dumps(result, default=repr)
    except (TypeError, ValueError) as exc:
        text = json.dumps({"ok": False, "error": f"result not JSON-able: {exc}", "error_type": "ResultError"})
    if len(text.encode()) > max_bytes:
        text = json.dumps({"ok": False, "error": f"result larger than {max_bytes} bytes",
                           "error_type": "ResultTooLarge", "stdout": result.get("stdout", "")[:2000]})  # fmt: skip
    return text


def main(argv: list[str]) -> int:
    with open(argv[0]) as fh:
        job = json.load(fh)
    result_file = open(job["result_path"], "w")  # opened before the audit hook; written once at the end
    sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]  # nothing importable from scratch
    result = run_job(job)
    result_file.write(_encode(result, job["max_result_bytes"]))
    result_file.flush()
    os._exit(0)  # skip interpreter teardown: untrusted __del__ / atexit code must not run after the result


if __name__ == "__main__":
    main(sys.argv[1:])
