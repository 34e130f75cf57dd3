"""Bounds on what a policy can hold outside its address space, measured on the host:
`python -m benchmarks.sandbox_bounds` writes `benchmarks/sandbox_bounds.json` (quoted by docs/sandbox.md).

Each hostile policy below runs in the real sandbox (root harness, every layer) and reports what it got, while the
host's own figures are read around it: MemAvailable while a policy tries to pin 1536 MB of huge pages in pipe
buffers (vmsplice, F_SETPIPE_SZ), /proc/sys/fs/aio-nr and a root io_setup probe while it tries to take the
host-wide AIO limit, SUnreclaim while it creates POSIX timers; plus the rlimits a worker reports, the size of the
two pipes it shares with the harness, transparent huge pages, and whether cgroup v2 offers a memory controller here.
`tests/test_sandbox_kernel.py` asserts the same effects with its own bounds.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from envs.sandbox import SandboxConfig, SandboxedPolicy
from sepo.files import write_json_atomic

OUT = Path(__file__).parent / "sandbox_bounds.json"
F_GETPIPE_SZ = 1032

# x86_64 system-call numbers, and a helper the hostile policies share.
PRELUDE = r'''
import ctypes, errno, mmap, os

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
SYS = {"io_setup": 206, "timer_create": 222, "vmsplice": 278, "futex": 202, "fadvise64": 221, "preadv2": 327,
       "madvise": 28}


def syscall(name, *args):
    """(result, errno name or None)."""
    result = libc.syscall(SYS[name], *args)
    return result, (errno.errorcode.get(ctypes.get_errno(), "?") if result == -1 else None)
'''


def meminfo(field: str) -> int:
    """A /proc/meminfo figure of the host, in bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) << 10
    raise KeyError(field)


def hostile(body: str, class_name: str, label: str = "hostile") -> SandboxedPolicy:
    """A hostile policy (class `class_name`) in the real sandbox, 60 s per call."""
    return SandboxedPolicy(PRELUDE + body, label=label, config=SandboxConfig(call_timeout_s=60), class_name=class_name)


PIN = r'''
import fcntl


class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Pin:
    """Pins huge pages in pipe buffers (vmsplice one 4 KB piece of each, then unmaps them: the pipe keeps the
    pages, outside RLIMIT_AS), over every pipe it can open, until `mb` MB are held; reports what it got."""

    def act(self, mb):
        self.keep, pinned, notes = [], 0, set()
        huge = 2 << 20
        while pinned < mb << 20:
            try:
                r, w = os.pipe()
            except OSError as exc:
                notes.add(f"pipe: {errno.errorcode[exc.errno]}")
                break
            self.keep += [r, w]
            try:
                fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ: 256 slots
            except OSError as exc:
                notes.add(f"F_SETPIPE_SZ: {errno.errorcode[exc.errno]}")
            slots = fcntl.fcntl(w, 1032) // 4096  # F_GETPIPE_SZ
            region = libc.mmap(None, (slots + 1) * huge, 3, 0x22, -1, 0)  # PROT_READ|WRITE, MAP_PRIVATE|ANONYMOUS
            if region in (None, ctypes.c_void_p(-1).value):
                notes.add("mmap failed")
                break
            base = (region + huge - 1) // huge * huge
            syscall("madvise", ctypes.c_void_p(base), ctypes.c_size_t(slots * huge), 14)  # MADV_HUGEPAGE
            for i in range(slots):
                ctypes.memset(base + i * huge, 1, huge)
                piece = Iovec(base + i * huge, 4096)
                done, error = syscall("vmsplice", w, ctypes.byref(piece), 1, 2)  # SPLICE_F_NONBLOCK
                if error:
                    notes.add(f"vmsplice: {error}")
                    break
                pinned += huge
            libc.munmap(ctypes.c_void_p(region), ctypes.c_size_t((slots + 1) * huge))
            if notes & {"vmsplice: EPERM", "vmsplice: EBADF"}:
                break
        return {"pinned_mb": pinned >> 20, "pipes": len(self.keep) // 2, "notes": sorted(notes)}
'''


