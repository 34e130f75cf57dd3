"""Which system calls policies make once the sandbox's filter is in force: the evidence behind the allow-list of
`envs.sandbox.seccomp`.

    python -m benchmarks.syscalls [--out benchmarks/syscalls/observed.json]

Every shipped and scripted policy plays through the real harness in every FMSP domain (Car Tag, Gandalf with its
seven level defenders and the regex guard, each SEPO game with each of its scripted strategies), the unit tests
of each run, a pool directory of scripted members goes through `sepo.pools.load_pool_dir` (the `sepo train`
path), and one policy exercises what FM-written code commonly does (numpy, the allowed stdlib modules, prints,
tracebacks, files in its scratch, a MemoryError). Each policy process runs under `strace -f` with an allow-all
filter loaded in place of the real one (so nothing is refused and the record is what the code asks for); the
calls each worker makes after it loads that filter are counted per workload. Root and strace are needed.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envs import GAMES, game_spec, strategy_registry
from envs.sandbox import SandboxConfig, SandboxedPolicy, process
from fmsp.baselines import baseline_codes
from fmsp.domains import make_domain
from fmsp.domains.gandalf import level_defender
from fmsp.domains.sepo_games import scripted_policy_code
from fmsp.sandbox import Sandbox
from sepo.files import write_json_atomic
from sepo.pools import load_pool_dir

OUT = Path(__file__).parent / "syscalls" / "observed.json"
_CALL = re.compile(r"^(\w+)\((.*)")
_ERROR = re.compile(r"= -1 (E[A-Z0-9]+) ")

# What FM-written policies commonly do beyond the shipped ones.
EXERCISE = r'''
import base64, codecs, collections, functools, itertools, json, math, os, random, re, string, time
import numpy as np


class Exercise:
    name = "exercise"
    description = "what FM-written code commonly does"

    def act(self, x):
        rng = np.random.default_rng(0)
        m = rng.normal(size=(64, 64))
        np.linalg.solve(m + 64 * np.eye(64), m.sum(axis=1)), np.fft.fft(m[0]), np.sort(m, axis=None)
        big = np.zeros(1 << 22)  # 32 MB: mmap, then munmap
        big[::4096] = 1.0
        del big
        json.loads(json.dumps({"a": [1, 2.5, "x"]})), re.compile(r"(\w+)\s*=\s*(\d+)").findall("a = 1, b = 2")
        base64.b64encode(b"x"), codecs.encode("x", "rot13"), random.random(), math.sqrt(2), time.time()
        time.monotonic(), time.perf_counter(), time.process_time(), time.sleep(0.001)
        print("a policy's print", x)
        os.makedirs("d/e", exist_ok=True)
        with open("d/e/f.txt", "w") as fh:
            fh.write("state")
        os.rename("d/e/f.txt", "d/g.txt"), os.listdir("d"), os.stat("d/g.txt"), open("d/g.txt").read()
        os.remove("d/g.txt"), os.rmdir("d/e"), os.getcwd(), os.environ.get("HOME"), os.cpu_count()
        try:
            bytearray(1 << 40)
        except MemoryError:
            pass
        try:
            raise ValueError("caught")
        except ValueError:
            import traceback
            traceback.format_exc()
        return x

    def fail(self, x):
        raise RuntimeError("an uncaught exception, with a traceback through the worker")
'''


def _allow_all() -> bytes:
    """A filter that allows everything: loaded where the real one would be, so the trace shows what code asks for."""
    # deferred: pyseccomp loads the OS's libseccomp; importing this module (e.g. for its docstring) needs none
    import pyseccomp as sc

    with tempfile.TemporaryFile() as fh:
        sc.SyscallFilter(sc.ALLOW).export_bpf(fh)
        fh.seek(0)
        return fh.read()


class Tracer:
    """Runs policy processes under `strace -ff`; `collect` counts each worker's calls after its filter loads."""

    def __init__(self, directory: Path) -> None:
        self.directory, self.serial = directory, itertools.count()
        self._command, self._program = process.worker_command, process.seccomp_program

    def __enter__(self) -> Tracer:
        program = _allow_all()

        def traced(layers: Any, config: SandboxConfig) -> tuple[list[str], bool]:
            argv, in_bwrap = self._command(layers, config)
            prefix = self.directory / f"p{next(self.serial)}"
            return ["strace", "-ff", "-qq", "-o", str(prefix), "--", *argv], in_bwrap

        process.worker_command, process.seccomp_program = traced, lambda pid: program
        return self

    def __exit__(self, *exc: object) -> None:
        process.worker_command, process.seccomp_program = self._command, self._program

    def collect(self) -> dict[str, dict[str, Any]]:
        """{syscall: {"calls": n, "errors": {errno: n}}} over the trace files written so far (then removed)."""
        calls: Counter[str] = Counter()
        errors: dict[str, Counter[str]] = {}
        for path in sorted(self.directory.iterdir()):
            filtered = False
            for line in path.read_text(errors="replace").splitlines():
                if not filtered:
                    filtered = "PR_SET_SECCOMP" in line and "= 0" in line
                    continue
                match = _CALL.match(line)
                if match is None:
                    continue
                name = match.group(1)
                calls[name] += 1
                error = _ERROR.search(line)
                if error:
                    errors.setdefault(name, Counter())[error.group(1)] += 1
            path.unlink()
        return {name: {"calls": n, "errors": dict(sorted(errors.get(name, {}).items()))} for name, n in sorted(calls.items())}


