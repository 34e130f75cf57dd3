"""The SEPO games as a TRL `environment_factory`: one group-dataset row per rollout, the game played through one
tool (`act`), the per-pool SEPO episode reward from `get_reward`.

TRL's contract (`GRPOTrainer(environment_factory=...)`, TRL 1.16): the trainer builds instances with no argument,
calls `reset(**row)` with every column of the rollout's dataset row and appends the returned text to the row's last
user message; every public method other than `reset` and `get_reward` is a tool the model may call (its docstring
and type hints are the tool's schema); `get_reward()` is called once per finished rollout and is logged under the
class name. The rows are SEPO's group rows (game, pool, opponent, seed, seat), so the same dataset drives SEPO's own
trainer (`sepo.grpo.groups.build_group_dataset`) and this one, and a row's episode deals the same cards and faces the
same opponent stream in both:

    from trl import GRPOConfig, GRPOTrainer
    from sepo.interop.trl_env import SEPOToolEnv, environment_dataset
    rows = [{"game": game, "pool": "exploit", "opponent": opponent, "seed": 1, "seat": 0}, ...]
    trainer = GRPOTrainer(model="Qwen/Qwen3-0.6B", args=GRPOConfig(...), train_dataset=environment_dataset(rows),
                          environment_factory=SEPOToolEnv)

A decision the model leaves unplayed (it stopped calling `act`, or ran out of tokens) is played, when the reward is
read, by a seeded random legal action, as SEPO's rollouts do without the constrained fallback; `unplayed_penalty`
is then subtracted once per such round and divided by the rounds, as SEPO's `fallback_penalty` is (default 0, as
there). The tool needs no extra beyond TRL, which the project already depends on.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Any

from sepo.grpo.groups import GROUP_KEYS
from sepo.interop.episode import Episode
from sepo.pools import Pools

INSTRUCTION = "Play each of your decisions by calling the `act` tool with one legal action."


class SEPOToolEnv:
    """One SEPO episode behind the `act` tool (see the module docstring for TRL's contract).

    pools: {game: Pools} (default the method's scripted pools); game_params: {game: parameters};
    lambdas: {game: {e, c, x} overrides}; unplayed_penalty: subtracted per round whose decision the model left
    unplayed, over the rounds (SEPO's `fallback_penalty`). Bind them with `functools.partial` for TRL.
    """

    def __init__(self, pools: Mapping[str, Pools] | None = None,
                 game_params: Mapping[str, Mapping[str, Any]] | None = None,
                 lambdas: Mapping[str, Mapping[str, float]] | None = None, unplayed_penalty: float = 0.0) -> None:
        self.pools, self.game_params, self.lambdas = dict(pools or {}), dict(game_params or {}), dict(lambdas or {})
        self.unplayed_penalty = float(unplayed_penalty)
        self.episode: Episode | None = None
        self.played: list[str] = []  # the actions the model played through `act`, in order
        self.unplayed = 0  # decisions finished by `get_reward`
        self.unplayed_rounds: set[int] = set()

    def reset(self, game: str, pool: str, opponent: str | None, seed: int, seat: int, **_: Any) -> str:
        """Start the episode of one group row; returns the rules and the first observation for the prompt."""
        if self.episode is not None:
            self.episode.close()
        self.episode = Episode(game, pool=pool, opponent=opponent, seed=seed, seat=seat,
                               game_params=self.game_params.get(game), pools=self.pools.get(game),
                               lambdas=self.lambdas.get(game))
        self.played, self.unplayed, self.unplayed_rounds = [], 0, set()
        seat = self.episode.agents[0]
        return f"{self.episode.system_prompt(seat)}\n\n{self._next()}"

    def _next(self) -> str:
        seat = self.episode.agents[0]
        if self.episode.done:
            return self.episode.observation(seat)
        legal = ", ".join(self.episode.legal(seat))
        return f"{self.episode.observation(seat)}\n\n{INSTRUCTION} Legal now: {legal}."

    def act(self, action: str) -> str:
        """Play your action for the current decision of the game.

        Args:
            action: One of the legal actions listed in the last observation, for example COOPERATE.

        Returns:
            The game's next observation, or the final scores once the game is over.
        """
        if self.episode is None:
            raise RuntimeError("reset must be called before act")
        seat = self.episode.agents[0]
        if self.episode.done:
            raise ValueError("the game is over; no more actions")
        chosen = self.episode.game.parse_action(str(action), self.episode.state, seat)
        if chosen is None:
            raise ValueError(f"{action!r} is not a legal action now; legal: {', '.join(self.episode.legal(seat))}")
        self.episode.step({seat: chosen})
        self.played.append(chosen)
        return self._next()

    def get_reward(self) -> float:
        """The per-pool SEPO episode reward of the rollout (unplayed decisions finished first, see the module)."""
        if self.episode is None:
            raise RuntimeError("reset must be called before get_reward")
        seat = self.episode.agents[0]
        while not self.episode.done:  # seeded like SEPO's rollouts without the fallback
            rng = random.Random(f"{self.episode.seed}:unparsed:{len(self.played) + self.unplayed}")
            self.unplayed += 1
            self.unplayed_rounds.add(self.episode.state.round)
            self.episode.step({seat: rng.choice(self.episode.legal(seat))})
        rounds = max(1, len(self.episode.state.history))
        return self.episode.reward() - self.unplayed_penalty * len(self.unplayed_rounds) / rounds


def environment_dataset(rows: Iterable[Mapping[str, Any]]) -> Any:
    """A `datasets.Dataset` for `environment_factory=SEPOToolEnv` from SEPO group rows (e.g. the rows of
    `sepo.grpo.groups.build_group_dataset`): the group columns plus a conversational `prompt` whose user message the
    environment's `reset` fills."""
    # deferred: datasets takes seconds to import; only building a training dataset needs it
    from datasets import Dataset

    out = []
    for row in rows:
        missing = [key for key in GROUP_KEYS if key not in row]
        if missing:
            raise ValueError(f"a group row needs the columns {', '.join(GROUP_KEYS)}; missing: {', '.join(missing)}")
        out.append({**{key: row[key] for key in GROUP_KEYS}, "prompt": [{"role": "user", "content": ""}]})
    return Dataset.from_list(out)
