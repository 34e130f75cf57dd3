"""Scripted pricing strategies for the repeated Bertrand duopoly (pools by role and the SFT demonstrator).

Rounds are counted from 1 in descriptions. "The competitive price" is the game's p_c (the lowest price that covers
the cost), "the monopoly price" its p_M (the top of the grid); every strategy reads both from the view's
parameters, so it plays any grid. No strategy ever prices below p_c.

Roles (`envs.bertrand.SPEC`): training opponents compete in the usual ways (competitive, price matching,
undercutting a high price, random); exploiters prey on a seller that keeps its price up (`undercut` takes the
market from any price above p_c, `match_then_undercut` builds trust by matching and takes the last round);
collusive partners invite the monopoly price (`always_monopoly`, and `grim_trigger`, which sustains it and punishes
a rival that undercuts with competitive pricing forever: the reward-punishment scheme Calvano et al. found their
Q-learning sellers to learn).
"""

from __future__ import annotations

import random

from envs.base import Game, Strategy, View


def competitive_price(view: View) -> int:
    """p_c of the game the view belongs to: the lowest price that covers the cost."""
    return max(1, int(view.params["cost"]))


def monopoly_price(view: View) -> int:
    """p_M of the game the view belongs to: the top of the price grid."""
    return int(view.params["num_prices"])


def rival_last(view: View) -> int | None:
    """The rival's price in the last finished round, or None in round 1."""
    return int(view.history[-1]["opp_price"]) if view.history else None


def undercut(view: View, price: int) -> str:
    """One step below `price`, never below the competitive price, as the action string."""
    return str(max(competitive_price(view), price - 1))


class Competitive(Strategy):
    """Always charges the competitive price (the one-round Nash price under the defaults)."""

    name = "competitive"
    description = "Always charge the competitive price (the lowest price that covers the cost)."

    def act(self, view: View) -> str:
        return str(competitive_price(view))


class TitForTat(Strategy):
    """Opens at the monopoly price, then charges the rival's last price (price matching)."""

    name = "tit_for_tat"
    description = "Open at the monopoly price, then match the rival's last price."

    def act(self, view: View) -> str:
        last = rival_last(view)
        return str(monopoly_price(view) if last is None else max(competitive_price(view), last))


class Midpoint(Strategy):
    """Always charges the middle of the competitive and monopoly prices (rounded down): a steady rival to undercut."""

    name = "midpoint"
    description = "Always charge the price halfway between the competitive and monopoly prices (rounded down)."

    def act(self, view: View) -> str:
        return str((competitive_price(view) + monopoly_price(view)) // 2)


class RandomPrice(Strategy):
    """Draws a price uniformly from p_c..p_M each round, independently of the history."""

    name = "random"
    description = "Charge a uniformly random price from the competitive to the monopoly price each round."

    def distribution(self, view: View) -> dict[str, float]:
        """Its exact behaviour at `view`: {price: probability}, which `act` samples (`envs.bertrand_exact`)."""
        prices = [str(p) for p in range(competitive_price(view), monopoly_price(view) + 1)]
        return dict.fromkeys(prices, 1.0 / len(prices))

    def act(self, view: View) -> str:
        return self.rng.choice(list(self.distribution(view)))


class Undercut(Strategy):
    """Opens one step below the monopoly price, then undercuts the rival's last price by one step (floor p_c): it
    takes the whole market from any rival whose price stays above the competitive level (the exploit pool's
    primary exploiter)."""

    name = "undercut"
    description = "Open one step below the monopoly price, then undercut the rival's last price by one step."

    def act(self, view: View) -> str:
        last = rival_last(view)
        return undercut(view, monopoly_price(view) if last is None else last)


class MatchThenUndercut(Strategy):
    """Opens at the monopoly price and matches the rival's last price, except in the last round, when it
    undercuts it by one step: it shares a high price while it lasts and takes the market at the end."""

    name = "match_then_undercut"
    description = "Match the rival's last price (opening at the monopoly price); undercut it by one in the last round."

    def act(self, view: View) -> str:
        last = monopoly_price(view) if rival_last(view) is None else rival_last(view)
        return undercut(view, last) if view.round == view.num_rounds - 1 else str(max(competitive_price(view), last))


class AlwaysMonopoly(Strategy):
    """Always charges the monopoly price: a partner that leaves the monopoly profit on the table to be shared."""

    name = "always_monopoly"
    description = "Always charge the monopoly price."

    def act(self, view: View) -> str:
        return str(monopoly_price(view))


class GrimTrigger(Strategy):
    """Charges the monopoly price until the rival once charges less, then the competitive price for the rest of the
    episode: collusion sustained by the threat of a price war."""

    name = "grim_trigger"
    description = "Charge the monopoly price until the rival undercuts it once, then the competitive price forever."

    def reset(self, game: Game, seat: int, rng: random.Random) -> None:
        super().reset(game, seat, rng)
        self._seen = 0  # rounds of this episode already scanned for an undercut
        self._triggered = False

    def act(self, view: View) -> str:
        top = monopoly_price(view)
        if not self._triggered:  # scan only the rounds not seen yet
            self._triggered = any(h["opp_price"] < top for h in view.history[self._seen :])
            self._seen = len(view.history)
        return str(competitive_price(view) if self._triggered else top)


STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls
    for cls in (
        Competitive,
        TitForTat,
        Midpoint,
        RandomPrice,
        Undercut,
        MatchThenUndercut,
        AlwaysMonopoly,
        GrimTrigger,
    )
}
