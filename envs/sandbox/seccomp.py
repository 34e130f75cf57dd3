"""The seccomp program of a policy process: an allow-list. Every system call not listed here fails with EPERM,
including any the kernel adds later; other ABIs (x32, i386) are killed by libseccomp's architecture check.

The list is what policies were seen to need: `python -m benchmarks.syscalls` runs every shipped and scripted
policy in every FMSP domain, the unit tests, the pool-directory path and a policy exercising what FM-written
code commonly does, under `strace` with an allow-all filter, and records the calls each worker makes once its
filter is loaded (`benchmarks/syscalls/observed.json`; `tests/test_sandbox_kernel.py` checks the list covers it).
A few calls that record did not show are allowed too because plain Python reaches them on ordinary paths
(e.g. `fstat`, `pread64`, `rt_sigreturn`); each entry gives its reason. Calls that touch something outside the
process (other processes, shared kernel objects, the page cache's state, IPC, the network) are absent, or
allowed only with arguments that keep them inside it (`CONDITIONAL`).

Compiled by libseccomp through `pyseccomp` in the harness (the worker loads the bytes before it reads any
policy code).
"""

from __future__ import annotations

import errno
import functools
import tempfile

# Allowed with any arguments: name -> why a policy needs it ("seen": in the traced workloads).
ALLOWED: dict[str, str] = {
    # reading and writing its own descriptors (the request/reply pipe, files it opened)
    "read": "seen: requests from the harness, files (imports, the scratch)",
    "write": "seen: replies to the harness, files in the scratch",
    "readv": "stdio of some libraries writes vectored",
    "writev": "as readv",
    "pread64": "reading a file at an offset (zipimport, numpy's file readers)",
    "pwrite64": "as pread64",
    "lseek": "seen: file positions (imports, tracebacks)",
    "close": "seen: closing its own descriptors",
    "close_range": "os.closerange on its own descriptors",
    "dup": "os.dup of its own descriptors (bounded by RLIMIT_NOFILE)",
    "dup2": "as dup",
    "dup3": "as dup",
    # files: the read-only root and its own scratch tmpfs are all it can see
    "openat": "seen: imports, source lines for tracebacks, files in the scratch",
    "newfstatat": "seen: stat, fstat and lstat (imports, os.path)",
    "fstat": "fstat on older C libraries",
    "statx": "stat on newer C libraries",
    "faccessat": "os.access",
    "faccessat2": "os.access on newer C libraries",
    "readlinkat": "os.path.realpath",
    "readlink": "as readlinkat",
    "getdents64": "seen: listing directories (the import system, os.listdir)",
    "getcwd": "seen: os.getcwd",
    "chdir": "os.chdir within its own view",
    "mkdir": "seen: directories in the scratch",
    "mkdirat": "as mkdir",
    "rmdir": "seen: removing them",
    "unlink": "seen: removing files in the scratch",
    "unlinkat": "as unlink",
    "rename": "seen: renaming files in the scratch",
    "renameat": "as rename",
    "renameat2": "as rename",
    "ftruncate": "truncating its own files (bounded by the scratch size and RLIMIT_FSIZE)",
    "fsync": "flushing its own files (a no-op on tmpfs)",
    "fdatasync": "as fsync",
    # memory of its own address space (all of it counted by RLIMIT_AS)
    "brk": "seen: the heap",
    "mmap": "seen: allocations and file mappings (counted by RLIMIT_AS)",
    "munmap": "seen: freeing them",
    "mremap": "realloc of large blocks",
    "mprotect": "seen: the dynamic loader and libffi",
    "mbind": "seen: numpy's allocator sets the NUMA policy of its own mappings",
    # time, randomness, identity: nothing the process can change outside itself
    "clock_gettime": "seen: time.* outside the vDSO",
    "clock_getres": "time.get_clock_info",
    "gettimeofday": "time on older C libraries",
    "clock_nanosleep": "seen: time.sleep",
    "nanosleep": "time.sleep on older C libraries",
    "getrandom": "seen: random, os.urandom, hash seeds",
    "getpid": "seen: the worker's check of its pid namespace",
    "gettid": "seen: threading.get_ident",
    "getppid": "os.getppid",
    "getuid": "seen: the worker's check of its uid",
    "geteuid": "as getuid",
    "getgid": "as getuid",
    "getegid": "as getuid",
    "getresuid": "as getuid",
    "getresgid": "as getuid",
    "times": "os.times",
    "uname": "platform and sysconfig",
    "capget": "seen: the worker's check of its capabilities",
    "sched_getaffinity": "seen: os.cpu_count and numpy",
    "sched_yield": "spin locks in C libraries",
    # signals to itself and their handlers (`kill` and friends: `CONDITIONAL`, own pid only)
    "rt_sigaction": "signal.signal",
    "rt_sigprocmask": "signal masks (the C library around many calls)",
    "rt_sigreturn": "returning from any signal handler",
    "sigaltstack": "faulthandler",
    "restart_syscall": "the kernel's restart of a call a signal interrupted",
    # leaving
    "exit": "a thread's end (none can start: clone is denied)",
    "exit_group": "seen: the process's end",
}

