"""Sandbox v2 (issue 23), each defence tested by its effect: host memory outside every limit, figures the harness
measures itself, replies that could crash it, untrusted text on the terminal, the policy's rng, and channels
between two sandboxes. Every channel test first opens that channel on purpose (the seccomp rule that closes it
taken out) to show the sender and receiver work, then shows the real sandbox carries nothing.

The memory test reads the host's Shmem while a hostile policy holds what it got: run this file on its own
(not in parallel with other memory-heavy tests) so that figure is not blurred.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from envs import make_game
from envs.sandbox import SandboxConfig, SandboxedPolicy, SandboxedStrategy, layers, seccomp
from envs.sandbox.rng import keyed_seed, persist_run_rng_key, private_copy
from envs.sandbox.text import safe_text
from fmsp.domain import PolicyCode
from fmsp.domains import make_domain
from fmsp.domains.sepo_games import play_episodes, scripted_policy_code
from fmsp.sandbox import Sandbox

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not layers.detect_layers().bwrap,
                                reason="checks the root-started bubblewrap sandbox (as CI runs it)")  # fmt: skip


def _meminfo(field: str) -> int:
    """A /proc/meminfo figure of the host, in bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) << 10
    raise KeyError(field)


# --- memory ------------------------------------------------------------------------------------------

HOG = r'''
import ctypes, mmap, os

class Hog:
    """Tries to hold `mb` MB of host memory through every channel outside RLIMIT_AS, and reports what it got."""

    def act(self, mb):
        n, chunk = mb << 20, b"\1" * (1 << 20)
        self.keep, held = [], {}

        def fill(write, close=None):
            done = 0
            try:
                while done < n:
                    write(chunk)
                    done += len(chunk)
            except (OSError, ValueError, MemoryError):
                pass
            return done

        for name, path in (("dev_shm", "/dev/shm/hog"), ("dev", "/dev/hog"), ("tmp", "/tmp/hog"), ("root", "/hog"),
                           ("scratch", "/scratch/hog")):
            held[name] = 0
            for i in range(4 * mb):  # many files: each one stops at the file-size limit
                try:
                    with open(f"{path}{i}", "wb", buffering=0) as fh:
                        got = fill(fh.write)
                except OSError:
                    break
                held[name] += got
                if got == 0 or held[name] >= n:
                    break
        held["memfd"] = 0
        for i in range(32):
            try:
                fd = os.memfd_create(f"hog{i}")
            except OSError:
                break
            self.keep.append(fd)
            got = fill(lambda b: os.write(fd, b))
            held["memfd"] += got
            if got == 0 or held["memfd"] >= n:
                break
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        shmid = libc.shmget(0, ctypes.c_size_t(n), 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
        held["sysv"] = 0
        if shmid >= 0:
            address = libc.shmat(shmid, None, 0)
            if address not in (None, ctypes.c_void_p(-1).value):
                ctypes.memset(address, 1, n)
                libc.shmdt(ctypes.c_void_p(address))  # detached: the segment stays resident, outside RLIMIT_AS
                held["sysv"] = n
        msgs = libc.msgget(0, 0o1600)
        held["sysv_msg"] = 0 if msgs < 0 else 1
        try:
            shared = mmap.mmap(-1, 4 * n, flags=mmap.MAP_SHARED)  # shmem-backed, but mapped: RLIMIT_AS counts it
            shared.write(b"\1" * (4 * n))
            self.keep.append(shared)
            held["shared_anon"] = 4 * n
        except (OSError, ValueError, MemoryError):
            held["shared_anon"] = 0
        return held
'''


