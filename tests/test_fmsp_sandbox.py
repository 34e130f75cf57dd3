"""Hostile-code suite for fmsp.sandbox: every attack is contained, reported, and never hangs the test run."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from fmsp.sandbox import Sandbox, SandboxLimits

TESTS = str(Path(__file__).parent)
ENTRY = "fmsp_doubles:hostile_call"
ALLOWED = ("math", "random")


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    limits = SandboxLimits(timeout_s=4.0, cpu_s=3, memory_mb=1024, max_file_mb=4, max_output_chars=5000)
    return Sandbox(limits, sys_path=[TESTS])


def duel_policy(body: str, side: str = "high") -> dict:
    code = "class Policy:\n    def act(self, obs):\n" + "\n".join("        " + ln for ln in body.splitlines())
    return {"name": "p", "description": "", "code": code, "side": side}


def run(sandbox: Sandbox, body: str, calls: int = 1, prelude: str = ""):
    code = f"{prelude}\nclass Policy:\n    def act(self, obs):\n" + "\n".join(
        "        " + line for line in body.strip().splitlines()
    )
    return sandbox.run(ENTRY, [[code, calls]], allowed_imports=ALLOWED)


def test_well_behaved_policy_returns_value(sandbox):
    result = run(sandbox, "return math.sqrt(obs['round'] + 16)", calls=3, prelude="import math")
    assert result.ok, result.error
    assert result.value == [pytest.approx(18**0.5)]
    assert not result.timed_out and not result.killed
    assert result.cpu_s > 0 and result.wall_s < 4


def test_infinite_loop_is_killed_by_wall_clock(sandbox):
    t0 = time.monotonic()
    result = run(sandbox, "while True:\n    pass")
    assert not result.ok and result.killed
    assert result.timed_out or result.error_type == "WorkerDied"  # CPU limit or wall clock, whichever first
    assert time.monotonic() - t0 < 8


def test_sleep_per_call_times_out(sandbox):
    result = run(sandbox, "import time\ntime.sleep(1)\nreturn 0", calls=100)
    assert not result.ok
    assert result.error_type == "ImportError"  # time is not an allowed import
    # A real per-call sleep (reached through an allowed module's internals) burns no CPU: the wall clock stops it.
    slow = Sandbox(SandboxLimits(timeout_s=1.5, cpu_s=30), sys_path=[TESTS])
    code = ("import random\nclass Policy:\n    def act(self, obs):\n"
            "        random._os.sys.modules['time'].sleep(0.2)\n        return 0\n")  # fmt: skip
    result = slow.run(ENTRY, [[code, 100]], allowed_imports=ALLOWED)
    assert result.timed_out and result.killed and result.error_type == "Timeout"
    assert result.wall_s < 3 and result.cpu_s < 1.0


def test_memory_bomb_is_contained(sandbox):
    result = run(sandbox, "x = [0] * (10 ** 10)\nreturn len(x)")
    assert not result.ok
    assert result.error_type in ("MemoryError", "WorkerDied")


def test_fork_bomb_is_contained(sandbox):
    result = run(sandbox, "import os\nwhile True:\n    os.fork()")
    assert not result.ok and result.error_type == "ImportError"
    # Reaching os through an allowed module's internals (random._os) still hits the audit hook.
    escape = "while True:\n    random._os.fork()"
    result = run(sandbox, escape, prelude="import random")
    assert not result.ok and result.error_type == "SandboxViolation", result.error
    assert "os.fork" in result.error


def test_subprocess_import_is_refused(sandbox):
    result = run(sandbox, "import subprocess\nreturn subprocess.run(['true'])")
    assert not result.ok and result.error_type == "ImportError"
    assert "subprocess" in result.error and "allowed" in result.error


def test_socket_connect_to_localhost_is_blocked(sandbox):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(2)
    port = server.getsockname()[1]
    accepted = []
    thread = threading.Thread(target=lambda: accepted.append(_accept(server)), daemon=True)
    thread.start()
    escape = (f"socket = random._os.sys.modules['socket']\n"
              f"s = socket.create_connection(('127.0.0.1', {port}), timeout=1)\nreturn 1")  # fmt: skip
    result = run(sandbox, escape, prelude="import random")
    thread.join(3)
    server.close()
    assert not result.ok and result.error_type in ("SandboxViolation", "OSError", "ConnectionRefusedError")
    assert accepted == [False], "the sandboxed code reached a listening socket"


def _accept(server: socket.socket) -> bool:
    try:
        conn, _ = server.accept()
        conn.close()
        return True
    except OSError:
        return False


def test_writing_outside_scratch_is_blocked(sandbox, tmp_path):
    target = tmp_path / "pwned.txt"
    result = run(sandbox, f"open({str(target)!r}, 'w').write('x')\nreturn 1")
    assert not result.ok and result.error_type == "SandboxViolation"
    assert not target.exists()
    # Writing inside the scratch directory (the cwd) is allowed and vanishes with it.
    result = run(sandbox, "open('notes.txt', 'w').write('ok')\nreturn open('notes.txt').read()")
    assert result.ok and result.value == ["ok"]


def test_huge_stdout_is_truncated(sandbox):
    result = run(sandbox, "print('A' * 10**7)\nreturn 7")
    assert result.ok and result.value == [7]
    assert len(result.stdout) < 6000 and "truncated" in result.stdout


def test_raising_on_every_call_is_reported(sandbox):
    result = run(sandbox, "raise ValueError('nope ' + str(obs['round']))", calls=5)
    assert not result.ok and result.error_type == "ValueError"
    assert result.error == "ValueError: nope 0" and result.call_index == 0
    assert "hostile_call" in result.traceback or "act" in result.traceback
    # SystemExit from untrusted code is an error too, not a clean exit.
    result = run(sandbox, "raise SystemExit(0)")
    assert not result.ok and result.error_type == "SystemExit"


def test_shared_state_does_not_leak_between_evaluations(sandbox):
    body = "math.pi = 3\nrandom.seed = None\n__builtins__['len'] = lambda x: 42\nreturn [math.pi, len('ab')]"
    result = run(sandbox, body, prelude="import math, random")
    assert result.ok and result.value == [[3, 42]]
    result = run(sandbox, "return [math.pi, len('ab'), random.seed is None]", prelude="import math, random")
    assert result.ok and result.value == [[pytest.approx(3.141592653589793), 2, False]]


def test_policy_cannot_rebind_builtins_of_the_match_code(sandbox):
    cheat = duel_policy("__builtins__['abs'] = lambda x: 0\nreturn 0.9")  # would make every round a tie
    honest = duel_policy("return 0.3")
    config = {"games": 2, "rounds": 10, "seed": 1}
    result = sandbox.run("fmsp_doubles:duel_match", [[cheat, honest, config]], allowed_imports=ALLOWED)
    assert result.ok, result.error
    assert result.value[0]["score_b"] > 0.8  # 0.3 is far closer to Beta(2, 5) targets than 0.9


def test_second_call_in_batch_failing_reports_its_index(sandbox):
    good = "class Policy:\n    def act(self, obs):\n        return 1\n"
    bad = "class Policy:\n    def act(self, obs):\n        return 1/0\n"
    result = sandbox.run(ENTRY, [[good, 2], [bad, 2]], allowed_imports=ALLOWED)
    assert not result.ok and result.call_index == 1 and result.error_type == "ZeroDivisionError"


def test_api_keys_do_not_reach_the_worker(sandbox, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    body = "return random._os.environ.get('OPENAI_API_KEY', 'absent')"
    result = run(sandbox, body, prelude="import random")
    assert result.ok and result.value == ["absent"]


CONSTANT_EVADER = '''class Still:
    name = "still"
    description = "stands still facing east"

    def __call__(self, obs):
        return 0.0
'''


def car_tag_match(policy_code: str) -> tuple:
    """A short Car Tag match of the pure-pursuit baseline against `policy_code` (evader) in the sandbox."""
    from fmsp.domains import make_domain

    domain = make_domain("car_tag", n_games=4, max_steps=50)
    evader = {"name": "still", "description": "", "code": policy_code, "side": "evader"}
    pursuer = domain.baselines("pursuer")[0].to_dict()
    return Sandbox(SandboxLimits(timeout_s=20)).run(domain.match_entry, [[pursuer, evader, domain.match_config()]],
                                                    domain.allowed_imports)  # fmt: skip


def test_real_domain_policy_rebinding_builtins_cannot_change_the_trusted_scoring():
    """Through loading.instantiate (Car Tag): every policy namespace has its own builtins, so rebinding
    `float`/`range`/`min` there (the match code scores with them) changes nothing."""
    clean = car_tag_match(CONSTANT_EVADER)
    assert clean.ok, clean.error
    assert clean.value[0]["score_b"] < 1.0  # a standing evader is caught, so a forged 1.0 would show
    cheat = (
        "__builtins__['float'] = lambda *a: 1.0\n__builtins__['range'] = lambda *a: iter(())\n"
        "min = max = None\n" + CONSTANT_EVADER.replace("return 0.0", "__builtins__['min'] = None\n        return 0.0")
    )  # fmt: skip
    result = car_tag_match(cheat)
    assert result.ok, result.error
    assert result.value == clean.value


def test_policy_mutating_the_shared_builtins_module_is_detected():
    """`abs.__self__` is the real builtins module: a policy can rebind it for the trusted code, which the
    worker detects after the call; the job fails and no (forged) score comes back."""
    cheat = CONSTANT_EVADER.replace("return 0.0", "abs.__self__.float = lambda *a: 1.0\n        return 0.0")
    result = car_tag_match(cheat)
    assert not result.ok and result.value is None
    assert result.error_type == "SandboxViolation" and "modified the shared builtins module (float)" in result.error
