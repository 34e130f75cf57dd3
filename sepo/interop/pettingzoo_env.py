"""The SEPO games as PettingZoo environments: a simultaneous-move game (`Game.simultaneous`) as `ParallelEnv`, a
game played one seat at a time as `AECEnv`.

Agents are "player_0" and "player_1" (self-play), or only "player_<seat>" when a pool opponent plays the other
seat (`pool=`, optionally `opponent=`). Each agent observes a dict: "text", the game's text observation (the user
message an LLM seat gets; the rules are `system_prompt(agent)` and the reset info's "system_prompt"), and
"action_mask", 1 on the legal entries of `Game.action_set`; actions are `Discrete(len(action_set))` indices into
that list. Rewards are the round's raw payoff when a round closes (0 otherwise), or with `reward="sepo"` the
episode's per-pool SEPO reward on its last step (pool episodes only). Every info dict carries the pool role,
the opponent, the legal actions, the safety signals of the round that just closed and the episode summary
(`Episode.info`).
"""

from __future__ import annotations

import random
import string
from collections.abc import Mapping
from typing import Any

import numpy as np

from envs import GAMES, RoundResult, make_game
from sepo.interop import require
from sepo.interop.episode import Episode
from sepo.pools import Pools

pettingzoo = require("pettingzoo", "pettingzoo")
spaces = require("gymnasium.spaces", "gymnasium")

REWARDS = ("payoff", "sepo")
CHARSET = string.printable  # every character the games' text observations use (checked by the tests)


def agent_name(seat: int) -> str:
    return f"player_{seat}"


class _SEPOEnv:
    """What both PettingZoo forms share: the episode, its spaces, observations, rewards and infos."""

    def __init__(self, game: str, *, pool: str | None = None, opponent: str | None = None, seat: int = 0,
                 game_params: Mapping[str, Any] | None = None, pools: Pools | None = None,
                 lambdas: Mapping[str, float] | None = None, reward: str = "payoff",
                 render_mode: str | None = None) -> None:
        if reward not in REWARDS:
            raise ValueError(f"unknown reward {reward!r}; choose one of: {', '.join(REWARDS)}")
        if reward == "sepo" and pool is None:
            raise ValueError("reward='sepo' needs a pool opponent (pool=...): a self-play episode has no pool role")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"unknown render_mode {render_mode!r}; the SEPO games render as 'ansi' text")
        self._kwargs = dict(game=game, pool=pool, opponent=opponent, seat=seat, game_params=game_params,
                            pools=pools, lambdas=lambdas)
        self.reward_kind, self.render_mode = reward, render_mode
        self.episode = Episode(**self._kwargs)  # validates the arguments now, not at the first reset
        self.actions = self.episode.game.action_set
        self.index = {action: i for i, action in enumerate(self.actions)}
        self.possible_agents = [agent_name(seat) for seat in self.episode.agents]
        game_ = self.episode.game
        max_length = 4096 + 256 * game_.num_rounds * game_.max_decisions_per_round
        self._observation_space = spaces.Dict({
            "text": spaces.Text(max_length, charset=CHARSET),
            "action_mask": spaces.Box(0, 1, (len(self.actions),), dtype=np.int8),
        })
        self._action_space = spaces.Discrete(len(self.actions))
        self._seeds = random.Random()
        self.metadata = {"name": f"sepo_{game}_v0", "render_modes": ["ansi"], "is_parallelizable": game_.simultaneous}

    def observation_space(self, agent: str) -> Any:
        return self._observation_space

    def action_space(self, agent: str) -> Any:
        return self._action_space

    def system_prompt(self, agent: str) -> str:
        """The game's rules for `agent`'s seat (the system message of an LLM seat)."""
        return self.episode.system_prompt(self._seat(agent))

    def _seat(self, agent: str) -> int:
        return int(agent.rsplit("_", 1)[1])

    def _new_episode(self, seed: int | None) -> None:
        if seed is not None:
            self._seeds.seed(seed)
        self.episode.close()
        self.episode = Episode(**self._kwargs, seed=self._seeds.getrandbits(48))

    def _observe(self, agent: str) -> dict[str, Any]:
        seat = self._seat(agent)
        mask = np.zeros(len(self.actions), dtype=np.int8)
        for action in self.episode.legal(seat):
            mask[self.index[action]] = 1
        return {"text": self.episode.observation(seat), "action_mask": mask}

    def _action(self, agent: str, index: Any) -> str:
        seat = self._seat(agent)
        legal = self.episode.legal(seat)
        if not isinstance(index, int | np.integer) or not 0 <= int(index) < len(self.actions):
            raise ValueError(f"{agent}: action must be an index in [0, {len(self.actions)}), got {index!r}")
        action = self.actions[int(index)]
        if action not in legal:
            raise ValueError(f"{agent}: action {int(index)} ({action}) is not legal now; legal: "
                             f"{[self.index[a] for a in legal]} ({', '.join(legal)})")
        return action

    def _rewards(self, closed: list[RoundResult]) -> dict[str, float]:
        out = {}
        for seat in self.episode.agents:
            if self.reward_kind == "payoff":
                out[agent_name(seat)] = float(sum(r.payoffs[seat] for r in closed))
            else:
                out[agent_name(seat)] = self.episode.reward(seat) if self.episode.done else 0.0
        return out

    def _info(self, agent: str, closed: list[RoundResult] | None = None) -> dict[str, Any]:
        return self.episode.info(self._seat(agent), closed)

    def render(self) -> str | None:
        """The text of the episode so far ("ansi"): every finished round's actions and payoffs."""
        if self.render_mode is None:
            return None
        lines = [f"{self.episode.game.name}: round {self.episode.state.round} of {self.episode.game.num_rounds}, "
                 f"pool {self.episode.role}"]
        lines += [f"round {r.index + 1}: {dict(r.record).get('actions')} payoffs {list(r.payoffs)}"
                  for r in self.episode.state.history]
        return "\n".join(lines)

    def close(self) -> None:
        self.episode.close()


