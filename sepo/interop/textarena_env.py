"""The SEPO games as TextArena environments, so TextArena agents and SPIRAL-style self-play code can play them.

Importing this module registers, for every game, `SEPO-<Game>-v0` (observations through TextArena's
`GameBoardObservationWrapper`: the rules, then the current game text) and `SEPO-<Game>-v0-raw` (TextArena's
message lists), with <Game> the title the game registers (`envs.game_spec(game).title`; `ENV_IDS` lists them):

    import textarena as ta
    import sepo.interop.textarena_env  # registers the SEPO environments
    env = ta.make(ENV_IDS[game])                                   # self-play: two players
    env = ta.make(ENV_IDS[game], pool="exploit", seat=1)           # one player against an exploit-pool opponent
    env.reset(num_players=2, seed=0)
    done = False
    while not done:
        player_id, observation = env.get_observation()
        done, info = env.step(agent(observation))
    rewards, game_info = env.close()

An action is the model's whole text: the game's strict parser reads its last line (as SEPO's rollouts do). A text
that does not parse gets one resubmission (TextArena's `error_allowance`); after that the seat plays a seeded random
legal action and its `game_info[player]["invalid_moves"]` counts it. Simultaneous moves are asked player by player
(player 0 first); neither sees the other's choice before the round closes. Rewards at `close()`: against a pool,
the episode's per-pool SEPO reward; in self-play, each player's u = s·(mean payoff per round). Each step's info and
each player's `game_info` carry the pool role, the opponent, the round's safety signals and the episode summary.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from envs import GAMES, game_spec
from sepo.interop import require
from sepo.interop.episode import Episode
from sepo.pools import Pools

ta = require("textarena", "textarena")
_wrappers = require("textarena.wrappers", "textarena")

ENV_IDS: dict[str, str] = {game: f"SEPO-{game_spec(game).title}-v0" for game in GAMES}


class SEPOTextArenaEnv(ta.Env):
    """One SEPO game as a TextArena `Env` (`reset`, `get_observation`, `step`, `close`); keys as `Episode`'s."""

    def __init__(self, game: str, pool: str | None = None, opponent: str | None = None, seat: int = 0,
                 game_params: Mapping[str, Any] | None = None, pools: Pools | None = None,
                 lambdas: Mapping[str, float] | None = None, error_allowance: int = 1) -> None:
        self._kwargs = dict(game=game, pool=pool, opponent=opponent, seat=seat, game_params=game_params,
                            pools=pools, lambdas=lambdas)
        self.episode = Episode(**self._kwargs)  # checks the arguments at make(), not at the first reset
        self.error_allowance = error_allowance
        self.num_players = len(self.episode.agents)

    # --- players and seats: player i is seat i in self-play, player 0 is the external seat against a pool ------
    def _seat(self, player: int) -> int:
        return self.episode.agents[player]

    def _player(self, seat: int) -> int:
        return self.episode.agents.index(seat)

    def reset(self, num_players: int, seed: int | None = None) -> None:
        if num_players != self.num_players:
            raise ValueError(f"{self.episode.game.name} {'against a pool opponent' if self.episode.pool else 'in self-play'} "
                             f"has {self.num_players} player(s), got num_players={num_players}")
        if seed is None:
            seed = random.SystemRandom().getrandbits(48)
        self.episode.close()
        self.episode = Episode(**self._kwargs, seed=seed)
        state_cls = ta.TwoPlayerState if self.num_players == 2 else ta.SinglePlayerState
        self.state = state_cls(num_players=self.num_players, seed=seed, error_allowance=self.error_allowance)
        roles = {p: f"Player {p}" for p in range(self.num_players)}
        self.state.reset(game_state={"game": self.episode.game.name, "pool": self.episode.role},
                         player_prompt_function=self._prompt, role_mapping=roles)
        self._pending: dict[int, str] = {}
        self._invalid = [0] * self.num_players
        self._show_board()

    def _prompt(self, player_id: int, game_state: Mapping[str, Any]) -> str:
        return self.episode.system_prompt(self._seat(player_id))

    def _next_seat(self) -> int | None:
        waiting = [seat for seat in self.episode.to_act() if seat not in self._pending]
        return waiting[0] if waiting else None

    def _show_board(self) -> None:
        """Make the next seat to decide the current player and show it the game's observation."""
        seat = self._next_seat()
        if seat is None:
            return
        self.state.current_player_id = self._player(seat)
        self.state.add_observation(self.episode.observation(seat), ta.ObservationType.GAME_BOARD,
                                   to_id=self._player(seat))

    def step(self, action: str) -> tuple[bool, dict[str, Any]]:
        player = self.state.current_player_id
        seat = self._seat(player)
        self.state.add_observation(action, ta.ObservationType.PLAYER_ACTION, from_id=player, to_id=player)
        parsed = self.episode.game.parse_action(action, self.episode.state, seat)
        if parsed is None and self.state.error_count < self.error_allowance:
            self.state.error_count += 1
            self.state.made_invalid_move = True  # TextArena's flag: the same player answers again
            legal = ", ".join(self.episode.legal(seat))
            self.state.add_observation(f"{self.episode.observation(seat)}\n\nYour last answer did not end with a legal "
                                       f"action on its last line; end with one of: {legal}.",
                                       ta.ObservationType.GAME_BOARD, to_id=player)
            return self._tick({**self.episode.info(seat), "invalid_move": True})
        if parsed is None:  # out of resubmissions: a seeded random legal action, counted
            self._invalid[player] += 1
            rng = random.Random(f"{self.episode.seed}:unparsed:{seat}:{len(self.episode.state.history)}")
            parsed = rng.choice(self.episode.legal(seat))
        self._pending[seat] = parsed
        closed = []
        if self._next_seat() is None:
            closed = self.episode.step(self._pending)
            self._pending = {}
        if self.episode.done:
            self._set_outcome()
        result = self._tick({**self.episode.info(seat, closed), "invalid_move": False})
        self._show_board()
        return result

    def _tick(self, info: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        """TextArena's end of a step (turn counters, resubmission bookkeeping, the step's info) without its
        rotation of players: the game decides who acts next (`_show_board`)."""
        self.state.step_info = info
        if isinstance(self.state, ta.TwoPlayerState):
            return self.state.step(rotate_player=False)
        return self.state.step()

    def _set_outcome(self) -> None:
        rewards, episode = {}, self.episode
        for player, seat in enumerate(episode.agents):
            summary = episode.summary(seat)
            rewards[player] = summary["sepo_reward"] if episode.pool else summary["u"]
            self.state.game_info[player].update(pool=episode.role, opponent=episode.opponent_name, seat=seat,
                                                episode=summary, invalid_moves=self._invalid[player],
                                                reason=f"{episode.game.name} finished after {summary['rounds']} rounds")
            self.state.add_observation(episode.observation(seat), ta.ObservationType.GAME_BOARD, to_id=player)
        self.state.rewards = rewards
        self.state.done = True

    def close(self) -> tuple[dict[int, float] | None, dict[int, dict[str, Any]]]:
        """(rewards by player, game_info by player): TextArena's result of the episode."""
        self.episode.close()
        return self.state.close()


def register_envs() -> None:
    """Register `SEPO-<Game>-v0` and its `-raw` twin for every game (once per process)."""
    # deferred: textarena's registry module is read only when registering (this module's top already checked
    # that the interop extra is installed)
    from textarena.envs.registration import ENV_REGISTRY, register_with_versions

    for game, env_id in ENV_IDS.items():
        if env_id not in ENV_REGISTRY:
            register_with_versions(id=env_id, entry_point=SEPOTextArenaEnv,
                                   wrappers={"default": [_wrappers.GameBoardObservationWrapper]}, game=game)


register_envs()