def test_host_memory_stays_bounded_under_every_shared_memory_channel():
    """A policy tries to hold 512 MB each in /dev/shm, /dev, /tmp, the root, the scratch tmpfs, a memfd, a SysV
    segment it detaches, and 2 GB of shared anonymous memory. While it holds what it got, the host's Shmem has
    risen by no more than the 32 MB scratch (plus noise), its available memory has not fallen by 400 MB, and what
    the policy reports getting agrees."""
    config = SandboxConfig(memory_mb=1024, scratch_mb=32, call_timeout_s=60)
    before, available = _meminfo("Shmem"), _meminfo("MemAvailable")
    with SandboxedPolicy(HOG, label="hog", config=config, methods=("act",)) as policy:
        held = policy.call("act", 512)
        during, available_during = _meminfo("Shmem"), _meminfo("MemAvailable")
    after = _meminfo("Shmem")
    assert during - before < 96 << 20, f"host Shmem rose by {(during - before) >> 20} MB while the policy held {held}"
    # loose: other jobs on a shared machine move MemAvailable by ~100 MB; an unbounded channel here takes >= 512 MB
    assert available - available_during < 400 << 20, f"MemAvailable fell by {(available - available_during) >> 20} MB"
    assert after - before < 64 << 20
    assert held["scratch"] <= 32 << 20, held  # what it says it got agrees: the scratch, and nothing else
    assert {k: v for k, v in held.items() if k != "scratch"} == {k: 0 for k in held if k != "scratch"}, held


FILES = r'''
import os

class Files:
    def act(self, limit):
        n = 0
        try:
            while n < limit:
                os.mkdir(f"d{n}") if n % 2 else open(f"f{n}", "w").close()
                n += 1
        except OSError:
            pass
        return n
'''


def test_empty_files_cannot_pin_kernel_memory():
    """Empty files and directories take no tmpfs bytes but each pins an inode and a dentry (~1 KB of kernel slab):
    a policy trying 300,000 of them stops at the scratch's inode limit, and the host's Slab barely moves."""
    before = _meminfo("Slab")
    with SandboxedPolicy(FILES, label="files", config=SandboxConfig(call_timeout_s=120), methods=("act",)) as policy:
        made = policy.call("act", 300_000)
        during = _meminfo("Slab")
    assert during - before < 64 << 20, f"host Slab rose by {(during - before) >> 20} MB for {made} files"
    assert made < layers.SCRATCH_INODES, made


def test_a_policy_over_a_memory_bound_loses_with_the_memory_kind_and_the_match_goes_on():
    """Filling the scratch tmpfs (one file: the file-size limit) and exhausting the address space are the policy's
    `memory` failures; its opponent
    is not blamed, and the next pair of the batch plays normally."""
    domain = make_domain("ipd", n_episodes=2)
    tft = scripted_policy_code("ipd", "tit_for_tat", "cooperator")
    defect = scripted_policy_code("ipd", "always_defect", "exploiter")
    fill = ("class Fill:\n    name = 'fill'\n    description = 'fills its scratch'\n\n    def reset(self, game, seat, rng):\n"
            "        with open('/scratch/big', 'wb') as fh:\n            while True:\n"
            "                fh.write(b'x' * (1 << 20))\n\n    def act(self, view):\n        return 'COOPERATE'\n")  # fmt: skip
    hoard = fill.replace("with open('/scratch/big', 'wb') as fh:\n            while True:\n"
                         "                fh.write(b'x' * (1 << 20))", "self.m = [bytearray(1 << 26) for _ in range(1000)]")
    sandbox = Sandbox(SandboxConfig(memory_mb=512, call_timeout_s=30))
    pairs = [(defect, PolicyCode("fill", "", fill, "cooperator")), (defect, PolicyCode("hoard", "", hoard, "cooperator")),
             (defect, tft)]  # fmt: skip
    first, second, third = sandbox.play_all(domain, pairs).outcomes
    for outcome in (first, second):
        assert outcome.failure_a is None and outcome.failure_b["kind"] == "memory", outcome.to_dict()
    assert "File too large" in first.failure_b["message"]  # RLIMIT_FSIZE (8 MB) comes before the 32 MB tmpfs is full
    assert "MemoryError" in second.failure_b["message"]
    assert third.ok and third.score_a is not None


# --- figures from outside, replies that could crash the harness, terminal text ----------------------

BURN = r'''
import time

class Burn:
    def act(self, seconds):
        clock = time.process_time
        time.process_time = lambda: -1e6  # the clock a worker could report: no longer asked
        time.thread_time = time.perf_counter = lambda: float("nan")
        start, x = clock(), 0
        while clock() - start < seconds:  # burn `seconds` of CPU, however long that takes on a busy machine
            x += 1
        return x > 0
'''

