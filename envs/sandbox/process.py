"""`SandboxedPolicy`: one untrusted policy in its own contained process, driven over a pipe.

The harness (trusted) keeps the game, the bookkeeping and the score; the policy process only ever receives
requests (observations) and returns replies (actions), one JSON line each (`envs.sandbox.protocol`). Requests
can be pipelined: `submit` sends at once and `result` waits, so the harness can ask every policy of a
lock-step round before reading any answer (`envs.base.act_all`). Every failure, whatever the
policy did, surfaces as one `PolicyError` naming this policy's `label`; the process is then killed.

    with SandboxedPolicy(code, label="a", config=SandboxConfig(), methods=("__call__",)) as policy:
        action = policy.call("__call__", observation)
"""

from __future__ import annotations

import atexit
import base64
import os
import select
import signal
import subprocess
import tempfile
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envs.base import Pipelined
from envs.sandbox.config import PolicyError, SandboxConfig
from envs.sandbox.layers import WORKER_PID, require_layers, worker_command, worker_env
from envs.sandbox.protocol import decode, encode
from envs.sandbox.seccomp import seccomp_program
from envs.sandbox.text import safe_text

_LIVE: weakref.WeakSet[SandboxedPolicy] = weakref.WeakSet()
# RLIMIT_SIGPENDING: queued signals (each pins a kernel sigqueue entry). The host default grows with RAM (tens of
# thousands); a policy needs none queued (timer_create and rt_sigqueueinfo are not on the seccomp allow-list).
SIGPENDING = 16


@dataclass
class _Pending:
    op: str
    slow: bool  # sent before the process reported ready: start-up time is added to its limit


