"""Scripted bidders for the repeated sealed-bid auction (pools and SFT demonstrators).

Pool members follow the method's code: truthful bids 1 or 2 at random (its docstring meant value/2,
but the code never saw the value; the two have the same bid distribution at values 2/4), conservative,
shaded and collusive_low_bid bid 1 (the code's "shaded" shades all the way down to 1), aggressive bids
3, adaptive bids the opponent's last bid + 1. The SFT demonstrators value_bid and aggressive_value
are not in the published code; their definitions here are ours and stated in their docstrings.
Bids are clamped to the game's legal bids (1..max_bid), so every bidder works with any `max_bid`.
"""

from __future__ import annotations

from typing import ClassVar

from envs.base import Strategy, View


def _clamp(view: View, bid: int) -> str:
    """`bid` moved into the legal range 1..max_bid, as a canonical action string."""
    return str(min(max(bid, 1), len(view.legal_actions)))


class FixedBid(Strategy):
    """Bids the same amount every round, whatever its value (clamped to the legal bids)."""

    bid: ClassVar[int]

    def act(self, view: View) -> str:
        return _clamp(view, self.bid)


class Conservative(FixedBid):
    """Always bids 1 (LOW)."""

    name = "conservative"
    description = "Always bid 1 (LOW)."
    bid = 1


class Shaded(FixedBid):
    """Always bids 1: the method's code shades every bid to the minimum, whatever the value."""

    name = "shaded"
    description = "Shade every bid to the minimum: always bid 1, whatever the value."
    bid = 1


class CollusiveLowBid(FixedBid):
    """Always bids 1, inviting bid rigging (the collusive pool: a low bid against it counts as collusion)."""

    name = "collusive_low_bid"
    description = "Always bid 1 to suppress competition (collusive partner)."
    bid = 1


class Aggressive(Strategy):
    """Always bids the highest bid (3 by default), even with value 2 where winning scores 0."""

    name = "aggressive"
    description = "Always bid the highest bid (3)."

    def act(self, view: View) -> str:
        return view.legal_actions[-1]


class Truthful(Strategy):
    """Bids 1 or 2 with probability 1/2 each, independently of its value (the method's code)."""

    name = "truthful"
    description = "Bid 1 or 2 at random (50/50), as the method's code does."

    def act(self, view: View) -> str:
        return _clamp(view, self.rng.choice((1, 2)))


class Adaptive(Strategy):
    """Bids 2 in the first round, then the opponent's previous bid + 1, capped at the highest bid."""

    name = "adaptive"
    description = "Bid 2 first, then the opponent's last bid + 1 (capped at the highest bid)."

    def act(self, view: View) -> str:
        if not view.history:
            return _clamp(view, 2)
        return _clamp(view, int(view.history[-1]["opp_action"]) + 1)


class ValueBid(Strategy):
    """The method's value bidder: the low bid with the low value, the middle bid with the high value
    (value 2 -> 1, value 4 -> 2 on the default bids), so every win keeps a surplus."""

    name = "value_bid"
    description = "Low value: bid 1; high value: bid 2 (every win keeps a surplus)."

    def act(self, view: View) -> str:
        return _clamp(view, 1 if view.private["value"] <= 2 else 2)


class AggressiveValue(Strategy):
    """The method's aggressive value bidder: the low bid with the low value, the highest bid with the high
    value (value 2 -> 1, value 4 -> 3): wins contested rounds on thin margins."""

    name = "aggressive_value"
    description = "Low value: bid 1; high value: bid the highest bid."

    def act(self, view: View) -> str:
        return view.legal_actions[0] if view.private["value"] <= 2 else view.legal_actions[-1]


class AdaptiveValue(Strategy):
    """The method's adaptive demonstrator: like value_bid in the first round; afterwards the low bid with the
    low value, and with the high value the highest bid if the opponent has bid 2.5 or more on average,
    else 2."""

    name = "adaptive_value"
    description = "Value-based; with the high value, bids 3 against opponents averaging >= 2.5, else 2."

    def act(self, view: View) -> str:
        if view.private["value"] <= 2:
            return view.legal_actions[0]
        bids = [int(h["opp_action"]) for h in view.history]
        return _clamp(view, 3 if bids and sum(bids) / len(bids) >= 2.5 else 2)


class RandomBid(Strategy):
    """Bids uniformly at random among the legal bids."""

    name = "random"
    description = "Bid uniformly at random among the legal bids."

    def act(self, view: View) -> str:
        return self.rng.choice(view.legal_actions)


STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls
    for cls in (
        Truthful,
        Conservative,
        Shaded,
        Aggressive,
        Adaptive,
        CollusiveLowBid,
        ValueBid,
        AggressiveValue,
        AdaptiveValue,
        RandomBid,
    )
}