FORGE_NAN = r'''
import os

class ForgeNaN:
    name = "forge_nan"
    description = "answers with a forged reply carrying a non-finite number"

    def __call__(self, obs):
        line = b'{"ok": true, "value": 0.0, "cpu_s": NaN}\n'
        for fd in range(3, 64):
            try:
                os.write(fd, line)
            except OSError:
                pass
        return 0.0
'''

SCREAM = r'''
class Scream:
    name = "scream"
    description = "raises with terminal control sequences in its message"

    def __call__(self, obs):
        raise ValueError("\r\x1b[2K\x1b[1A" + "a (pursuer, x): score 1.0000\x1b]0;owned\x07\u202e" + "y" * 100_000)
'''


def test_cpu_time_is_measured_by_the_host_and_a_patched_clock_changes_nothing():
    with SandboxedPolicy(BURN, label="burn", config=SandboxConfig(call_timeout_s=30), methods=("act",)) as policy:
        policy.loaded()
        start = policy.cpu_s
        assert policy.call("act", 0.6) is True
        used = policy.cpu_s - start
    assert math.isfinite(policy.cpu_s) and 0.55 <= used <= 1.5, used  # 0.6 s burnt; clock ticks are 10 ms
    assert policy.cpu_s >= used  # kept after the process is gone


@pytest.mark.parametrize("reply", [b'{"ok": true, "value": 1, "cpu_s": NaN}', b'{"ok": true, "value": Infinity}',
                                   b'{"ok": true, "value": [1e999]}', b'{"ok": true, "value": 1, "score_b": 1.0}',
                                   b'{"ok": 1, "value": 1}', b'{"ok": false, "kind": "timeout", "error": "x"}',
                                   b'{"ok": true, "value": 1' + b"9" * 5000 + b"}"])  # fmt: skip
def test_a_malformed_or_non_finite_reply_is_a_protocol_failure_of_the_policy(reply):
    line = reply + b"\n"
    code = ("import os\n\nclass Liar:\n    def act(self, x):\n        for fd in range(3, 64):\n            try:\n"
            f"                os.write(fd, {line!r})\n            except OSError:\n                pass\n        return x\n")  # fmt: skip
    policy = SandboxedPolicy(code, label="liar", methods=("act",))
    policy.loaded()
    with pytest.raises(Exception) as info:
        policy.call("act", 1)
    assert type(info.value).__name__ == "PolicyError" and info.value.kind == "protocol", info.value
    assert policy.cpu_s >= 0 and math.isfinite(policy.cpu_s)


