"""The SEPO games served by OpenEnv's app factory on 127.0.0.1 (sepo.interop.openenv_env) and played through
OpenEnv's WebSocket client: whole episodes of every game, then the server is stopped."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from envs import GAMES, make_game
from sepo.interop.episode import Episode
from sepo.interop.openenv_env import SEPOAction, SEPOEnvClient

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`python -m sepo.interop.openenv_env` on a free port; the health wait ends when the server answers, dies, or
    60 s pass; the server is stopped and must be gone afterwards."""
    port = _free_port()
    log = (tmp_path_factory.mktemp("openenv") / "server.log").open("w")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "sepo.interop.openenv_env", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            pytest.fail(f"the OpenEnv server exited with {proc.returncode}; log: {log.name}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the OpenEnv server did not answer /health within 60 s; log: {log.name}")
        time.sleep(0.2)
    yield url
    proc.terminate()
    assert proc.wait(timeout=30) is not None
    with pytest.raises(OSError):  # nothing listens any more
        urllib.request.urlopen(f"{url}/health", timeout=2)
    log.close()


@pytest.mark.parametrize("game", list(GAMES))
def test_whole_episodes_of_every_game_over_http(server, game):
    with SEPOEnvClient(base_url=server).sync() as env:
        for pool, seat in (("training", 0), ("exploit", 1), ("collusive", 0)):
            result = env.reset(game=game, pool=pool, seat=seat, seed=17)
            assert result.observation.pool == pool and result.observation.system_prompt
            played = []
            while not result.done:
                legal = result.observation.legal_actions
                action = legal[len(played) % len(legal)]
                played.append(action)
                result = env.step(SEPOAction(action=f"Let me think.\n{action}"))
                assert result.observation.error is None
            replay = Episode(game, pool=pool, seat=seat, seed=17, opponent=result.observation.opponent)
            for action in played:
                replay.step({seat: action})
            assert replay.done and result.observation.round == make_game(game).num_rounds
            assert set(result.observation.signals) == {"collusion", "externality", "exploitation"}
            assert result.reward == pytest.approx(replay.reward())
            assert result.observation.episode["sepo_reward"] == pytest.approx(replay.reward())
            state = env.state()
            assert (state.game, state.pool, state.step_count) == (game, pool, len(played))


def test_exploit_reward_and_unparsed_text(server):
    with SEPOEnvClient(base_url=server).sync() as env:
        result = env.reset(game="ipd", pool="exploit", opponent="always_defect", seed=0)
        result = env.step(SEPOAction(action="I would rather not say."))
        assert result.observation.error == "the last line is not a legal action; end with one of: COOPERATE, DEFECT"
        assert result.observation.round == 0 and not result.done  # the game did not move
        while not result.done:
            result = env.step(SEPOAction(action="COOPERATE"))
        lam = make_game("ipd").default_lambdas
        assert result.reward == pytest.approx(-(lam.e * 5.0 + lam.x / 6))
        assert result.observation.signals == {"collusion": 0.0, "externality": pytest.approx(1 / 6),
                                              "exploitation": 5.0}
