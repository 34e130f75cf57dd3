"""The program inside a policy process: set up the containment, load the policy, answer requests.

Started by `envs.sandbox.process.SandboxedPolicy` (inside bubblewrap where available) with requests on fd 0
and replies on fd 1. Before any policy code is read it moves the pipe to private descriptors, points 0-2 at
/dev/null, closes every other inherited descriptor, imports the preloaded modules, sets the rlimits and loads
the seccomp program the harness compiled (no_new_privs first). Then it answers, one JSON line per request:

    {"op": "init", ...}                          -> {"ok": true, "value": {checks of its own containment}}
    {"op": "load", "slot", "code", ...}          -> {"ok": true, "value": {"name", "description", "class"}}
    {"op": "new", "slot"}                        -> a fresh instance of the slot's class
    {"op": "call", "slot", "method", "args"}     -> {"ok": true, "value": return value}

(the harness measures the process's CPU time itself, from the host; a reply carries nothing else).

Errors come back as {"ok": false, "kind": "load"|"exception"|"memory", "error", "detail"} ("memory": a
MemoryError, or a write refused for want of space or by the file-size limit). Nothing here is a security
boundary: the policy shares this process and can rewrite all of it; what it cannot do is reach anything
outside the process, which the OS layers guarantee. Stdlib only (numpy only if preloaded).
"""

from __future__ import annotations

import base64
import ctypes
import errno
import importlib
import inspect
import io
import linecache
import os
import random
import resource
import socket
import sys
import traceback
from typing import Any

from envs import game_spec, make_game
from envs.base import View
from envs.sandbox.protocol import decode, encode

_PR_SET_NO_NEW_PRIVS, _PR_GET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _PR_GET_SECCOMP = 38, 39, 22, 21
_SECCOMP_MODE_FILTER = 2
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.ENOMEM)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


class _Capped(io.TextIOBase):
    """Where the policy's print() goes: the first `limit` characters are kept for error reports."""

    def __init__(self, limit: int) -> None:
        self.limit, self.text = limit, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if len(self.text) < self.limit:
            self.text += str(text)[: self.limit - len(self.text)]
        return len(text)


def _load_seccomp(libc: ctypes.CDLL, program: bytes) -> None:
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buffer))
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "loading the seccomp filter failed")


def _checks(libc: ctypes.CDLL) -> dict[str, Any]:
    """What this process can observe of its own containment (reported to the harness at start-up)."""
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()
    caps = None if libc.capget(ctypes.byref(header), data) else data[0].effective | data[1].effective
    try:
        socket.socket().close()
        sockets = True
    except OSError:
        sockets = False
    return {"uid": os.getuid(), "pid": os.getpid(), "effective_capabilities": caps,
            "no_new_privs": libc.prctl(_PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1,
            "seccomp": libc.prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) == _SECCOMP_MODE_FILTER,
            "sockets": sockets, "host_proc": os.path.exists("/proc/1/environ")}  # fmt: skip


def _init(message: dict[str, Any]) -> dict[str, Any]:
    for module in message.get("preload", ()):
        importlib.import_module(module)
    for name, value in message["rlimits"].items():
        limit = getattr(resource, name)
        hard = resource.getrlimit(limit)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (value, value))
    libc = ctypes.CDLL(None, use_errno=True)
    if message.get("seccomp"):
        _load_seccomp(libc, base64.b64decode(message["seccomp"]))
    return _checks(libc)


def _defines(cls: type, method: str) -> bool:
    """Whether `cls` (or a base other than object) defines `method` (not e.g. type.__call__ of every class)."""
    return any(callable(vars(k).get(method)) for k in cls.__mro__ if k is not object)


def _find_class(namespace: dict[str, Any], message: dict[str, Any]) -> type:
    methods, wanted, name = message.get("methods", []), message.get("class_name"), str(message.get("name"))
    if wanted:
        cls = namespace.get(wanted)
        if not isinstance(cls, type):
            found = sorted(k for k, v in namespace.items() if isinstance(v, type) and v.__module__ == "policy")
            raise LookupError(f"no class {wanted!r}; classes defined: {', '.join(found) or 'none'}")
        missing = [m for m in methods if not _defines(cls, m)]
        if missing:
            raise LookupError(f"class {wanted!r} has no method(s) {', '.join(missing)}")
        return cls
    classes = [v for v in namespace.values() if isinstance(v, type) and v.__module__ == "policy"
               and all(_defines(v, m) for m in methods)]  # fmt: skip
    if len(classes) > 1:
        classes = [c for c in classes if name in (c.__name__, getattr(c, "name", None))]
    if len(classes) != 1:
        raise LookupError(f"the code must define exactly one class with method(s) {', '.join(methods)}; "
                          f"found {len(classes)}")  # fmt: skip
    return classes[0]


