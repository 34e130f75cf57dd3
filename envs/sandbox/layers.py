"""OS containment of policy processes: which layers this machine has and the command line that applies them
(the seccomp program itself: `envs.sandbox.seccomp`).

Layers, outermost first (each is the OS's own tool, not a Python-level hook):

1. **unprivileged uid/gid**: a root harness drops to `SandboxConfig.uid`/`gid` (nobody) with util-linux
   `setpriv` (all capabilities and the bounding set cleared, supplementary groups cleared, no_new_privs);
   a non-root harness already is an unprivileged uid.
2. **bubblewrap** (`bwrap`, Debian's package): fresh user, pid, network, mount, ipc, uts (and cgroup)
   namespaces, no further user namespaces inside, an empty environment, a root filesystem holding only
   read-only binds of /usr, the Python installation, numpy and the `envs` package, a minimal /dev (five device
   nodes in a read-only directory: no tmpfs, no /dev/shm), no /proc,
   a read-only root, and a private size-limited tmpfs as the only writable place (the working directory). A root harness
   first stages these binds with a root-run `bwrap` (its own mount namespace, nothing else), because the
   unprivileged uid cannot reach e.g. an interpreter installed under /root.
3. **seccomp**: an allow-list (`envs.sandbox.seccomp`) compiled by libseccomp (through `pyseccomp`) in the
   harness and loaded by the worker before it reads any policy code. Every call not listed fails with EPERM,
   including calls the kernel adds later; the list holds what policies were seen to need, some calls only with
   arguments that keep them inside the process (private futexes, its own pid as a signal's target, a few fcntl
   commands and madvise advices).
4. **rlimits** set by the worker before the policy loads: CPU seconds, address space, file size, open files,
   processes (0), core dumps (0), POSIX message-queue bytes (0), locked memory (0), queued signals (16).
5. **wall clock**: the harness kills the whole process group (and with it the pid namespace) when a call or the
   process's total budget runs out.

`detect_layers()` says which of 1-3 this machine has (4 and 5 always apply); `require_layers` refuses to run
untrusted code when one is missing unless `SandboxConfig.unsafe` is set.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from envs.sandbox.config import SandboxConfig
from envs.sandbox.seccomp import seccomp_program

WORKER_PID = 2  # the worker's pid inside bubblewrap's pid namespace (1 is bwrap's reaper)

# The device nodes of the sandbox's /dev (bound from the host, no tmpfs: no /dev/shm, nothing writable to store)
DEVICES = ("null", "zero", "full", "random", "urandom")
STAGED_SCRATCH = "/tmp/.policy-scratch"  # where a root stage mounts the scratch tmpfs
SCRATCH_INODES = 1024  # files and directories the scratch can hold (each pins ~1 KB of kernel memory)
_THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class SandboxUnavailable(RuntimeError):
    """An isolation layer is missing and `unsafe` was not set; the message names the layer and the fix."""


@dataclass(frozen=True)
class Layers:
    """The isolation layers this machine offers: tool paths, and a reason for each missing layer."""

    bwrap: str | None
    setpriv: str | None  # only used (and required) when the harness runs as root
    seccomp: bool
    root: bool
    missing: tuple[str, ...]

    def describe(self) -> str:
        """One line for start-up logs."""
        have = []
        if self.root and self.setpriv:
            have.append("setpriv to an unprivileged uid")
        elif not self.root:
            have.append("unprivileged uid")
        if self.bwrap:
            have.append("bubblewrap namespaces + read-only root + private tmpfs")
        if self.seccomp:
            have.append("seccomp (libseccomp)")
        have += ["rlimits", "wall-clock kill"]
        text = "sandbox layers: " + ", ".join(have)
        return text + ("; MISSING: " + "; ".join(self.missing) if self.missing else "")


@functools.cache
def detect_layers(uid: int = 65534, gid: int = 65534) -> Layers:
    """Probe this machine once per process (a real bubblewrap start as the sandbox uid, a real seccomp build)."""
    root = os.geteuid() == 0
    missing = []
    setpriv = shutil.which("setpriv") if root else None
    if root and setpriv is None:
        missing.append("setpriv (util-linux) not found: a root harness cannot drop to an unprivileged uid")
    try:
        seccomp_program(WORKER_PID)
        seccomp = True
    except Exception as exc:  # noqa: BLE001 - ImportError, OSError from libseccomp: all mean "no seccomp"
        seccomp = False
        missing.append(f"seccomp unavailable ({type(exc).__name__}: {exc}); `pip install pyseccomp` and "
                       "the libseccomp2 OS package")  # fmt: skip
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        missing.append("bubblewrap (bwrap) not found; `make install` installs it (apt-get install bubblewrap)")
    else:
        staged = bool(root and setpriv)
        probe = [*_prefix(bwrap, setpriv, uid, gid, []), *_inner_bwrap(bwrap, uid, gid, [], staged=staged), "/usr/bin/true"]
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30, env={}, check=False)
        if done.returncode != 0:
            missing.append(f"bubblewrap cannot create namespaces here ({done.stderr.strip()[:300]}); "
                           "unprivileged user namespaces must be enabled")  # fmt: skip
            bwrap = None
    return Layers(bwrap, setpriv, seccomp, root, tuple(missing))


def require_layers(config: SandboxConfig) -> Layers:
    """The layers to use; SandboxUnavailable when one is missing and `config.unsafe` is not set."""
    layers = detect_layers(config.uid, config.gid)
    if layers.missing and not config.unsafe:
        raise SandboxUnavailable(
            "refusing to run generated code: " + "; ".join(layers.missing)
            + ". Install the missing layer, or pass --unsafe-sandbox (config key unsafe_sandbox: true) to run "
            "with the layers that are present."
        )  # fmt: skip
    return layers


# --- the command line -------------------------------------------------------------------------------


@functools.cache
def runtime_paths() -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(interpreter, read-only directories to show, sys.path entries the worker adds): the Python
    installation, numpy (with its bundled libraries) and the `envs` package, nothing else of the host."""
    python = os.path.realpath(sys.executable)
    envs_dir = str(Path(__file__).resolve().parent.parent)
    show = [os.path.realpath(sys.base_prefix), envs_dir]
    path = [str(Path(envs_dir).parent)]
    spec = importlib.util.find_spec("numpy")
    if spec is not None and spec.origin:
        numpy_dir = Path(spec.origin).resolve().parent
        show += [str(p) for p in (numpy_dir, numpy_dir.with_name("numpy.libs")) if p.is_dir()]
        path.append(str(numpy_dir.parent))
    return python, tuple(show), tuple(path)


