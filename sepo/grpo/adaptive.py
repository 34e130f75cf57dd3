"""The adaptive exact exploiter: an exploit-pool member that plays the exact best response to the current policy.

A fixed exploit pool cannot push a policy to equilibrium: the best response to a fixed mix of opponents is
itself exploitable. An exploiter that best-responds to the *current* policy can: the exploit-pool reward
against it, signed, is minus the policy's exploit figure (in expectation), and maximising it is
exploitability descent (Lockhart et al., 2019).

Each game with an exact analysis supplies an `ExploiterOracle` (`ORACLES`): `measure` reads the current
policy as a table from the trainer's model (scored actions on the training prompts), and `fit` returns the
exact best response to that table as a strategy factory, with the policy's exact figures.

- Kuhn poker: the table is P(action | information set) at the 12 information sets
  (`sepo.eval.kuhn.scored_policy`); the best response in both positions (`envs.kuhn_exact`); figures:
  exploitability (NashConv / 2) and game value.
- IPD: the table is P(COOPERATE | joint history) at every joint history (`sepo.eval.ipd.scored_policy`); the
  opponent's best response by backward induction, maximising its mean per-round advantage (`envs.ipd_exact`);
  figure: exploitability = e*. Its cost grows as 4^(T−1) prompts per refresh, so T is bounded
  (`IPD_MAX_ROUNDS`); the compact prompt keeps each prompt short.
- Single-issue negotiation: the table is P(demand | joint history of demands) at every joint history
  (`sepo.eval.negotiation.scored_policy`); the opponent's advantage-maximising best response by the same
  backward induction (`envs.negotiation_exact`); figure: exploitability = e*. With K legal demands a refresh
  scores 1 + K² + ... + K^(2(T−1)) prompts, bounded by `sepo.eval.negotiation.MAX_HISTORIES`.

The member is a training device: evaluation J uses the fixed default pools, and the exploiter's own
figures (the policy's exact figures at each refresh) are logged beside them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from envs import make_game
from envs.base import Strategy
from envs.ipd_exact import Payoffs, PlaysBestResponse
from envs.ipd_exact import best_response as ipd_best_response
from envs.kuhn_exact import best_response, exploitability, game_value
from envs.negotiation_exact import PlaysBestResponse as PlaysNegotiationResponse
from envs.negotiation_exact import best_response as negotiation_best_response
from envs.strategies.kuhn import PlaysTable
from sepo.eval import ipd as ipd_eval
from sepo.eval import kuhn as kuhn_eval
from sepo.eval import negotiation as negotiation_eval
from sepo.eval.ipd import MAX_ROUNDS as IPD_MAX_ROUNDS
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


class KuhnOracle:
    """Kuhn poker: the best response in both positions to the 12-information-set table."""

    def measure(self, backend: Any, renderer: Any, game_params: Mapping[str, Any] | None, seat: int) -> Table:
        return kuhn_eval.scored_policy(backend, renderer, game_params, seat)

    def fit(self, policy: Table, game_params: Mapping[str, Any] | None) -> tuple[Table, dict[str, float]]:
        response = best_response(policy, 0) | best_response(policy, 1)
        return response, {"exploitability": exploitability(policy), "game_value": game_value(policy, policy)}

    def strategy(self, response: Table) -> Strategy:
        return PlaysTable(response)

    def check(self, game_params: Mapping[str, Any] | None) -> None:
        """Every Kuhn game has 12 information sets: nothing to bound."""


class IPDOracle:
    """IPD: the opponent's advantage-maximising best response to the joint-history table; exploitability = e*."""

    def measure(self, backend: Any, renderer: Any, game_params: Mapping[str, Any] | None, seat: int) -> Table:
        return ipd_eval.scored_policy(backend, renderer, game_params, seat)

    def fit(self, policy: Table, game_params: Mapping[str, Any] | None) -> tuple[Table, dict[str, float]]:
        game = make_game("ipd", **dict(game_params or {}))
        response = ipd_best_response(policy, game.num_rounds, Payoffs.of(game))
        return dict(response.moves), {"exploitability": response.value}

    def strategy(self, response: Table) -> Strategy:
        return PlaysBestResponse(response)

    def check(self, game_params: Mapping[str, Any] | None) -> None:
        rounds = make_game("ipd", **dict(game_params or {})).num_rounds
        if rounds > IPD_MAX_ROUNDS:
            raise ValueError(f"adaptive_exploiter in ipd scores every joint history (4^(T-1) + ... + 1 prompts per "
                             f"refresh): num_rounds must be <= {IPD_MAX_ROUNDS}, got {rounds}")


class NegotiationOracle:
    """Single-issue negotiation: the opponent's advantage-maximising best response to the table over joint
    histories of demands; exploitability = e*."""

    def measure(self, backend: Any, renderer: Any, game_params: Mapping[str, Any] | None, seat: int) -> Table:
        return negotiation_eval.scored_policy(backend, renderer, game_params, seat)

    def fit(self, policy: Table, game_params: Mapping[str, Any] | None) -> tuple[Table, dict[str, float]]:
        response = negotiation_best_response(policy, negotiation_eval.game_of(game_params))
        return dict(response.moves), {"exploitability": response.value}

    def strategy(self, response: Table) -> Strategy:
        return PlaysNegotiationResponse(response)

    def check(self, game_params: Mapping[str, Any] | None) -> None:
        negotiation_eval.check_size(negotiation_eval.game_of(game_params))


ORACLES: dict[str, ExploiterOracle] = {"kuhn": KuhnOracle(), "ipd": IPDOracle(), "negotiation": NegotiationOracle()}


def check_adaptive(games: list[str], game_params: Mapping[str, Any]) -> None:
    """The adaptive exploiter needs one game with an exact oracle, small enough for its refresh (the oracle's
    `check`: IPD T <= IPD_MAX_ROUNDS, negotiation at most MAX_HISTORIES joint histories)."""
    if len(games) != 1 or games[0] not in ORACLES:
        raise ValueError(f"adaptive_exploiter needs one game with an exact best response ({', '.join(ORACLES)}); "
                         f"games is {games}")
    ORACLES[games[0]].check(game_params.get(games[0], {}))


@dataclass
class AdaptiveExploiter:
    """The current best response (`table`: the oracle's answer) and when it was computed (None: not yet; the
    trainer refreshes before the first rollout and after a resume, since the response is not saved: it is a
    function of the weights). `game` names the oracle (`ORACLES`)."""

    game: str = "kuhn"
    table: Table = field(default_factory=dict)
    refreshed_at: int | None = None

    @property
    def oracle(self) -> ExploiterOracle:
        return ORACLES[self.game]

    def factory(self) -> Strategy:
        """A fresh strategy playing the response as it is now (a snapshot: a later refresh does not change it)."""
        if not self.table:
            raise RuntimeError(f"{ADAPTIVE_NAME} was asked to play before its first refresh")
        return self.oracle.strategy(self.table)

    def due(self, step: int, every: int) -> bool:
        """Whether the table must be recomputed before the rollouts of optimizer step `step`."""
        return self.refreshed_at is None or step - self.refreshed_at >= every

    def refresh(self, policy: Table, step: int, game_params: Mapping[str, Any] | None = None) -> dict[str, float]:
        """Set the response to the exact best response to `policy` (Kuhn: in both positions); returns the
        policy's exact figures at this refresh (Kuhn: exploitability and game value; IPD, negotiation: e*)."""
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
