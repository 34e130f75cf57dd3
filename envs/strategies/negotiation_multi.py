"""Scripted multi-issue negotiation strategies: the training, exploit and collusive pools and the SFT
demonstrators. They read the pool and their own values from `view.private`; every demand is clamped
to 0..pool per item. `round` below is the 0-based round index (`view.round`). The pool members (fair,
tit_for_tat, concede, greedy, hardball) follow the method's code (kirankumarmanku/sepo,
games/negotiation_gtbench.py: FairNeg, TFTNeg, ConcedeNeg, GreedyNeg, HardballNeg)."""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence

from envs.base import Strategy, View
from envs.negotiation_multi import format_demand


class DemandStrategy(Strategy):
    """Computes a demand vector from the view; `act` clamps it to 0..pool and formats it."""

    @abstractmethod
    def demand(self, view: View, pool: list[int], values: list[int]) -> Sequence[int]:
        """The unclamped demand per item."""

    def act(self, view: View) -> str:
        pool = list(view.private["pool"])
        wanted = self.demand(view, pool, list(view.private["values"]))
        return format_demand(min(max(int(d), 0), p) for d, p in zip(wanted, pool, strict=True))


def value_weighted_half(pool: list[int], values: list[int]) -> list[float]:
    """Half of each item's pool scaled by the item's value relative to the mean value (the fair split
    for a seat whose values are all average)."""
    mean = sum(values) / len(values)
    return [p / 2 * v / mean for p, v in zip(pool, values, strict=True)]


class Fair(DemandStrategy):
    """Demands floor(pool / 2) of every item, every round (training and collusive pools)."""

    name = "fair"

    def demand(self, view, pool, values):
        return [p // 2 for p in pool]


class TitForTat(DemandStrategy):
    """Round 0: floor(2/3 of the pool) of every item; afterwards pool - the opponent's last demand."""

    name = "tit_for_tat"

    def demand(self, view, pool, values):
        if not view.history:
            return [2 * p // 3 for p in pool]
        return [p - o for p, o in zip(pool, view.history[-1]["opp_demand"], strict=True)]


class Concede(DemandStrategy):
    """Demands pool - min(round, 2) of every item: the whole pool in round 0, then one less, then two less."""

    name = "concede"

    def demand(self, view, pool, values):
        return [p - min(view.round, 2) for p in pool]


class Greedy(DemandStrategy):
    """The method's `GreedyNeg` (kirankumarmanku/sepo, games/negotiation_gtbench.py; its exploit pool): per
    item min(pool_i, floor(pool_i * v_i / sum(v)) + 1) with its own values v, every round: one more than
    its value-proportional share of every item, capped at the pool (by `act`'s clamp)."""

    name = "greedy"

    def demand(self, view, pool, values):
        total = sum(values)
        return [p * v // total + 1 for p, v in zip(pool, values, strict=True)]


class Hardball(DemandStrategy):
    """Demands pool - 1 of every item, every round (exploit pool)."""

    name = "hardball"

    def demand(self, view, pool, values):
        return [p - 1 for p in pool]


class Proportional(DemandStrategy):
    """Demands pool/2 * value / mean value per item, rounded half up, every round: a value-weighted fair
    split (SFT demonstrator)."""

    name = "proportional"

    def demand(self, view, pool, values):
        return [math.floor(x + 0.5) for x in value_weighted_half(pool, values)]


class Conservative(DemandStrategy):
    """Never demands more than half of any item: floor(pool/2) of items it values at least averagely,
    floor(pool/3) of the others, every round (SFT demonstrator)."""

    name = "conservative"

    def demand(self, view, pool, values):
        mean = sum(values) / len(values)
        return [p // 2 if v >= mean else p // 3 for p, v in zip(pool, values, strict=True)]


class Adaptive(DemandStrategy):
    """Starts with the proportional demand; after a deal repeats its last demand with one more of its
    most valued item that is not yet fully demanded; after a breakdown demands pool - the opponent's
    last demand (SFT demonstrator)."""

    name = "adaptive"

    def demand(self, view, pool, values):
        if not view.history:
            return Proportional.demand(self, view, pool, values)
        last = view.history[-1]
        if not last["deal"]:
            return [p - o for p, o in zip(pool, last["opp_demand"], strict=True)]
        demand = list(last["my_demand"])
        for item in sorted(range(len(pool)), key=lambda i: -values[i]):
            if demand[item] < pool[item]:
                demand[item] += 1
                break
        return demand


class Defensive(DemandStrategy):
    """Round 0: floor(pool/2) of every item; afterwards, per item, pool - the largest amount the
    opponent has demanded so far, so it never clashes with a repeat of any past opponent demand
    (SFT demonstrator)."""

    name = "defensive"

    def demand(self, view, pool, values):
        if not view.history:
            return [p // 2 for p in pool]
        return [p - max(h["opp_demand"][i] for h in view.history) for i, p in enumerate(pool)]


STRATEGIES: dict[str, type[DemandStrategy]] = {
    cls.name: cls
    for cls in (Fair, TitForTat, Concede, Greedy, Hardball, Proportional, Conservative, Adaptive, Defensive)
}