def test_fmsp_match_survives_a_forged_nan_reply_and_prints_no_control_characters(tmp_path):
    """The NaN reply that crashed `fmsp match` (no JSON written) is the policy's protocol failure, and an exception
    message full of terminal escapes reaches stdout and the record escaped and capped."""
    pursuer = REPO / "fmsp/baselines/car_tag/pursuer_pure_pursuit.py"
    for name, code, kind in (("forge_nan", FORGE_NAN, "protocol"), ("scream", SCREAM, "exception")):
        hostile, out = tmp_path / f"{name}.py", tmp_path / f"{name}.json"
        hostile.write_text(code)
        done = subprocess.run([sys.executable, "-m", "fmsp.cli", "match", "--domain", "car_tag", "--games", "2",
                               "--a", str(pursuer), "--b", str(hostile), "--json", str(out)], cwd=REPO,
                              capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        record = json.loads(out.read_text())
        assert record["b"]["failure"]["kind"] == kind and record["a"]["failure"] is None
        assert math.isfinite(record["cpu_s"]) and record["cpu_s"] > 0
        for text in (done.stdout, done.stderr, record["b"]["failure"]["message"]):
            assert not any(c in text for c in "\r\x1b\x07\u202e"), repr(text[:300])
        assert len(done.stdout) < 2000
    assert "\\x1b[2K" in done.stdout and "FAILED (exception: ValueError:" in done.stdout


def test_safe_text_escapes_controls_and_caps_length():
    assert safe_text("ok\r\x1b[31mred\x07\u202e\n") == "ok\\x0d\\x1b[31mred\\x07\\u202e\\x0a"
    assert safe_text("line 1\n\tline 2\x1b", multiline=True) == "line 1\n\tline 2\\x1b"
    assert safe_text("x" * 50, 10) == "x" * 10 + "...[truncated]" and safe_text(None) == "" and safe_text(3) == "<int>"
    assert len(safe_text("\x1b" * 10**6, 100)) == 100 + len("...[truncated]")


# --- the private rng ---------------------------------------------------------------------------------

# A Kuhn seat-0 policy that knows every public way seeds were made (fmsp's Random(seed * 100003 + i) and the
# seat's Random(rng.random()); keyed ones under guessable keys) and tries to recognise its own rng among them;
# failing that, it computes the deal from the match's public seed and its own count of episodes. Its opening move encodes its guess of the opponent's card: BET when
# it thinks the opponent holds the higher of the two cards it does not hold, PASS otherwise.
PREDICTOR = r'''
import hashlib, hmac, random

CARDS = "JQK"


class Predictor:
    name = "predictor"
    description = "recovers the deal from its rng"

    episodes = 0  # this process's episodes so far: the episode index, if it is the only policy of its class

    def reset(self, game, seat, rng):
        state, self.deals = rng.getstate(), None
        for candidate, deals in self._candidates(game, seat):
            if candidate == state:
                self.deals = deals
                break
        else:  # its rng says nothing: the match's public seed (0) and its own count of episodes
            self.deals = game.new_state(random.Random(Predictor.episodes)).deals
        Predictor.episodes += 1

    def _candidates(self, game, seat):
        def seat_rng(master):
            deals = game.new_state(master).deals
            for _ in range(seat + 1):
                child = random.Random(master.random())
            return child.getstate(), deals

        for seed in range(3):
            for i in range(256):
                yield seat_rng(random.Random(seed * 100_003 + i))
        for key in ("", "0" * 64, "rng_key", "secret"):  # keyed derivations under keys one could guess
            for i in range(256):
                message = f"fmsp-episode:0:{i}".encode()
                yield seat_rng(random.Random(int.from_bytes(hmac.new(key.encode(), message, hashlib.sha256).digest(), "big")))

    def act(self, view):
        if view["current"]["betting"]:
            return view["legal_actions"][0]
        mine = view["private"]["card"]
        higher = [c for c in CARDS if c != mine][1]
        return "BET" if self.deals[0][1] == higher else "PASS"
'''


def _kuhn_guesses(sandboxed: bool, episodes: int, key: str) -> tuple[int, int]:
    """(right guesses, guesses) of the predictor, seat 0 of the even episodes of an FMSP Kuhn match (seed 0, one
    hand per episode), judged against the real deal."""
    from envs import make_strategy, play_episode

    game = make_game("kuhn", num_hands=1)
    config = {"n_episodes": episodes, "seed": 0}
    if sandboxed:
        sandbox = SandboxConfig(rng_key=key, call_timeout_s=60)
        opponent = scripted_policy_code("kuhn", "nash_approx", "cooperator").code
        a = SandboxedStrategy(SandboxedPolicy(PREDICTOR, label="a", config=sandbox, methods=("act",)), "a", "dict")
        b = SandboxedStrategy(SandboxedPolicy(opponent, label="b", config=sandbox, methods=("act",)), "b", "dict")
        try:
            results = play_episodes(game, a, b, config, key)
        finally:
            a.close(), b.close()
    else:  # the pre-v2 harness: deal from Random(seed * 100003 + i), each seat Random(rng.random()), rng as given
        namespace: dict = {}
        exec(PREDICTOR, namespace)  # noqa: S102 - the test's own policy

        class OnDicts:
            name = "predictor"

            def __init__(self):
                self.inner = namespace["Predictor"]()

            def reset(self, game, seat, rng):
                self.inner.reset(game, seat, rng)

            def act(self, view):
                return self.inner.act(view.to_dict())

        results = []
        for i in range(episodes):
            seats = [OnDicts(), make_strategy("kuhn", "nash_approx")]
            results.append(play_episode(game, seats if i % 2 == 0 else seats[::-1], random.Random(i)))
    right = total = 0
    for result in results[::2]:  # the predictor in seat 0, which opens the hand
        (hand,) = result.rounds
        mine, theirs = hand.record["cards"]
        higher = [c for c in "JQK" if c != mine][1]
        total += 1
        right += (hand.record["actions"][0][1] == "BET") == (theirs == higher)
    return right, total


def test_the_opponents_kuhn_card_cannot_be_predicted_from_the_policys_rng():
    """Against the pre-v2 derivation the predictor names the opponent's card every time (so it is competent); in
    the sandbox under a secret key it does no better than chance given its own card: over n = 150 guesses the
    right ones stay below n/2 + 3 sqrt(n)/2 = 93 (a chance guesser exceeds that with probability ~0.001)."""
    right, total = _kuhn_guesses(False, 40, "")
    assert total == 20 and right == total, (right, total)
    right, total = _kuhn_guesses(True, 300, "k" * 64)
    assert total == 150
    assert right <= total / 2 + 3 * math.sqrt(total) / 2, (right, total)


# A Kuhn pool member (seat 1 of a `sepo train`/`sepo eval` episode) that knows the engine's derivations: its rng
# is Random(f"{seed}:opponent") and the deal Random(f"{seed}:game") for a dataset seed below 1000. `guess` returns
# its guess of the model's card.
ENGINE_PREDICTOR = r'''
import random


class EnginePredictor:
    def reset(self, game, seat, rng):
        state, self.deal = rng.getstate(), None
        for seed in range(1000):
            if random.Random(f"{seed}:opponent").getstate() == state:
                self.deal = game.new_state(random.Random(f"{seed}:game")).deals[0]

    def act(self, view):
        return view.legal_actions[0]

    def guess(self, mine):
        return self.deal[0] if self.deal else [c for c in "JQK" if c != mine][1]
'''


def test_a_pool_member_cannot_read_the_models_kuhn_card_in_the_rollout_engine():
    """`sepo train`/`sepo eval` episodes (`sepo.rollout.engine._start`): with the public opponent rng the member
    names the model's card every time; sandboxed, under the run's key, at chance (bound as above, n = 100)."""
    from sepo.rollout.engine import EpisodeSpec, _start

    namespace: dict = {}
    exec(ENGINE_PREDICTOR, namespace)  # noqa: S102 - the test's own policy
    plain = namespace["EnginePredictor"]()
    config = SandboxConfig(rng_key="e" * 64)
    right = {"public": 0, "sandboxed": 0}
    for seed in range(100):
        spec = EpisodeSpec("kuhn", {"num_hands": 1}, "exploit", "predictor", seed * 7 + 3, seat=0)
        ep = _start(0, spec, {"predictor": lambda: SandboxedStrategy(SandboxedPolicy(
            ENGINE_PREDICTOR, label="predictor", config=config, methods=("act",)), "predictor", "object")})  # fmt: skip
        model_card, member_card = ep.state.deals[0]
        right["sandboxed"] += ep.opponent.policy.call("guess", member_card) == model_card
        ep.opponent.close()
        plain.reset(ep.game, 1, random.Random(f"{spec.seed}:opponent"))
        right["public"] += plain.guess(member_card) == model_card
    assert right["public"] == 100, right
    assert right["sandboxed"] <= 50 + 3 * math.sqrt(100) / 2, right


def test_a_sandboxed_opponents_rng_is_keyed_paired_and_private(tmp_path):
    """The rng a sandboxed strategy gets: the same key and harness rng give the same stream (runs replay and arms
    stay paired), another key another stream, and neither is the engine's public Random(f"{seed}:opponent")."""
    code = ("class Draw:\n    def reset(self, game, seat, rng):\n        self.x = [rng.random() for _ in range(4)]\n\n"
            "    def act(self, view):\n        return view.legal_actions[0]\n\n    def draws(self):\n        return self.x\n")  # fmt: skip
    game = make_game("ipd")

    def draws(key: str, seed: int) -> list[float]:
        policy = SandboxedPolicy(code, label="o", config=SandboxConfig(rng_key=key), methods=("act",))
        strategy = SandboxedStrategy(policy, "o")
        strategy.reset(game, 1, random.Random(f"{seed}:opponent"))
        value = policy.call("draws")
        strategy.close()
        return value

    key_a, key_b = "a" * 64, "b" * 64
    public = random.Random("7:opponent")
    expected = private_copy(key_a, random.Random("7:opponent"), "policy")
    assert draws(key_a, 7) == draws(key_a, 7) == [expected.random() for _ in range(4)]
    assert draws(key_a, 7) != draws(key_b, 7) and draws(key_a, 7) != draws(key_a, 8)
    assert draws(key_a, 7)[0] != public.random()
    assert keyed_seed(key_a, 1) != keyed_seed(key_b, 1)
    # the run's key: made once, recorded, reused on resume, and a different configured key is refused
    first = persist_run_rng_key(tmp_path)
    assert persist_run_rng_key(tmp_path) == first and json.loads((tmp_path / "rng_key.json").read_text())["rng_key"] == first
    assert SandboxConfig().rng_key == first
    with pytest.raises(ValueError, match="differs from the one recorded"):
        persist_run_rng_key(tmp_path, "c" * 64)


# --- channels between two sandboxes -----------------------------------------------------------------

CHANNEL = r'''
import ctypes, errno, fcntl, os, signal, struct, time

F_OFD_GETLK, F_OFD_SETLK = 36, 37
FLOCK = "hhqqi4x"  # struct flock: l_type, l_whence, l_start, l_len, l_pid
libc = ctypes.CDLL(None, use_errno=True)


def _name(exc):
    return errno.errorcode.get(exc.errno, str(exc.errno))


class Channel:
    """Receiver: `listen` then `receive`; sender: `send`. One bit per shared file."""

    def listen(self, kind, paths):
        self.hits = 0
        if kind == "inotify":
            self.fd = libc.inotify_init1(os.O_NONBLOCK)
            if self.fd < 0:
                return errno.errorcode[ctypes.get_errno()]
            self.wds = [libc.inotify_add_watch(self.fd, p.encode(), 0x1 | 0x20) for p in paths]  # IN_ACCESS | IN_OPEN
            return "ok" if min(self.wds) >= 0 else errno.errorcode[ctypes.get_errno()]
        if kind == "dnotify":
            signal.signal(signal.SIGIO, self._hit)
            self.fd = os.open(os.path.dirname(paths[0]), os.O_RDONLY)
            try:
                fcntl.fcntl(self.fd, fcntl.F_NOTIFY, fcntl.DN_ACCESS | fcntl.DN_MULTISHOT)
            except OSError as exc:
                return _name(exc)
        return "ok"

    def _hit(self, *args):
        self.hits += 1

    def send(self, kind, paths, bits):
        self.held, refused = [], []
        for path, bit in zip(paths, bits):
            if not bit:
                continue
            fd = os.open(path, os.O_RDONLY)
            self.held.append(fd)
            try:
                if kind == "flock":
                    fcntl.flock(fd, fcntl.LOCK_SH)
                elif kind == "posix_lock":
                    fcntl.fcntl(fd, fcntl.F_SETLK, struct.pack(FLOCK, fcntl.F_RDLCK, 0, 0, 0, 0))
                elif kind == "ofd_lock":
                    fcntl.fcntl(fd, F_OFD_SETLK, struct.pack(FLOCK, fcntl.F_RDLCK, 0, 0, 0, 0))
                else:
                    os.read(fd, 1)
            except OSError as exc:
                refused.append(_name(exc))
        return refused

    def receive(self, kind, paths):
        if kind == "inotify":
            if self.fd < 0:
                return None
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                data = b""
            fired, i = set(), 0
            while i + 16 <= len(data):
                wd, _, _, length = struct.unpack_from("iIII", data, i)
                fired.add(wd)
                i += 16 + length
            return [int(wd in fired) for wd in self.wds]
        if kind == "dnotify":
            time.sleep(0.1)
            return [int(self.hits > 0)] + [0] * (len(paths) - 1)
        got = []
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                if kind == "flock":
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    got.append(0)
                else:
                    command = fcntl.F_GETLK if kind == "posix_lock" else F_OFD_GETLK
                    answer = fcntl.fcntl(fd, command, struct.pack(FLOCK, fcntl.F_WRLCK, 0, 0, 0, 0))
                    got.append(int(struct.unpack(FLOCK, answer)[0] != fcntl.F_UNLCK))
            except BlockingIOError:
                got.append(1)
            except OSError as exc:
                got.append(_name(exc))
            finally:
                os.close(fd)
        return got
'''

# What each channel needs from the seccomp filter: the syscalls and fcntl commands the allow-list leaves out.
CHANNELS = {"inotify": (("inotify_init", "inotify_init1", "inotify_add_watch"), ()), "flock": (("flock",), ()),
            "posix_lock": ((), (5, 6, 7)), "ofd_lock": ((), (36, 37, 38)), "dnotify": ((), (1026,))}  # fmt: skip


def _talk(kind: str) -> tuple[str, list, list]:
    """Two concurrent sandboxes (as in one match, or a match and the next pair's start): the sender signals
    1,0,1,1 through files both see; returns (the receiver's set-up, what the sender was refused, what it got)."""
    import envs

    shared = Path(envs.__file__).parent
    paths = [str(shared / name) for name in ("__init__.py", "base.py", "ipd.py", "kuhn.py")]
    with SandboxedPolicy(CHANNEL, label="rx", methods=("listen",)) as rx, SandboxedPolicy(CHANNEL, label="tx", methods=("send",)) as tx:
        rx.loaded(), tx.loaded()
        setup = rx.call("listen", kind, paths)
        refused = tx.call("send", kind, paths, [1, 0, 1, 1])
        got = rx.call("receive", kind, paths)
    return setup, refused, got


@pytest.mark.parametrize("kind", sorted(CHANNELS))
def test_no_notification_or_lock_channel_between_two_sandboxes(kind, monkeypatch):
    syscalls, commands = CHANNELS[kind]
    expected = [1, 0, 1, 1] if kind != "dnotify" else [1, 0, 0, 0]
    # the channel opened on purpose: these calls added to the allow-list, everything else in force
    monkeypatch.setattr(seccomp, "ALLOWED", {**seccomp.ALLOWED, **dict.fromkeys(syscalls, "control")})
    monkeypatch.setattr(seccomp, "FCNTL_ALLOWED", seccomp.FCNTL_ALLOWED + commands)
    seccomp.seccomp_program.cache_clear()
    try:
        setup, refused, got = _talk(kind)
    finally:
        monkeypatch.undo()
        seccomp.seccomp_program.cache_clear()
    assert (setup, refused, got) == ("ok", [], expected), "the control channel did not work: the test proves nothing"
    setup, refused, got = _talk(kind)
    assert got != expected and 1 not in (got or []), (setup, refused, got)
    assert "EPERM" in [setup, *refused, *(got or [])], (setup, refused, got)


STORE = r'''
import os

class Store:
    def writable(self):
        """Every path this sandbox may write (os.access honours read-only mounts)."""
        found = []
        for top in ("/",):
            for root, dirs, files in os.walk(top):
                for name in dirs + files:
                    path = os.path.join(root, name)
                    if os.access(path, os.W_OK) and not os.path.islink(path):
                        found.append(path)
        return found

    def put(self, token):
        open(f"/scratch/{token}", "w").write(token)
        return os.listdir("/scratch")

    def look(self, token):
        return [os.path.join(r, n) for r, d, f in os.walk("/") for n in d + f if token in n]
'''


def test_no_shared_writable_storage_between_two_sandboxes():
    """The only writable places are a sandbox's own scratch and five stateless device nodes; what one sandbox writes
    there, a concurrent one cannot find."""
    walk = SandboxConfig(call_timeout_s=120)  # each call walks the sandbox's whole tree: >10 s on a loaded CI machine
    with (
        SandboxedPolicy(STORE, label="a", config=walk, methods=("put",)) as a,
        SandboxedPolicy(STORE, label="b", config=walk, methods=("put",)) as b,
    ):
        a.loaded(), b.loaded()
        writable = set(a.call("writable"))
        assert writable <= {"/scratch"} | {f"/dev/{d}" for d in layers.DEVICES}, sorted(writable)[:20]
        assert a.call("put", "tok3n_x") == ["tok3n_x"]
        assert b.call("look", "tok3n_x") == [] and a.call("look", "tok3n_x") == ["/scratch/tok3n_x"]