class SandboxedPolicy(Pipelined):
    """A policy class (Python source `code`) instantiated in its own sandboxed process.

    `methods`: the class must define these (it is found among the code's classes by them, or by
    `class_name`; `name` breaks ties). `preload`: modules the worker imports before the seccomp filter
    (e.g. numpy), so start-up cost is paid once. The process starts on the first request or `start()`.
    """

    def __init__(self, code: str, *, label: str, config: SandboxConfig | None = None, methods: tuple[str, ...] = (),
                 class_name: str | None = None, name: str = "policy", preload: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.label, self.config = label, config or SandboxConfig()
        self._load = {"op": "load", "slot": "policy", "code": code, "methods": list(methods),
                      "class_name": class_name, "name": name}  # fmt: skip
        self._preload = list(preload)
        self._proc: subprocess.Popen | None = None
        self._stderr: Any = None
        self._scratch: tempfile.TemporaryDirectory | None = None
        self._pending: list[_Pending] = []
        self._buffer = b""
        self._waited = 0.0  # seconds the harness has spent waiting for this process's replies (its total budget)
        self._ready = False
        self._error: PolicyError | None = None
        self.info: dict[str, Any] = {}  # the loaded class: name, description, class (set by the load reply)
        self.checks: dict[str, Any] = {}  # what the worker verified about its own containment
        self._cpu_s = 0.0  # the last host measurement (see `cpu_s`)

    @property
    def cpu_s(self) -> float:
        """CPU seconds used so far by the whole sandbox (worker, bubblewrap, setpriv), measured by the host from
        /proc/<pid>/stat, never taken from a reply; kept after the process ends (read before it is killed)."""
        if self._proc is not None:
            self._cpu_s = max(self._cpu_s, _tree_cpu_s(self._proc.pid))
        return self._cpu_s

    # --- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Spawn the process and queue its set-up (limits, seccomp, loading the code); does not wait."""
        if self._proc is not None or self._error is not None:
            return
        layers = require_layers(self.config)
        argv, in_bwrap = worker_command(layers, self.config)
        cwd = "/"
        if not in_bwrap:  # no private tmpfs: a host directory owned by the sandbox uid, removed on close
            self._scratch = tempfile.TemporaryDirectory(prefix="sandbox-scratch-")
            cwd = self._scratch.name
            if layers.root and layers.setpriv:
                os.chown(cwd, self.config.uid, self.config.gid)
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(  # noqa: S603 - fixed argv built by envs.sandbox.layers
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, cwd=cwd,
            env={} if in_bwrap else worker_env(), start_new_session=True, close_fds=True,
        )  # fmt: skip
        _LIVE.add(self)
        os.set_blocking(self._proc.stdin.fileno(), False)
        program = seccomp_program(WORKER_PID if in_bwrap else self._proc.pid) if layers.seccomp else None
        config = self.config
        self._send("init", {"op": "init", "preload": self._preload, "max_output_chars": config.max_output_chars,
                            "seccomp": base64.b64encode(program).decode() if program else None,
                            "rlimits": {"RLIMIT_CPU": config.cpu_s, "RLIMIT_AS": config.memory_mb << 20,
                                        "RLIMIT_FSIZE": config.max_file_mb << 20, "RLIMIT_NOFILE": config.max_open_files,
                                        "RLIMIT_NPROC": 0, "RLIMIT_CORE": 0, "RLIMIT_MSGQUEUE": 0,
                                        "RLIMIT_MEMLOCK": 0, "RLIMIT_SIGPENDING": SIGPENDING}})  # fmt: skip
        self._send("load", self._load)

    def close(self) -> None:
        """End the process (EOF, then SIGKILL to its whole process group) and reap it; idempotent."""
        proc, self._proc = self._proc, None
        self._pending, self._buffer = [], b""
        if proc is None:
            return
        _LIVE.discard(self)
        self._cpu_s = max(self._cpu_s, _tree_cpu_s(proc.pid))  # before the kill takes the figures with it
        try:
            proc.stdin.close()
        except OSError:
            pass
        _wait(proc.pid, 0.2, reap=False)  # a moment to exit on EOF; unreaped, so its pid (the group id) stays ours
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # stragglers too; the pid namespace dies with its init
        except (ProcessLookupError, PermissionError):
            pass
        proc.returncode = _wait(proc.pid, 10.0)
        proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
        if self._scratch is not None:
            self._scratch.cleanup()

    def __enter__(self) -> SandboxedPolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    # --- requests ----------------------------------------------------------------------------------
    def submit(self, method: str, *args: Any, slot: str = "policy") -> None:
        """Send one call request without waiting for its reply."""
        self._send("call", {"op": "call", "slot": slot, "method": method, "args": list(args)})

    def result(self) -> Any:
        """Wait for every outstanding reply; returns the last one's value or raises PolicyError."""
        if self._error is not None:
            raise self._error
        value = None
        while self._pending:
            value = self._receive()
        return value

    def ask(self, method: str, argument: Any) -> Callable[[], Any]:
        """`submit` one call now; the returned `result` waits for it (`envs.base.Pipelined`, for `act_all`)."""
        self.submit(method, argument)
        return self.result

    def call(self, method: str, *args: Any, slot: str = "policy") -> Any:
        """`submit` then `result`."""
        self.submit(method, *args, slot=slot)
        return self.result()

    def load_helper(self, slot: str, code: str, class_name: str) -> None:
        """Instantiate trusted helper code (e.g. a guard that evaluates the policy's regexes) in this process,
        so that whatever the policy's data makes it do is charged to this policy's limits."""
        self._send("load", {"op": "load", "slot": slot, "code": code, "methods": [], "class_name": class_name,
                            "name": class_name})  # fmt: skip

    def new_instance(self) -> None:
        """Replace the policy object by a fresh instance of its class (same process)."""
        self._send("new", {"op": "new", "slot": "policy"})

    def fresh(self) -> SandboxedPolicy:
        """A new, not yet started process of the same code, interface and limits (e.g. to probe a policy again
        after it failed: a failed handle stays closed)."""
        load = self._load
        return SandboxedPolicy(load["code"], label=self.label, config=self.config, methods=tuple(load["methods"]),
                               class_name=load["class_name"], name=load["name"], preload=tuple(self._preload))

    def loaded(self) -> dict[str, Any]:
        """Start if needed, wait for the code to load, and return `info` (name, description, class)."""
        self.start()
        self.result()
        return self.info

    def failure(self, kind: str, message: str, detail: str = "") -> PolicyError:
        """A PolicyError for this policy (the harness rejected what it did); the process is ended."""
        self._error = self._error or PolicyError(self.label, kind, message, detail)
        self.close()
        return self._error

    # --- the pipe ----------------------------------------------------------------------------------
    def _send(self, op: str, message: dict[str, Any]) -> None:
        if self._error is not None:
            raise self._error
        if self._proc is None:
            self.start()
        self._pending.append(_Pending(op, not self._ready))
        try:
            data = encode(message)
        except (TypeError, ValueError) as exc:  # the harness sent something unencodable: a bug, not the policy's
            raise TypeError(f"cannot send {op} request to the policy process: {exc}") from None
        fd, view = self._proc.stdin.fileno(), memoryview(data)
        deadline = time.monotonic() + self.config.call_timeout_s
        while view:
            ready = _poll(fd, select.POLLOUT, deadline)
            if ready is None:
                raise self.failure("timeout", f"the policy stopped reading its requests ({op})")
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError):
                raise self._died(op) from None

    def _receive(self) -> Any:
        pending = self._pending[0]
        fd = self._proc.stdout.fileno()
        started = time.monotonic()
        # Charged only while the harness waits on this process, so a slow opponent never uses up its budget.
        budget = min(self.config.call_timeout_s, self.config.total_timeout_s - self._waited)
        deadline = started + budget + (self.config.start_timeout_s if pending.slow else 0.0)
        while b"\n" not in self._buffer:
            if len(self._buffer) > self.config.max_message_bytes:
                raise self.failure("protocol", f"reply to {pending.op} longer than {self.config.max_message_bytes} bytes")
            if _poll(fd, select.POLLIN, deadline) is None:
                raise self.failure("timeout", f"no reply to {pending.op} within the time limit ({self.config.call_timeout_s:g} s "
                                   f"per call, {self.config.total_timeout_s:g} s in all, plus start-up for the first)")
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise self._died(pending.op)
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        self._pending.pop(0)
        self._waited += 0.0 if pending.slow else time.monotonic() - started
        try:
            reply = decode(line, finite=True)
            problem = _check_reply(reply, pending.op)
        except (ValueError, RecursionError, TypeError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        if problem:
            raise self.failure("protocol", f"malformed reply to {pending.op}: {problem}") from None
        value = reply.get("value")
        if reply["ok"] is not True:
            kind = "start" if pending.op == "init" else reply.get("kind", "exception")
            raise self.failure(kind, _text(reply.get("error"), 500), _text(reply.get("detail"), self.config.max_output_chars))
        if pending.op == "init":
            self._ready = True
            self.checks = value
        elif pending.op == "load" and not self.info:
            self.info = value
        return value

    def _died(self, op: str) -> PolicyError:
        self._stderr.seek(0)
        tail = self._stderr.read(4000).decode(errors="replace").strip()  # bwrap's or the interpreter's start-up errors
        status = _wait(self._proc.pid, 1.0, reap=False)
        how = "" if status is None else f" ({_describe(status)})"
        kind = "start" if not self._ready else "crash"
        return self.failure(kind, f"the policy process died during {op}{how}", tail)


_REPLY_KEYS = {True: {"ok", "value"}, False: {"ok", "kind", "error", "detail"}}
_ERROR_KINDS = ("load", "exception", "memory")
_INFO_KEYS = ("class", "name", "description")


def _check_reply(reply: Any, op: str) -> str | None:
    """What is wrong with a decoded reply (None: nothing): the keys, the error fields, and the values the harness
    keeps for `init` (the worker's checks) and `load` (the class's name and description)."""
    if not isinstance(reply, dict) or reply.get("ok") not in (True, False) or type(reply["ok"]) is not bool:
        return "not an object with a boolean 'ok'"
    extra = set(reply) - _REPLY_KEYS[reply["ok"]]
    if extra:
        return f"unexpected field(s) {', '.join(sorted(repr(k)[:40] for k in extra)[:5])}"
    if not reply["ok"]:
        if reply.get("kind", "exception") not in _ERROR_KINDS:
            return "unknown error kind"
        if not all(isinstance(reply.get(k, ""), str) for k in ("error", "detail")):
            return "error and detail must be strings"
        return None
    value = reply.get("value")
    if op == "init":
        scalar = (bool, int, type(None))
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, scalar) for k, v in value.items()):
            return "the init reply must be an object of flags and numbers"
        if any(type(v) is int and not -(1 << 63) <= v < 1 << 63 for v in value.values()):
            return "a number out of range in the init reply"
    if op == "load":
        if not isinstance(value, dict) or set(value) != set(_INFO_KEYS):
            return f"the load reply must be an object with keys {', '.join(_INFO_KEYS)}"
        if not all(v is None or (isinstance(v, str) and len(v) <= 500) for v in value.values()):
            return "class, name and description must be strings of at most 500 characters"
    return None


