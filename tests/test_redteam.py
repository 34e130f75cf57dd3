"""Red team: hostile policies (tests/redteam/*.py) against the sandboxed harness, each judged by its effect.

Every hostile file plays one match in a batch that also holds a benign pair. Around the runs the test keeps:
a host directory the policies must not write (mode 0777, so only the sandbox can stop them), a loopback
listener they must not reach, a decoy process running as the sandbox's own uid they must not kill, a secret in
the harness's environment and one in a host file that must not appear in any output. After the batch: the
hostile policy is reported with the expected failure kind (or, when it merely misbehaved inside its own
process, scores exactly like the honest policy it imitates), its opponent is not blamed, the benign pair in the
same batch scores exactly as it does alone, and nothing of the above was touched; no process of the sandbox uid
is left. The batches run four at a time.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from envs.sandbox import SandboxConfig
from fmsp.domain import PolicyCode
from fmsp.domains import make_domain
from fmsp.domains.sepo_games import scripted_policy_code
from fmsp.sandbox import BatchResult, Sandbox

REDTEAM = Path(__file__).parent / "redteam"
REPO = Path(__file__).resolve().parent.parent
UID = 61234  # a uid of its own: any process of it left after the runs (but the decoy) is an escape
# 512 MiB of address space, not the default 1 GiB: the memory bomb must meet its bound well inside the 3 s call
# limit while four batches share two cores (at 1 GiB, filling it took 2.4 s of the 3 s on an idle machine, and on
# a loaded CI run the bomb was reported as a timeout instead of memory)
CONFIG = SandboxConfig(call_timeout_s=3.0, total_timeout_s=8.0, memory_mb=512, uid=UID, gid=UID)
DOMAINS = {"car_tag": make_domain("car_tag", n_games=8, max_steps=40), "ipd": make_domain("ipd", n_episodes=2)}
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202e]")  # what safe_text escapes (newline and tab checked apart)
STILL = "class Still:\n    name = 'still'\n    description = 'stands still'\n\n    def __call__(self, obs):\n        return 0.0\n"


def _baselines() -> dict[str, tuple[PolicyCode, PolicyCode]]:
    car_tag = DOMAINS["car_tag"]
    return {"car_tag": (car_tag.baselines("pursuer")[0], car_tag.baselines("evader")[1]),
            "ipd": (scripted_policy_code("ipd", "always_defect", "exploiter"),
                    scripted_policy_code("ipd", "tit_for_tat", "cooperator"))}  # fmt: skip


BENIGN = _baselines()
LIKE = {"still": PolicyCode("still", "", STILL, "evader"), "always_defect": BENIGN["ipd"][0]}


@dataclass(frozen=True)
class Spec:
    """A hostile file's first line: `# redteam: domain=D side=S expect=K[,K] [like=P] [leak=check]`."""

    name: str
    domain: str
    side: str
    expect: frozenset[str]
    like: str | None = None
    leak: bool = False

    @property
    def first(self) -> bool:
        return self.side == DOMAINS[self.domain].sides[0]


def parse(path: Path) -> Spec:
    header = path.read_text().splitlines()[0]
    assert header.startswith("# redteam: "), f"{path.name}: no redteam header"
    keys = dict(item.split("=", 1) for item in header.removeprefix("# redteam: ").split())
    return Spec(path.stem, keys["domain"], keys["side"], frozenset(keys["expect"].split(",")), keys.get("like"),
                keys.get("leak") == "check")  # fmt: skip


SPECS = [parse(p) for p in sorted(REDTEAM.glob("*.py"))]


@dataclass
class Arena:
    """Everything the hostile runs could have touched, and what they produced."""

    outside: Path
    token: str
    secrets: tuple[str, str]
    decoy: subprocess.Popen
    received: list[bytes] = field(default_factory=list)
    batches: dict[str, BatchResult] = field(default_factory=dict)
    references: dict[str, dict] = field(default_factory=dict)
    leftovers: list[str] = field(default_factory=list)

    def markers(self) -> list[str]:
        tmp = [p.name for p in Path("/tmp").glob(f"{self.token}*")]
        return sorted(p.name for p in self.outside.iterdir()) + tmp + [p.name for p in (REPO / "envs").glob(f"{self.token}*")]


