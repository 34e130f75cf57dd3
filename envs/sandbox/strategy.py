"""Sandboxed policies as `envs.base.Strategy` objects that `envs.base.act_all` asks together.

`SandboxedStrategy` is a drop-in opponent for the rollout engine, `play_episode` and the pools: `reset` and
`act` cross the pipe (the game as its name and parameters, the rng as its exact state, the view as a dict),
so a sandboxed copy of a strategy plays exactly as the strategy would in-process given the same rng (what it is
given is a keyed private copy of the harness's rng, see `SandboxedStrategy.reset`). Whatever comes back is
checked here: an action must be one of `view.legal_actions` (a str; anything else is an `invalid_action`
failure of this policy).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from envs.base import Game, Pipelined, Strategy, View
from envs.sandbox.config import PolicyError
from envs.sandbox.process import SandboxedPolicy
from envs.sandbox.rng import private_copy


class SandboxedStrategy(Strategy, Pipelined):
    """A code policy (act/reset class) playing from its own sandboxed process.

    `view_format` "dict" hands the policy `view.to_dict()`; "object" rebuilds an `envs.base.View`. The process
    starts with the first `reset` and is ended by `close()` (or when the object is collected).
    """

    def __init__(self, policy: SandboxedPolicy, name: str, view_format: str = "dict", description: str = "") -> None:
        if view_format not in ("dict", "object"):
            raise ValueError(f"view_format must be 'dict' or 'object', got {view_format!r}")
        self.policy, self.name, self.view_format, self.description = policy, name, view_format, description
        self._legal: tuple[str, ...] = ()

    def reset(self, game: Game, seat: int, rng: random.Random) -> None:
        """Start an episode. The policy gets a private rng in place of `rng` (`envs.sandbox.rng.private_copy`
        under the run's secret `SandboxConfig.rng_key`): the same key and episode give the same stream, but its
        state says nothing about the episode seed, the deal or the other seat's stream."""
        super().reset(game, seat, rng)
        state = private_copy(self.policy.config.rng_key, rng, "policy").getstate()
        self.policy.submit("reset_strategy", [game.name, game.params], seat, [state[0], list(state[1]), state[2]])

    def submit(self, view: View) -> None:
        """Send the act request for `view` (the reply is read by `collect`)."""
        self._legal = view.legal_actions
        self.policy.submit("act_strategy", view.to_dict(), self.view_format)

    def collect(self) -> str:
        """The action answering the last `submit`, checked against that view's legal actions."""
        action = self.policy.result()
        if not isinstance(action, str) or action not in self._legal:
            shown = repr(action)[:80]
            raise self.policy.failure("invalid_action", f"act returned {shown}, not one of {list(self._legal)[:12]}")
        return action

    def act(self, view: View) -> str:
        self.submit(view)
        return self.collect()

    def ask(self, method: str, argument: Any) -> Callable[[], Any]:
        """`act` is pipelined (`submit` now, `collect` later); any other method is called at once."""
        if method == "act":
            self.submit(argument)
            return self.collect
        value = getattr(self, method)(argument)
        return lambda: value

    def close(self) -> None:
        """End the policy process (the rollout that made this opponent is over)."""
        self.policy.close()


__all__ = ["PolicyError", "SandboxedStrategy"]