HOARD = r'''
class Hoard:
    def aio(self, contexts):
        got = 0
        for _ in range(contexts):
            ctx = ctypes.c_ulong(0)
            result, error = syscall("io_setup", 4096, ctypes.byref(ctx))
            if error:
                return {"events": got, "error": error}
            got += 4096
        return {"events": got, "error": None}

    def timers(self, n):
        for i in range(n):
            timer = ctypes.c_int(0)
            result, error = syscall("timer_create", 1, None, ctypes.byref(timer))  # CLOCK_MONOTONIC, SIGALRM
            if error:
                return {"timers": i, "error": error}
        return {"timers": n, "error": None}
'''


def root_io_setup() -> int:
    """The host's root asks for one AIO context (0: it got one, then gave it back; else the errno)."""
    libc = ctypes.CDLL(None, use_errno=True)
    ctx = ctypes.c_ulong(0)
    if libc.syscall(206, 1, ctypes.byref(ctx)) != 0:
        return ctypes.get_errno()
    libc.syscall(207, ctx)
    return 0


LIMITS = r'''
import resource


class Limits:
    def act(self, names):
        return {name: resource.getrlimit(getattr(resource, name))[0] for name in names}
'''
RLIMITS = ("RLIMIT_SIGPENDING", "RLIMIT_MSGQUEUE", "RLIMIT_NOFILE", "RLIMIT_MEMLOCK", "RLIMIT_NPROC", "RLIMIT_AS")


def _read_int(path: str) -> int:
    return int(Path(path).read_text())


def measure() -> dict[str, Any]:
    """Every figure of the module docstring."""
    out: dict[str, Any] = {"kernel": platform.release()}
    out["git"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent, check=False).stdout.strip()  # fmt: skip
    out["transparent_hugepage"] = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    out["pipe_max_size"] = _read_int("/proc/sys/fs/pipe-max-size")
    available = meminfo("MemAvailable")
    with hostile(PIN, "Pin") as policy:
        got = policy.call("act", 1536)
        drop = (available - meminfo("MemAvailable")) / 2**20
        out["pipe_pinning"] = {"asked_mb": 1536, "policy_reports": got, "host_mem_available_drop_mb": drop}
        pipes = (policy._proc.stdin, policy._proc.stdout)  # the two it shares with the harness
        out["harness_pipe_bytes"] = [fcntl.fcntl(f.fileno(), F_GETPIPE_SZ) for f in pipes]
    limit, before = _read_int("/proc/sys/fs/aio-max-nr"), _read_int("/proc/sys/fs/aio-nr")
    with hostile(HOARD, "Hoard") as policy:
        got = policy.call("aio", limit // 4096 + 1)
        rise, probe = _read_int("/proc/sys/fs/aio-nr") - before, root_io_setup()
        out["aio"] = {"aio_max_nr": limit, "policy_reports": got, "host_aio_nr_rise": rise, "root_io_setup_errno": probe}
    before = meminfo("SUnreclaim")
    with hostile(HOARD, "Hoard") as policy:
        got = policy.call("timers", 100_000)
        rise = (meminfo("SUnreclaim") - before) / 2**20
        out["posix_timers"] = {"asked": 100_000, "policy_reports": got, "host_sunreclaim_rise_mb": rise}
    with SandboxedPolicy(LIMITS, label="limits", methods=("act",)) as policy:
        out["worker_rlimits"] = policy.call("act", list(RLIMITS))
    controllers = next((p for p in (Path("/sys/fs/cgroup/cgroup.controllers"),
                                    Path("/sys/fs/cgroup/unified/cgroup.controllers")) if p.exists()), None)  # fmt: skip
    names = controllers.read_text().split() if controllers else []
    out["cgroup_v2"] = {"controllers_file": str(controllers), "controllers": names, "memory_controller": "memory" in names}
    return out


def main() -> int:
    """Measure and write `OUT` (root only: the figures are those of the root-started sandbox)."""
    if os.geteuid() != 0:
        raise SystemExit("python -m benchmarks.sandbox_bounds measures the root-started sandbox: run it as root")
    record = {**measure(), "memory_mb": SandboxConfig().memory_mb}
    write_json_atomic(OUT, record)
    print(f"sandbox bounds -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