class SEPOParallelEnv(_SEPOEnv, pettingzoo.ParallelEnv):
    """A simultaneous-move game: every live agent acts at every step (one round)."""

    def __init__(self, game: str, **kwargs: Any) -> None:
        if not make_game(game).simultaneous:
            raise ValueError(f"{game!r} is played one seat at a time: use aec_env({game!r})")
        super().__init__(game, **kwargs)
        self.agents: list[str] = []

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self._new_episode(seed)
        self.agents = list(self.possible_agents)
        infos = {a: {**self._info(a), "system_prompt": self.system_prompt(a)} for a in self.agents}
        return {a: self._observe(a) for a in self.agents}, infos

    def step(self, actions: Mapping[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if sorted(actions) != sorted(self.agents):
            raise ValueError(f"every live agent acts at each step: expected {self.agents}, got {sorted(actions)}")
        chosen = {self._seat(a): self._action(a, index) for a, index in actions.items()}
        closed = self.episode.step(chosen)
        agents = list(self.agents)
        done = self.episode.done
        obs = {a: self._observe(a) for a in agents}
        rewards = self._rewards(closed)
        infos = {a: self._info(a, closed) for a in agents}
        terminations = {a: done for a in agents}
        truncations = {a: False for a in agents}
        if done:
            self.agents = []
        return obs, rewards, terminations, truncations, infos

    def state(self) -> Any:
        raise NotImplementedError("the SEPO games have private information; there is no global state to show")


class SEPOAECEnv(_SEPOEnv, pettingzoo.AECEnv):
    """A game played one seat at a time: the seat to act is `agent_selection`; a pool opponent's decisions are
    played inside `step`."""

    def __init__(self, game: str, **kwargs: Any) -> None:
        if make_game(game).simultaneous:
            raise ValueError(f"{game!r} is a simultaneous-move game: use parallel_env({game!r})")
        super().__init__(game, **kwargs)
        self.agents = []

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._new_episode(seed)
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {**self._info(a), "system_prompt": self.system_prompt(a)} for a in self.agents}
        self.agent_selection = agent_name(self.episode.to_act()[0])

    def observe(self, agent: str) -> dict[str, Any]:
        return self._observe(agent)

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        closed = self.episode.step({self._seat(agent): self._action(agent, action)})
        self._cumulative_rewards[agent] = 0.0
        self.rewards = self._rewards(closed)
        self.infos = {a: self._info(a, closed) for a in self.agents}
        if self.episode.done:
            self.terminations = {a: True for a in self.agents}
        else:
            self.agent_selection = agent_name(self.episode.to_act()[0])
        self._accumulate_rewards()
        if self.episode.done:  # hand every agent its final observation and reward, then remove them in turn
            self.agent_selection = self.agents[0]


def parallel_env(game: str, **kwargs: Any) -> SEPOParallelEnv:
    """A PettingZoo ParallelEnv of simultaneous-move `game` (see SEPOParallelEnv and `_SEPOEnv` for the keys)."""
    return SEPOParallelEnv(game, **kwargs)


def aec_env(game: str, **kwargs: Any) -> SEPOAECEnv:
    """A PettingZoo AECEnv of sequential `game` (see SEPOAECEnv and `_SEPOEnv` for the keys)."""
    return SEPOAECEnv(game, **kwargs)


def env(game: str, **kwargs: Any) -> SEPOParallelEnv | SEPOAECEnv:
    """The PettingZoo form that fits `game`: ParallelEnv for simultaneous moves, AECEnv for one seat at a time."""
    if game not in GAMES:
        raise ValueError(f"unknown game {game!r}; choose one of: {', '.join(GAMES)}")
    return parallel_env(game, **kwargs) if make_game(game).simultaneous else aec_env(game, **kwargs)