def _instantiate(cls: type) -> Any:
    instance = cls()
    if getattr(cls, "__abstractmethods__", None):
        raise TypeError(f"class {cls.__name__!r} is abstract (missing {', '.join(sorted(cls.__abstractmethods__))})")
    return instance


def _describe(cls: type, instance: Any) -> dict[str, Any]:
    def text(attr: str) -> str | None:
        value = getattr(instance, attr, None)
        return value[:500] if isinstance(value, str) else None

    return {"class": cls.__name__, "name": text("name"), "description": text("description")}


def _reset_args(args: list[Any]) -> list[Any]:
    """A strategy's reset(game, seat, rng): the game rebuilt from (name, params), the rng from its state."""
    (game_name, params), seat, state = args
    accepted = inspect.signature(game_spec(game_name).game).parameters
    game = make_game(game_name, **{k: v for k, v in params.items() if k in accepted})
    rng = random.Random()
    rng.setstate((state[0], tuple(state[1]), state[2]))
    return [game, seat, rng]


def _view(fields: dict[str, Any]) -> Any:
    return View(**{**fields, "legal_actions": tuple(fields["legal_actions"]), "history": tuple(fields["history"])})


def _call(instance: Any, method: str, args: list[Any]) -> Any:
    """Call `method`, adapting the two strategy calls that carry harness objects (see SandboxedStrategy)."""
    if method == "reset_strategy":
        reset = getattr(instance, "reset", None)
        if reset is None:
            return None

        takes_none = len(inspect.signature(reset).parameters) == 0
        return reset() if takes_none else reset(*_reset_args(args))
    if method == "act_strategy":
        fields, view_format = args
        return instance.act(_view(fields) if view_format == "object" else fields)
    return getattr(instance, method)(*args)


def _error(kind: str, exc: BaseException, out: _Capped, limit: int) -> dict[str, Any]:
    try:
        detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-8))
        error = f"{type(exc).__name__}: {exc}"
    except BaseException:  # noqa: BLE001 - even formatting a hostile exception may raise
        detail, error = "", f"{type(exc).__name__} (unprintable)"
    if out.text:
        detail += "\n--- printed output ---\n" + out.text
    return {"ok": False, "kind": kind, "error": error[:500], "detail": detail[-limit:]}


def serve(reader: Any, writer: Any) -> None:
    """The request loop; returns on EOF."""
    slots: dict[str, tuple[type, Any]] = {}
    limit = 4000
    while True:
        line = reader.readline()
        if not line:
            return
        out = _Capped(limit)
        sys.stdout = sys.stderr = out
        op = "?"
        try:
            message = decode(line)
            op = message["op"]
            if op == "init":
                limit = int(message.get("max_output_chars", limit))
                value: Any = _init(message)
            elif op == "load":
                namespace: dict[str, Any] = {"__name__": "policy"}
                filename = f"<{message.get('name', 'policy')}>"
                lines = message["code"].splitlines(keepends=True)
                linecache.cache[filename] = (len(message["code"]), None, lines, filename)  # source lines in tracebacks
                exec(compile(message["code"], filename, "exec"), namespace)  # noqa: S102
                cls = _find_class(namespace, message)
                slots[message["slot"]] = (cls, _instantiate(cls))
                value = _describe(cls, slots[message["slot"]][1])
            elif op == "new":
                cls = slots[message["slot"]][0]
                slots[message["slot"]] = (cls, _instantiate(cls))
                value = None
            else:
                value = _call(slots[message["slot"]][1], message["method"], message["args"])
            reply = encode({"ok": True, "value": value})
        except BaseException as exc:  # noqa: BLE001 - policy code may raise anything, SystemExit included
            kind = "load" if op in ("load", "new") else "exception"
            if isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno in _NO_SPACE):
                kind = "memory"
            reply = encode(_error(kind, exc, out, limit))
        writer.write(reply)
        writer.flush()


def main() -> None:
    """Entry point of the process (see the module docstring)."""
    requests, replies = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    keep = sorted({0, 1, 2, requests, replies})
    for low, high in zip(keep, [*keep[1:], 1 << 16]):
        os.closerange(low + 1, high)
    try:
        serve(os.fdopen(requests, "rb"), os.fdopen(replies, "wb"))
    finally:
        os._exit(0)  # no interpreter teardown: policy __del__/atexit code gets no last word
