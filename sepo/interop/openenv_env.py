"""The SEPO games as an OpenEnv environment: an `Environment` served over HTTP and WebSocket by OpenEnv's app
factory (`create_app`), and the `EnvClient` that plays it.

One session plays one episode at a time against a pool opponent. `reset` takes the columns of SEPO's group
dataset, `game`, `pool`, `opponent`, `seed`, `seat` (each optional: the first registered game, the training pool,
a member drawn with the seed, seat 0), so a trainer can replay any group row over the network. `step` takes the
model's text (`action`): the game's strict parser reads its last line, as SEPO's rollouts do; a text that does
not parse leaves the game where it was and the observation's `error` lists the legal actions. The observation
carries the game text, the rules, the legal actions, the pool role, the opponent, the safety signals of the round
that closed, the episode summary and, on the last step, the SEPO per-pool reward as `reward` (0 before).

    python -m sepo.interop.openenv_env --port 8000         # serve on 127.0.0.1:8000

    from sepo.interop.openenv_env import SEPOAction, SEPOEnvClient
    with SEPOEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
        result = env.reset(game=game, pool="exploit", seed=3)
        while not result.done:
            result = env.step(SEPOAction(action=result.observation.legal_actions[0]))
        print(result.reward, result.observation.episode)
"""

from __future__ import annotations

import argparse
import sys
import uuid
from typing import Any

from pydantic import Field

from sepo.checks import first_games
from sepo.interop import require
from sepo.interop.episode import Episode

_types = require("openenv.core.env_server.types", "openenv-core")
_interfaces = require("openenv.core.env_server.interfaces", "openenv-core")
_client = require("openenv.core.env_client", "openenv-core")
_client_types = require("openenv.core.client_types", "openenv-core")

ENV_NAME = "sepo_games"
DEFAULTS: dict[str, Any] = {"game": first_games(1)[0], "pool": "training", "opponent": None, "seat": 0}


class SEPOAction(_types.Action):
    """The agent's text for its decision; the last line is read as the action."""

    action: str = Field(..., description="the model's answer; its last line must be a legal action")


class SEPOObservation(_types.Observation):
    """What the agent sees after `reset` or `step` (reward and done are OpenEnv's own fields)."""

    text: str = Field(default="", description="the game's observation for the agent's seat")
    system_prompt: str = Field(default="", description="the game's rules for the agent's seat")
    legal_actions: list[str] = Field(default_factory=list)
    game: str = ""
    pool: str = ""
    opponent: str = ""
    seat: int = 0
    round: int = 0
    signals: dict[str, float | None] | None = Field(default=None, description="safety signals of the closed round")
    episode: dict[str, Any] = Field(default_factory=dict, description="u, e, c, x, payoffs, rounds, sepo_reward")
    error: str | None = Field(default=None, description="why the last action was not played")


class SEPOEnvironment(_interfaces.Environment):
    """One SEPO episode per session against a pool opponent (sessions share nothing)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self.episode: Episode | None = None
        self._state = _types.State(episode_id=None, step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, game: str | None = None,
              pool: str | None = None, opponent: str | None = None, seat: int | None = None,
              **_: Any) -> SEPOObservation:
        """Start an episode of the group row (game, pool, opponent, seed, seat); unset keys take `DEFAULTS`."""
        if self.episode is not None:
            self.episode.close()
        row = {"game": game, "pool": pool, "opponent": opponent, "seat": seat}
        row = {key: DEFAULTS[key] if value is None else value for key, value in row.items()}
        self.episode = Episode(**row, seed=0 if seed is None else seed)
        row["opponent"] = self.episode.opponent_name  # the member drawn with the seed when none was named
        self._state = _types.State(episode_id=episode_id or str(uuid.uuid4()), step_count=0, **row,
                                   seed=self.episode.seed)
        return self._observe([])

    def step(self, action: SEPOAction, timeout_s: float | None = None, **_: Any) -> SEPOObservation:
        """Play the agent's decision (and the opponent's moves up to the agent's next one)."""
        if self.episode is None:
            raise RuntimeError("call reset before step")
        if self.episode.done:
            return self._observe([], error="the episode is over; call reset")
        seat = self.episode.agents[0]
        chosen = self.episode.game.parse_action(action.action, self.episode.state, seat)
        if chosen is None:
            legal = ", ".join(self.episode.legal(seat))
            return self._observe([], error=f"the last line is not a legal action; end with one of: {legal}")
        self._state.step_count += 1
        return self._observe(self.episode.step({seat: chosen}))

    def _observe(self, closed: list, error: str | None = None) -> SEPOObservation:
        episode = self.episode
        seat = episode.agents[0]
        info = episode.info(seat, closed)
        return SEPOObservation(
            text=episode.observation(seat), system_prompt=episode.system_prompt(seat),
            legal_actions=info["legal_actions"], game=info["game"], pool=info["pool"], opponent=info["opponent"],
            seat=seat, round=info["round"], signals=info["signals"], episode=info["episode"], error=error,
            done=episode.done, reward=episode.reward() if episode.done else 0.0,
        )

    @property
    def state(self) -> Any:
        return self._state

    def close(self) -> None:
        if self.episode is not None:
            self.episode.close()


class SEPOEnvClient(_client.EnvClient):
    """OpenEnv's client for `SEPOEnvironment` (async; `.sync()` for the synchronous wrapper)."""

    def _step_payload(self, action: SEPOAction) -> dict[str, Any]:
        return {"action": action.action}

    def _parse_result(self, payload: dict[str, Any]) -> Any:
        observation = SEPOObservation(**payload.get("observation", {}), done=payload.get("done", False),
                                      reward=payload.get("reward"))
        return _client_types.StepResult(observation=observation, reward=payload.get("reward"),
                                        done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> Any:
        return _types.State(**payload)


def create_app(max_concurrent_envs: int = 8) -> Any:
    """The FastAPI app OpenEnv's factory builds for `SEPOEnvironment` (HTTP /reset, /step, /state, /health and the
    WebSocket /ws the client uses)."""
    http_server = require("openenv.core.env_server.http_server", "openenv-core")
    return http_server.create_app(SEPOEnvironment, SEPOAction, SEPOObservation, env_name=ENV_NAME,
                                  max_concurrent_envs=max_concurrent_envs)


def serve(host: str = "127.0.0.1", port: int = 8000, max_concurrent_envs: int = 8) -> None:
    """Serve the environment with uvicorn until interrupted (127.0.0.1 by default: bind wider on purpose only)."""
    uvicorn = require("uvicorn", "uvicorn")
    uvicorn.run(create_app(max_concurrent_envs), host=host, port=port, log_level="warning")


def main(argv: list[str] | None = None) -> int:
    """`python -m sepo.interop.openenv_env [--host H] [--port P] [--max_concurrent_envs N]`."""
    parser = argparse.ArgumentParser(prog="python -m sepo.interop.openenv_env", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max_concurrent_envs", type=int, default=8)
    args = parser.parse_args(argv)
    if not 0 < args.port < 65536 or args.max_concurrent_envs < 1:
        parser.error("--port must be in 1..65535 and --max_concurrent_envs at least 1")
    serve(args.host, args.port, args.max_concurrent_envs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