def _binds(paths: list[str] | tuple[str, ...]) -> list[str]:
    """bwrap arguments binding `paths` read-only at the same place, creating world-searchable parents
    (bwrap would otherwise copy e.g. /root's 0700, which the unprivileged uid cannot enter)."""
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    for link in ("bin", "lib", "lib64", "sbin"):
        target = f"/{link}"
        if os.path.islink(target):
            args += ["--symlink", os.readlink(target), target]
        elif os.path.isdir(target):
            args += ["--ro-bind", target, target]
    made = {"/", "/usr"}
    for path in paths:
        if path == "/usr" or path.startswith("/usr/"):
            continue
        for parent in reversed(PurePosixPath(path).parents):
            if str(parent) not in made:
                made.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", path, path]
        made.add(path)
    return args


def _inner_bwrap(bwrap: str, uid: int, gid: int, paths: list[str] | tuple[str, ...], scratch_mb: int = 8,
                 env: dict[str, str] | None = None, staged: bool = False) -> list[str]:  # fmt: skip
    """The unprivileged bubblewrap. `staged`: the root stage mounted the scratch tmpfs (with an inode limit) at
    STAGED_SCRATCH and this binds it; otherwise bubblewrap makes it (a byte limit only)."""
    if staged:
        scratch = ["--bind", STAGED_SCRATCH, "/scratch"]
    else:
        scratch = ["--perms", "0700", "--size", str(scratch_mb << 20), "--tmpfs", "/scratch"]
    args = [bwrap, "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--disable-userns", "--uid", str(uid), "--gid", str(gid), "--die-with-parent",
            "--clearenv", *_binds(paths), *_devices(), *scratch, "--remount-ro", "/", "--chdir", "/scratch"]  # fmt: skip
    for key, value in (env or {}).items():
        args += ["--setenv", key, value]
    return [*args, "--"]


def _devices() -> list[str]:
    """A minimal /dev: the `DEVICES` nodes bound from the host into a directory of the read-only root. Not
    bubblewrap's `--dev`, whose tmpfs (and /dev/shm in it) is writable and sized at half the host's RAM."""
    args = ["--perms", "0755", "--dir", "/dev"]
    for name in DEVICES:
        args += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
    return args


def _prefix(bwrap: str | None, setpriv: str | None, uid: int, gid: int, paths: list[str] | tuple[str, ...],
            scratch_mb: int = 8) -> list[str]:  # fmt: skip
    """The root-only part: stage the binds (root bwrap, mount namespace only), mount the scratch tmpfs with a byte
    and an inode limit (bubblewrap's own --tmpfs has no inode limit: millions of empty files would pin kernel
    memory outside every rlimit), then drop to uid/gid with all capabilities gone."""
    if os.geteuid() != 0 or setpriv is None:
        return []
    drop = [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all",
            "--no-new-privs", "--"]  # fmt: skip
    if bwrap is None:
        return drop
    options = (f"size={scratch_mb << 10}k,nr_inodes={SCRATCH_INODES},mode=0700,uid={uid},gid={gid},"
               "nosuid,nodev,noexec")  # fmt: skip
    mount = ["/bin/sh", "-c", f'mount -t tmpfs -o {options} scratch {STAGED_SCRATCH} && exec "$@"', "stage"]
    # /tmp's tmpfs first: binds below it (a checkout under /tmp) are mounted on top of it, not hidden by it
    stage = [bwrap, "--die-with-parent", "--cap-add", "CAP_SYS_ADMIN", "--tmpfs", "/tmp", *_binds(paths),
             "--proc", "/proc", "--dev", "/dev", "--dir", STAGED_SCRATCH, "--"]  # fmt: skip
    return stage + mount + drop


def worker_command(layers: Layers, config: SandboxConfig) -> tuple[list[str], bool]:
    """The argv that starts one worker with every available layer, and whether it runs inside bubblewrap."""
    python, show, path = runtime_paths()
    boot = (f"import sys; sys.path[:] = [p for p in sys.path if p] + {list(path)!r}; "
            "from envs.sandbox.worker import main; main()")  # fmt: skip
    interpreter = [python, "-S", "-s", "-B", "-c", boot]
    prefix = _prefix(layers.bwrap, layers.setpriv, config.uid, config.gid, show, config.scratch_mb)
    if layers.bwrap is None:
        return [*prefix, *interpreter], False
    inner = _inner_bwrap(layers.bwrap, config.uid, config.gid, show, config.scratch_mb, worker_env(), staged=bool(prefix))
    return [*prefix, *inner, *interpreter], True


def worker_env() -> dict[str, str]:
    """The environment of a worker started without bubblewrap (bubblewrap clears it and sets its own)."""
    return {**_THREAD_ENV, "PYTHONHASHSEED": "0", "LC_ALL": "C.UTF-8"}