def _listen() -> tuple[socket.socket, list[bytes]]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    received: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.settimeout(1)
            try:
                received.append(conn.recv(100) or b"(connected)")
            except OSError:
                received.append(b"(connected)")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return server, received


def _processes_of(uid: int) -> list[str]:
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if fields.get("Uid", "").split()[:1] == [str(uid)]:
            found.append(f"{status.parent.name} {fields.get('Name', '').strip()}")
    return found


def _code(spec: Spec, arena: Arena, port: int, secret_file: Path) -> str:
    text = (REDTEAM / f"{spec.name}.py").read_text()
    for key, value in (("__OUTSIDE__", str(arena.outside)), ("__PORT__", str(port)), ("__DECOY__", str(arena.decoy.pid)),
                       ("__SECRET_FILE__", str(secret_file)), ("__TOKEN__", arena.token)):  # fmt: skip
        text = text.replace(key, value)
    return text


def _pairs(spec: Spec, hostile: PolicyCode) -> list[tuple[PolicyCode, PolicyCode]]:
    benign_a, benign_b = BENIGN[spec.domain]
    match = (hostile, benign_b) if spec.first else (benign_a, hostile)
    return [match, (benign_a, benign_b)] + ([match] if spec.leak else [])


@pytest.fixture(scope="module")
def arena(tmp_path_factory) -> Arena:
    if os.geteuid() != 0:
        pytest.skip("the red team checks the root-started sandbox (as CI runs it)")
    sandbox = Sandbox(CONFIG)
    sandbox.check()  # every layer present: the suite does not run unsafe
    outside = tmp_path_factory.mktemp("outside")
    outside.chmod(0o777)
    secret_file = tmp_path_factory.mktemp("secret") / "api_key.txt"
    env_secret, file_secret = f"sk-{secrets.token_hex(16)}", f"sk-{secrets.token_hex(16)}"
    secret_file.write_text(file_secret)
    secret_file.chmod(0o644)
    os.environ["REDTEAM_OPENAI_API_KEY"] = env_secret
    server, received = _listen()
    decoy = subprocess.Popen(["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups", "sleep", "600"])
    arena = Arena(outside, f"rt{os.getpid()}_", (env_secret, file_secret), decoy, received)
    try:
        jobs = {spec.name: _pairs(spec, PolicyCode(spec.name, "", _code(spec, arena, server.getsockname()[1], secret_file),
                                                   spec.side)) for spec in SPECS}  # fmt: skip
        references = {name: [(a, b)] for name, (a, b) in BENIGN.items()}
        references.update({"like_still": [(BENIGN["car_tag"][0], LIKE["still"])],
                           "like_always_defect": [(LIKE["always_defect"], BENIGN["ipd"][1])]})  # fmt: skip
        domain_of = {**{s.name: s.domain for s in SPECS}, "car_tag": "car_tag", "ipd": "ipd", "like_still": "car_tag",
                     "like_always_defect": "ipd"}  # fmt: skip
        with ThreadPoolExecutor(4) as pool:
            futures = {name: pool.submit(sandbox.play_all, DOMAINS[domain_of[name]], pairs)
                       for name, pairs in {**references, **jobs}.items()}  # fmt: skip
            results = {name: future.result() for name, future in futures.items()}
        arena.references = {name: results[name].outcomes[0].to_dict() for name in references}
        arena.batches = {name: results[name] for name in jobs}
        deadline = time.monotonic() + 5
        while (left := [p for p in _processes_of(UID) if not p.startswith(f"{decoy.pid} ")]) and time.monotonic() < deadline:
            time.sleep(0.1)
        arena.leftovers = left
        yield arena
    finally:
        server.close()
        decoy.kill()
        decoy.wait()
        del os.environ["REDTEAM_OPENAI_API_KEY"]
        for marker in Path("/tmp").glob(f"{arena.token}*"):
            shutil.rmtree(marker, ignore_errors=True) if marker.is_dir() else marker.unlink()