FUTEX_PRIVATE_FLAG = 128
TCGETS, FIONCLEX, FIOCLEX = 0x5401, 0x5450, 0x5451
PR_GET_SECCOMP, PR_GET_NO_NEW_PRIVS = 21, 39
# fcntl commands allowed: F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_DUPFD_CLOEXEC. Not locks, leases, dnotify
# (channels through inodes two sandboxes share), F_SETOWN/F_SETSIG (signals elsewhere), F_SETPIPE_SZ (pipe memory).
FCNTL_ALLOWED = (0, 1, 2, 3, 4, 1030)
# madvise advice allowed: NORMAL, RANDOM, SEQUENTIAL, DONTNEED, FREE, HUGEPAGE, NOHUGEPAGE, DONTDUMP, DODUMP. Not
# WILLNEED, COLD, PAGEOUT, POPULATE_*, REMOVE: they read ahead into or evict from the shared page cache.
MADVISE_ALLOWED = (0, 1, 2, 4, 8, 14, 15, 16, 17)
SIGNAL_SYSCALLS = ("kill", "tkill")  # allowed only with the worker's own pid as the target (tgkill: its tgid)

# Allowed only with these arguments (why, in the docstring of `_conditional_rules`).
CONDITIONAL = ("futex", "ioctl", "prctl", "fcntl", "madvise", "prlimit64", "kill", "tkill", "tgkill")


def _conditional_rules(sc, pid: int) -> list[tuple[str, list]]:
    """(syscall, [argument comparisons]) pairs, each an allow rule (several rules for one call: any may match).

    - futex: only with FUTEX_PRIVATE_FLAG. A private futex is keyed by the caller's own address space, so two
      sandboxes mapping the same file cannot wait on and wake one shared word.
    - ioctl: TCGETS (isatty, which Python asks of every file it opens) and FIOCLEX/FIONCLEX (its own descriptor
      flags); no device or terminal control.
    - prctl: the two queries of the worker's containment check; nothing that sets.
    - fcntl: `FCNTL_ALLOWED`. madvise: `MADVISE_ALLOWED`.
    - prlimit64: its own limits (pid 0), read only (no new value).
    - kill, tkill, tgkill: its own pid as the target (signals to itself: `os.kill(os.getpid(), ...)`).
    """
    rules: list[tuple[str, list]] = [("futex", [sc.Arg(1, sc.MASKED_EQ, FUTEX_PRIVATE_FLAG, FUTEX_PRIVATE_FLAG)])]
    rules += [("ioctl", [sc.Arg(1, sc.EQ, request)]) for request in (TCGETS, FIONCLEX, FIOCLEX)]
    rules += [("prctl", [sc.Arg(0, sc.EQ, option)]) for option in (PR_GET_SECCOMP, PR_GET_NO_NEW_PRIVS)]
    rules += [("fcntl", [sc.Arg(1, sc.EQ, command)]) for command in FCNTL_ALLOWED]
    rules += [("madvise", [sc.Arg(2, sc.EQ, advice)]) for advice in MADVISE_ALLOWED]
    rules.append(("prlimit64", [sc.Arg(0, sc.EQ, 0), sc.Arg(2, sc.EQ, 0)]))
    rules += [(name, [sc.Arg(0, sc.EQ, pid)]) for name in SIGNAL_SYSCALLS]
    rules.append(("tgkill", [sc.Arg(0, sc.EQ, pid), sc.Arg(1, sc.EQ, pid)]))
    return rules


@functools.lru_cache(maxsize=64)
def seccomp_program(pid: int) -> bytes:
    """The BPF program (libseccomp's compilation, native architecture) for a worker whose own pid is `pid`:
    default EPERM, `ALLOWED` and the `_conditional_rules` allowed, clone3 ENOSYS (the C library then falls back to
    clone, which is denied)."""
    # deferred: pyseccomp loads the OS's libseccomp, which a machine may lack; here its ImportError becomes a
    # missing layer in `detect_layers` instead of a failed import of the whole sandbox
    import pyseccomp as sc

    program = sc.SyscallFilter(sc.ERRNO(errno.EPERM))
    for name in ALLOWED:
        if sc.resolve_syscall(sc.Arch.NATIVE, name) >= 0:  # names this architecture lacks (e.g. legacy ones)
            program.add_rule(sc.ALLOW, name)
    for name, arguments in _conditional_rules(sc, pid):
        program.add_rule(sc.ALLOW, name, *arguments)
    program.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as fh:
        program.export_bpf(fh)
        fh.seek(0)
        return fh.read()