def _car_tag(sandbox: Sandbox) -> None:
    domain = make_domain("car_tag", n_games=4, max_steps=60)
    pursuers, evaders = baseline_codes("car_tag", "pursuer"), baseline_codes("car_tag", "evader")
    sandbox.play_all(domain, list(itertools.product(pursuers, evaders)))
    for policy in pursuers + evaders:
        sandbox.unit_test(domain, policy, policy.side)


def _gandalf(sandbox: Sandbox) -> None:
    domain = make_domain("gandalf", target="scripted-test-double")
    attackers, defenders = baseline_codes("gandalf", "attacker"), [level_defender(level) for level in range(1, 8)]
    sandbox.play_all(domain, list(itertools.product(attackers, defenders)))
    for policy in attackers + defenders:
        sandbox.unit_test(domain, policy, policy.side)


def _sepo_games(sandbox: Sandbox) -> None:
    for game in GAMES:
        domain = make_domain(game, n_episodes=2)
        opponent = scripted_policy_code(game, game_spec(game).pools["training"][0], "cooperator")
        policies = [scripted_policy_code(game, name, "exploiter") for name in strategy_registry(game)]
        sandbox.play_all(domain, [(policy, opponent) for policy in policies])
        for policy in policies:
            sandbox.unit_test(domain, policy, "exploiter")


def _pool_directory(sandbox: Sandbox) -> None:
    with tempfile.TemporaryDirectory() as directory:
        members = []
        for game in GAMES:
            name = next(iter(strategy_registry(game)))
            code = scripted_policy_code(game, name, "exploiter").code
            (Path(directory) / f"{game}.py").write_text(code)
            class_name = re.search(r"^class (\w+)", code, re.MULTILINE).group(1)  # type: ignore[union-attr]
            members.append({"name": f"pool_{game}", "game": game, "pool": "training", "file": f"{game}.py",
                            "class_name": class_name, "description": name, "source": {"kind": "code"},
                            "sha256": hashlib.sha256(code.encode()).hexdigest(), "view": "dict"})  # fmt: skip
        (Path(directory) / "manifest.json").write_text(json.dumps({"format": "sepo-pool-manifest/1", "members": members}))
        load_pool_dir(directory, sandbox=sandbox.config)


def _exercise(sandbox: Sandbox) -> None:
    with SandboxedPolicy(EXERCISE, label="x", config=sandbox.config, methods=("act",), preload=("numpy",)) as policy:
        policy.call("act", 1)
        try:
            policy.call("fail", 1)
        except Exception:  # noqa: BLE001 - the failure path is what is traced
            pass


WORKLOADS: dict[str, Callable[[Sandbox], None]] = {
    "car_tag": _car_tag, "gandalf": _gandalf, "sepo_games": _sepo_games, "pool_directory": _pool_directory,
    "exercise": _exercise,
}  # fmt: skip


def observe() -> dict[str, Any]:
    """Run every workload traced; the record written to `OUT`."""
    if shutil.which("strace") is None or os.geteuid() != 0:
        raise SystemExit("python -m benchmarks.syscalls needs root and strace (apt-get install strace)")
    sandbox = Sandbox(SandboxConfig(call_timeout_s=60))
    sandbox.check()
    record: dict[str, Any] = {"kernel": platform.release(), "machine": platform.machine(), "workloads": {}}
    record["git"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                   cwd=Path(__file__).parent, check=False).stdout.strip()  # fmt: skip
    union: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as directory, Tracer(Path(directory)) as tracer:
        for name, workload in WORKLOADS.items():
            workload(sandbox)
            seen = tracer.collect()
            record["workloads"][name] = {call: entry["calls"] for call, entry in seen.items()}
            for call, entry in seen.items():
                total = union.setdefault(call, {"calls": 0, "errors": Counter()})
                total["calls"] += entry["calls"]
                total["errors"].update(entry["errors"])
    record["union"] = {call: {"calls": e["calls"], "errors": dict(sorted(e["errors"].items()))}
                       for call, e in sorted(union.items())}  # fmt: skip
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.syscalls", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(OUT), help="where to write the record")
    args = parser.parse_args(argv)
    record = observe()
    write_json_atomic(Path(args.out), record)
    print(f"{len(record['union'])} system calls over {len(record['workloads'])} workloads -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
