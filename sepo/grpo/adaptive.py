"""The adaptive exact exploiter: an exploit-pool member that plays the exact best response to the current policy.

A fixed exploit pool cannot push a policy to equilibrium: the best response to a fixed mix of opponents is
itself exploitable. An exploiter that best-responds to the *current* policy can: the exploit-pool reward
against it, signed, is minus the policy's exploitability (in expectation), and maximising it is
exploitability descent. For Kuhn poker the best response is exact (`envs.kuhn_exact`), computed from the
policy's action probabilities at the 12 information sets as the evaluation scores them on the training
prompts (`sepo.eval.kuhn.scored_policy`).

The member is a training device: evaluation J uses the fixed default pools, and the exploiter's own
figures (the policy's exact exploitability and game value at each refresh) are logged beside them.

Other games: a game whose best response is not exact can supply an approximate exploiter through the same
hook, an `ExploiterOracle`: `fit(policy_probe) -> table or strategy factory`, called at each refresh with
whatever the trainer can measure of the current policy (scored actions at chosen states, or rollouts).
Only the Kuhn oracle exists today.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from envs.base import Strategy
from envs.kuhn_exact import best_response, exploitability, game_value
from envs.strategies.kuhn import PlaysTable
from sepo.pools import PoolMember, Pools

ADAPTIVE_NAME = "best_response_to_current"

Table = dict[str, dict[str, float]]


class ExploiterOracle(Protocol):
    """The hook another game implements to supply an (approximate) best-response exploiter."""

    def fit(self, policy: Any) -> Callable[[], Strategy]:
        """A factory of fresh exploiter strategies against `policy` (what the trainer measured of it)."""


@dataclass
class AdaptiveExploiter:
    """The current best-response table and when it was computed (None: not yet; the trainer refreshes before
    the first rollout and after a resume, since the table is not saved: it is a function of the weights)."""

    table: Table = field(default_factory=dict)
    refreshed_at: int | None = None

    def factory(self) -> Strategy:
        """A fresh strategy playing the table as it is now (a snapshot: a later refresh does not change it)."""
        if not self.table:
            raise RuntimeError(f"{ADAPTIVE_NAME} was asked to play before its first refresh")
        return PlaysTable(self.table)

    def due(self, step: int, every: int) -> bool:
        """Whether the table must be recomputed before the rollouts of optimizer step `step`."""
        return self.refreshed_at is None or step - self.refreshed_at >= every

    def refresh(self, policy: Table, step: int) -> dict[str, float]:
        """Set the table to the exact best response to `policy` in both positions; returns the policy's exact
        exploitability and game value (first mover's value in self-play) at this refresh."""
        self.table = best_response(policy, 0) | best_response(policy, 1)
        self.refreshed_at = step
        return {"exploitability": exploitability(policy), "game_value": game_value(policy, policy)}


def with_adaptive(pools: Pools, exploiter: AdaptiveExploiter) -> Pools:
    """`pools` with the adaptive exploiter added to the exploit pool (so pool_mix 'all' and probes include it)."""
    if ADAPTIVE_NAME in pools.registry:
        raise ValueError(f"{ADAPTIVE_NAME!r} is already a pool member of {pools.game!r}")
    member = PoolMember(name=ADAPTIVE_NAME, game=pools.game, pool="exploit", factory=exploiter.factory,
                        description="exact best response to the current policy", source={"kind": "adaptive"})
    members = {**pools.members, "exploit": (*pools.members["exploit"], ADAPTIVE_NAME)}
    return replace(pools, members=members, registry={**pools.registry, ADAPTIVE_NAME: member})
