"""envs.sandbox: the pipe codec, what a policy process verifies about its own containment, refusing to run
without a layer (and `--unsafe-sandbox`), pipelined requests, and the `fmsp match` record."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest

from envs.base import act_all
from envs.sandbox import SandboxConfig, SandboxedPolicy, SandboxUnavailable, layers
from envs.sandbox.protocol import decode, encode
from fmsp.baselines.car_tag.evader_flee import FleeDirectly
from fmsp.baselines.car_tag.pursuer_pure_pursuit import PurePursuit
from fmsp.domains.car_tag import make_config, simulate

ECHO = "class Echo:\n    name = 'echo'\n    description = 'returns its input'\n\n    def act(self, x):\n        return x\n"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_codec_round_trips_arrays_exactly_and_rejects_what_is_not_data():
    message = {"x": np.array([0.1, -2.5e-300, np.nan, np.inf]), "ok": np.array([True, False]), "step": np.int64(3)}
    back = decode(encode(message))
    assert back["x"].dtype == np.float64 and back["x"].tobytes() == message["x"].tobytes()  # bit-exact, NaN too
    assert back["ok"].tolist() == [True, False] and back["step"] == 3
    for bad in ('{"__nd__": "|O", "shape": [1], "b64": "AA=="}', '{"__nd__": "<f8", "shape": [2], "b64": "AAAAAAAAAAA="}',
                '{"__nd__": "<f8", "shape": [-1], "b64": ""}'):  # fmt: skip
        with pytest.raises(ValueError):
            decode(bad.encode())
    with pytest.raises(RecursionError):
        decode(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(TypeError, match="cannot cross the sandbox pipe"):
        encode({"f": lambda: 0})


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid drop is checked for a root harness (as in CI)")
def test_a_policy_process_reports_every_layer_in_force():
    config = SandboxConfig(uid=61235, gid=61235)
    with SandboxedPolicy(ECHO, label="echo", config=config, methods=("act",)) as policy:
        assert policy.loaded() == {"class": "Echo", "name": "echo", "description": "returns its input"}
        assert policy.checks == {"uid": 61235, "pid": 2, "effective_capabilities": 0, "no_new_privs": True,
                                 "seccomp": True, "sockets": False, "host_proc": False}  # fmt: skip
        assert policy.call("act", {"nested": [1, "two", None]}) == {"nested": [1, "two", None]}
        # seen from the host: the worker (and everything of the sandbox) runs as the unprivileged uid, not root
        names = [(Path(d) / "comm").read_text().strip() for d in Path("/proc").glob("[0-9]*") if _uid(d) == 61235]
        assert any(n.startswith("python") for n in names), names


def _uid(proc_dir) -> int | None:
    try:
        line = next(x for x in (Path(proc_dir) / "status").read_text().splitlines() if x.startswith("Uid:"))
    except (OSError, StopIteration):
        return None
    return int(line.split()[1])


def _without_bubblewrap(monkeypatch) -> None:
    real = layers.detect_layers(SandboxConfig().uid, SandboxConfig().gid)
    fake = dataclasses.replace(real, bwrap=None, missing=("bubblewrap (bwrap) not found; `make install` installs it",))
    monkeypatch.setattr(layers, "detect_layers", lambda uid, gid: fake)


def test_a_missing_layer_refuses_unless_unsafe(monkeypatch, tmp_path, capsys):
    _without_bubblewrap(monkeypatch)
    with pytest.raises(SandboxUnavailable, match=r"refusing to run generated code: bubblewrap .*--unsafe-sandbox"):
        SandboxedPolicy(ECHO, label="echo", methods=("act",)).start()
    # unsafe: the remaining layers still apply (seccomp, and the uid drop when root), without the namespaces
    with SandboxedPolicy(ECHO, label="echo", config=SandboxConfig(unsafe=True), methods=("act",)) as policy:
        assert policy.call("act", 7) == 7
        assert policy.checks["seccomp"] and not policy.checks["sockets"] and policy.checks["pid"] != 2
    from fmsp.match import main

    files = [str(tmp_path / f) for f in ("p.py", "e.py")]
    for path in files:
        open(path, "w").write("class Still:\n    def __call__(self, obs):\n        return 0.0\n")
    from fmsp.cli import main as fmsp_main

    assert fmsp_main(["match", "--domain", "car_tag", "--a", files[0], "--b", files[1], "--json",
                      str(tmp_path / "o.json")]) == 2  # fmt: skip
    assert "fmsp match: error:" in (err := capsys.readouterr().err) and "bubblewrap" in err
    assert main(["--domain", "car_tag", "--games", "2", "--a", files[0], "--b", files[1], "--json",
                 str(tmp_path / "o.json"), "--unsafe-sandbox"]) == 0  # fmt: skip
    assert "MISSING: bubblewrap" in json.loads((tmp_path / "o.json").read_text())["sandbox"]
    # `fmsp run ... --unsafe-sandbox` (a bare flag) is the recipe key unsafe_sandbox: true
    from fmsp.config import FMSPConfig
    from sepo.config.recipes import parse_config

    (config,) = parse_config((FMSPConfig,), ["--unsafe-sandbox", "--iterations", "3"], prog="fmsp run")
    assert config.unsafe_sandbox and config.iterations == 3 and config.sandbox_config().unsafe


def test_act_all_sends_every_request_before_reading_any_reply(monkeypatch):
    events = []
    submit, result = SandboxedPolicy.submit, SandboxedPolicy.result
    monkeypatch.setattr(SandboxedPolicy, "submit", lambda self, *a, **k: events.append(("send", self.label)) or submit(self, *a, **k))
    monkeypatch.setattr(SandboxedPolicy, "result", lambda self: events.append(("read", self.label)) or result(self))

    class Local:
        def act(self, x):
            events.append(("local", x))
            return -x

    with SandboxedPolicy(ECHO, label="a", methods=("act",)) as a, SandboxedPolicy(ECHO, label="b", methods=("act",)) as b:
        a.loaded(), b.loaded()
        events.clear()
        assert act_all([(a, 1), (Local(), 2), (b, 3)]) == [1, -2, 3]
    assert events == [("send", "a"), ("local", 2), ("send", "b"), ("read", "a"), ("read", "b")]


def test_fmsp_match_writes_the_documented_record(tmp_path):
    from fmsp.match import main

    out = tmp_path / "match.json"
    assert main(["--domain", "car_tag", "--games", "5", "--json", str(out),
                 "--a", f"{REPO}/fmsp/baselines/car_tag/pursuer_pure_pursuit.py",
                 "--b", f"{REPO}/fmsp/baselines/car_tag/evader_flee.py"]) == 0  # fmt: skip
    record = json.loads(out.read_text())
    reference = simulate(PurePursuit(), FleeDirectly(), make_config(n_games=5))
    assert record["a"] == {"score": 1.0 - reference.evader_score, "failure": None, "side": "pursuer",
                           "name": "pursuer_pure_pursuit", "file": f"{REPO}/fmsp/baselines/car_tag/pursuer_pure_pursuit.py"}  # fmt: skip
    assert record["b"]["score"] == reference.evader_score and record["b"]["failure"] is None
    assert record["details"] == reference.details() and record["domain"] == "car_tag"


def test_the_sandbox_benchmark_part_runs_and_names_its_baseline():
    """`python -m benchmarks --only sandbox` at quick size: sandboxed and in-process games agree (the part raises
    otherwise), and every figure has its in-process baseline (no timing thresholds)."""
    from benchmarks.sandbox import bench
    from benchmarks.suite import rows

    figures = bench(quick=True, gpu=False)
    assert figures["car_tag"]["steps"] == 200 and figures["ipd"]["episodes"] == 20
    assert figures["car_tag"]["in_process_s"] > 0 and figures["ipd"]["in_process_ms_per_episode"] > 0
    text = " ".join(" ".join(r) for r in rows({"sandbox": figures}))
    assert "both policies sandboxed" in text and "in-process" in text and "<= 1.5 s" in text


@pytest.mark.skipif(os.geteuid() != 0 or not layers.detect_layers().bwrap, reason="the root staging step needs root")
def test_a_bound_path_under_tmp_survives_the_staging_tmpfs(tmp_path):
    """A checkout under /tmp (a CI clone, say) must still be visible after the root stage mounts its private /tmp:
    the tmpfs goes first and the binds on top of it (found by a clean-clone CI run in /tmp/ci)."""
    import subprocess

    found = layers.detect_layers()
    assert str(tmp_path).startswith("/tmp/")
    stage = layers._prefix(found.bwrap, found.setpriv, 65534, 65534, [str(tmp_path)])
    assert subprocess.run([*stage, "test", "-d", str(tmp_path)]).returncode == 0
