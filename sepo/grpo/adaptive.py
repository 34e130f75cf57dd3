"""The adaptive exact exploiter: an exploit-pool member that plays the exact best response to the current policy.

A fixed exploit pool cannot push a policy to equilibrium: the best response to a fixed mix of opponents is
itself exploitable. An exploiter that best-responds to the *current* policy can: the exploit-pool reward
against it, signed, is minus the policy's exploit figure (in expectation), and maximising it is
exploitability descent (Lockhart et al., 2019).

Every game that declares an exact analysis (`GameSpec.exact`, the protocol of `envs.tabular`) has an
`ExploiterOracle` (`oracle`, a `TabularOracle` over that analysis): `measure` reads the current policy as a table
from the trainer's model (the legal actions scored at every decision state on the training prompts,
`sepo.eval.exact.scored_policy`), and `fit` returns the exact best response to that table as the response a
strategy plays, with the policy's exact figures (`exploitability`, the analysis's exploit figure: NashConv / 2
for a zero-sum card game, e* for a repeated game, and any extra figures it declares, such as a game value). The cost of
a refresh is one scoring pass over the states, bounded by the analysis's `check_size` (`envs.tabular.MAX_STATES`
prompts).

The member is a training device: evaluation J uses the fixed default pools, and the exploiter's own
figures (the policy's exact figures at each refresh) are logged beside them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from envs.base import Strategy
from envs.tabular import exact_games
from sepo.eval.exact import require, scored_policy
from sepo.pools import PoolMember, Pools

ADAPTIVE_NAME = "best_response_to_current"

Table = dict[str, Any]


class ExploiterOracle(Protocol):
    """The hook a game implements to supply an exact (or approximate) best-response exploiter."""

    def measure(self, backend: Any, renderer: Any, game_params: Mapping[str, Any] | None, seat: int) -> Table:
        """The current policy as a table, read from the model through `backend` on the training prompts."""

    def fit(self, policy: Table, game_params: Mapping[str, Any] | None) -> tuple[Table, dict[str, float]]:
        """The best response to `policy` (what `strategy` plays) and the policy's exact figures."""

    def strategy(self, response: Table) -> Strategy:
        """A fresh strategy that plays `response`."""

    def check(self, game_params: Mapping[str, Any] | None) -> None:
        """Raise ValueError when the game under `game_params` is too large for an exact, cheap refresh."""


@dataclass(frozen=True)
class TabularOracle:
    """The exact oracle of a game with a tabular analysis (`envs.tabular`): the best response to the scored table
    (a zero-sum game: in both positions; a repeated game: the opponent's advantage-maximising reply at each
    history)."""

    game: str

    def measure(self, backend: Any, renderer: Any, game_params: Mapping[str, Any] | None, seat: int) -> Table:
        return scored_policy(backend, renderer, self.game, game_params, seat)

    def fit(self, policy: Table, game_params: Mapping[str, Any] | None) -> tuple[Table, dict[str, float]]:
        tabular = require(self.game)
        response = tabular.best_response(policy, game_params)
        return response.moves, {"exploitability": response.value, **tabular.extra_figures(policy, game_params)}

    def strategy(self, response: Table) -> Strategy:
        return require(self.game).strategy(response)

    def check(self, game_params: Mapping[str, Any] | None) -> None:
        require(self.game).check_size(game_params)


def oracle(game: str) -> ExploiterOracle:
    """`game`'s exploiter oracle: its exact analysis's (a ValueError when it declares none)."""
    require(game)
    return TabularOracle(game)


def check_adaptive(games: list[str], game_params: Mapping[str, Any]) -> None:
    """The adaptive exploiter needs one game with an exact oracle, small enough for its refresh (the oracle's
    `check`)."""
    if len(games) != 1 or games[0] not in exact_games():
        raise ValueError(f"adaptive_exploiter needs one game with an exact best response "
                         f"({', '.join(exact_games())}); games is {games}")
    oracle(games[0]).check(game_params.get(games[0], {}))


@dataclass
class AdaptiveExploiter:
    """The current best response (`table`: the oracle's answer) and when it was computed (None: not yet; the
    trainer refreshes before the first rollout and after a resume, since the response is not saved: it is a
    function of the weights). `game` names the game whose oracle it asks (`oracle`)."""

    game: str
    table: Table = field(default_factory=dict)
    refreshed_at: int | None = None

    @property
    def oracle(self) -> ExploiterOracle:
        return oracle(self.game)

    def factory(self) -> Strategy:
        """A fresh strategy playing the response as it is now (a snapshot: a later refresh does not change it)."""
        if not self.table:
            raise RuntimeError(f"{ADAPTIVE_NAME} was asked to play before its first refresh")
        return self.oracle.strategy(self.table)

    def due(self, step: int, every: int) -> bool:
        """Whether the table must be recomputed before the rollouts of optimizer step `step`."""
        return self.refreshed_at is None or step - self.refreshed_at >= every

    def refresh(self, policy: Table, step: int, game_params: Mapping[str, Any] | None = None) -> dict[str, float]:
        """Set the response to the exact best response to `policy`; returns the policy's exact figures at this
        refresh (`TabularOracle.fit`)."""
        self.table, figures = self.oracle.fit(policy, game_params)
        self.refreshed_at = step
        return figures


def with_adaptive(pools: Pools, exploiter: AdaptiveExploiter) -> Pools:
    """`pools` with the adaptive exploiter added to the exploit pool (so pool_mix 'all' and probes include it)."""
    if ADAPTIVE_NAME in pools.registry:
        raise ValueError(f"{ADAPTIVE_NAME!r} is already a pool member of {pools.game!r}")
    member = PoolMember(name=ADAPTIVE_NAME, game=pools.game, pool="exploit", factory=exploiter.factory,
                        description="exact best response to the current policy", source={"kind": "adaptive"})
    members = {**pools.members, "exploit": (*pools.members["exploit"], ADAPTIVE_NAME)}
    return replace(pools, members=members, registry={**pools.registry, ADAPTIVE_NAME: member})
