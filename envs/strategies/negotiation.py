"""Scripted single-issue negotiation strategies: the training, exploit and collusive pools and the SFT
demonstrators. Every demand is clamped to the game's legal range [min_demand, max_demand]. The pool members
follow the method's code (kirankumarmanku/sepo, games/negotiation.py: FairSplit 5, BalancedSplit 6,
SelfishSplit 7, HardballSplit 8, ConcedeSplit)."""

from __future__ import annotations

from envs.base import Strategy, View


def clamp_demand(view: View, demand: int) -> str:
    """`demand` clamped to the legal demands of `view`, as the canonical action string."""
    legal = [int(a) for a in view.legal_actions]
    return str(min(max(demand, min(legal)), max(legal)))


class FixedDemand(Strategy):
    """Demands the same amount every round (`demand`, overridable)."""

    demand: int

    def __init__(self, demand: int | None = None) -> None:
        if demand is not None:
            self.demand = demand

    def act(self, view: View) -> str:
        return clamp_demand(view, self.demand)


class Fair(FixedDemand):
    """Always demands 5 (half the default pie): the collusive-pool partner and a training opponent."""

    name = "fair"
    demand = 5


class Balanced(FixedDemand):
    """Always demands 6."""

    name = "balanced"
    demand = 6


class Selfish(FixedDemand):
    """Always demands 7 (exploit pool)."""

    name = "selfish"
    demand = 7


class Hardball(FixedDemand):
    """Always demands 8 (training and exploit pools)."""

    name = "hardball"
    demand = 8


class Concede(Strategy):
    """The method's `ConcedeSplit` (kirankumarmanku/sepo, games/negotiation.py): demands 6, except 5 in the
    round right after a breakdown (a round without a deal); after a deal it demands 6 again."""

    name = "concede"

    def act(self, view: View) -> str:
        broke_down = bool(view.history) and not view.history[-1]["deal"]
        return clamp_demand(view, 5 if broke_down else 6)


class TitForTat(Strategy):
    """Demands 5 in the first round, then pie - (opponent's last demand): the best counter to a repeat
    of that demand (SFT demonstrator)."""

    name = "tit_for_tat"

    def act(self, view: View) -> str:
        if not view.history:
            return clamp_demand(view, 5)
        return clamp_demand(view, view.params["pie"] - view.history[-1]["opp_demand"])


class RandomDemand(Strategy):
    """A uniformly random legal demand every round (SFT demonstrator)."""

    name = "random"

    def act(self, view: View) -> str:
        return self.rng.choice(view.legal_actions)


STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls for cls in (Fair, Balanced, Concede, Hardball, Selfish, TitForTat, RandomDemand)
}