def _scores(record: dict, counts: bool = True) -> tuple:
    """Scores and details; `counts=False` leaves out how many actions the harness had to repair."""
    details = {k: v for k, v in record["details"].items() if counts or not k.endswith("_actions")}
    return record["a"]["score"], record["b"]["score"], details


def test_the_red_team_is_large_enough():
    assert len(SPECS) >= 50 and {s.domain for s in SPECS} == {"car_tag", "ipd"}
    assert {"pursuer", "evader", "exploiter", "cooperator"} == {s.side for s in SPECS}


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_hostile_policy_is_contained(spec: Spec, arena: Arena):
    batch = arena.batches[spec.name]
    hostile, benign = batch.outcomes[0], batch.outcomes[1]
    mine, theirs = (hostile.failure_a, hostile.failure_b) if spec.first else (hostile.failure_b, hostile.failure_a)
    # the harness names the hostile policy, with the kind of failure the file declares, and never its opponent
    if spec.expect == {"ok"}:
        assert mine is None, mine
    else:
        assert mine is not None and mine["kind"] in spec.expect, hostile.to_dict()
        assert hostile.score_a is None and hostile.score_b is None
    assert theirs is None, theirs
    if spec.like:  # whatever it did inside its process, it scored exactly as the honest policy it imitates
        assert _scores(hostile.to_dict(), False) == _scores(arena.references[f"like_{spec.like}"], False)
    if spec.leak:  # nothing carried over from its first match to its second
        assert _scores(batch.outcomes[2].to_dict()) == _scores(hostile.to_dict())
    # the benign pair in the same batch is untouched
    assert _scores(benign.to_dict()) == _scores(arena.references[spec.domain])
    # effects outside the sandbox: none
    assert arena.markers() == [], "files written outside the sandbox"
    assert arena.received == [], "connections reached the loopback listener"
    assert arena.decoy.poll() is None, "the decoy process was killed"
    assert arena.leftovers == [], "processes of the sandbox uid outlived their matches"
    text = json.dumps([o.to_dict() for o in batch.outcomes]) + str(batch.error)
    for secret in arena.secrets:
        assert secret not in text
    # figures the harness measured itself, whatever the policy patched or forged; its words escaped and capped
    for outcome in batch.outcomes:
        assert math.isfinite(outcome.cpu_s) and outcome.cpu_s >= 0 and math.isfinite(outcome.wall_s), outcome.to_dict()
        for failure in (outcome.failure_a, outcome.failure_b):
            if failure is not None:
                assert not _CONTROL.search(failure["message"]) and len(failure["message"]) <= 1100, failure["message"][:200]
                assert not _CONTROL.search(failure["detail"].replace("\n", "").replace("\t", ""))


def test_a_hostile_policy_reading_secrets_gets_nothing_through_the_cli(arena: Arena, tmp_path):
    """`fmsp match` (the vetting command) as a subprocess with a secret in its environment: exit 0 (the match was
    played), the policy named as the failing one, and the secret in no output."""
    secret = f"sk-{secrets.token_hex(16)}"
    hostile = tmp_path / "snoop.py"
    hostile.write_text((REDTEAM / "read_host_secrets.py").read_text().replace("__SECRET_FILE__", "/proc/1/environ"))
    out = tmp_path / "match.json"
    done = subprocess.run([sys.executable, "-m", "fmsp.cli", "match", "--domain", "car_tag", "--games", "4",
                           "--a", str(REPO / "fmsp/baselines/car_tag/pursuer_pure_pursuit.py"), "--b", str(hostile),
                           "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OPENAI_API_KEY": secret})  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["a"]["failure"] is None and record["b"]["failure"]["kind"] == "exception"
    assert "loot:" in record["b"]["failure"]["message"]  # what it found: nothing of the host's
    assert "FAILED (exception" in done.stdout
    for text in (done.stdout, done.stderr, out.read_text()):
        assert secret not in text