def _tree_cpu_s(root: int) -> float:
    """User + system CPU seconds of `root` and all its descendants (and of their reaped children), read from
    /proc/<pid>/stat on the host; what a policy does inside its process cannot change these figures."""
    ticks, stack, seen = 0, [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rpartition(b")")[2].split()  # the name may hold spaces and parentheses
            ticks += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime (stat fields 14-17)
            with open(f"/proc/{pid}/task/{pid}/children", "rb") as fh:
                stack += [int(child) for child in fh.read().split()]
        except (OSError, ValueError):
            continue
    return ticks / _CLOCK_TICKS


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _text(value: Any, limit: int) -> str:
    """A policy's error text, escaped and capped (`PolicyError` escapes again; this keeps the cap of the config)."""
    return safe_text(value if isinstance(value, str) else "", limit, multiline=True)


def _poll(fd: int, event: int, deadline: float) -> int | None:
    """Wait until `fd` is ready for `event` (or hung up); None when `deadline` passes first."""
    poller = select.poll()
    poller.register(fd, event)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        events = poller.poll(left * 1000)
        if events:
            return events[0][1]


def _wait(pid: int, timeout_s: float, reap: bool = True) -> int | None:
    """The exit code once `pid` exits (negative: killed by that signal); None on timeout. `reap=False` leaves the
    process a zombie, so its pid cannot be reused before the harness is done with its process group."""
    deadline = time.monotonic() + timeout_s
    delay = 0.001
    flags = os.WEXITED | os.WNOHANG | (0 if reap else os.WNOWAIT)
    while True:
        try:
            info = os.waitid(os.P_PID, pid, flags)
        except ChildProcessError:
            return 0
        if info is not None:
            return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        if time.monotonic() >= deadline:
            return None
        time.sleep(delay)
        delay = min(delay * 2, 0.02)


def _describe(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    if code > 128 and code - 128 in signal.Signals._value2member_map_:  # bwrap reports a signalled child as 128+n
        return f"killed by {signal.Signals(code - 128).name}"
    return f"exit status {code}"


@atexit.register
def _close_all() -> None:
    """No policy process outlives the harness (also covered by bubblewrap's --die-with-parent)."""
    for policy in list(_LIVE):
        policy.close()
