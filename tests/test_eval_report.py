"""`sepo eval`'s card-conditioned table takes its Nash reference row from the game's exact module."""

from __future__ import annotations

import pytest

from sepo.eval.report import CARD_COLUMNS, markdown


def result(card_rate: float) -> dict:
    """A minimal per-game result whose metrics hold every card-conditioned rate."""
    metric = {"value": card_rate, "ci": [card_rate, card_rate], "n": 10}
    return {"lambdas": {"e": 1.0, "c": 0.0, "x": 0.0}, "episodes": {"training": 10, "exploit": 10, "collusive": 0},
            "metrics": {m: metric for _, m in CARD_COLUMNS}}


def test_the_nash_row_is_the_games_equilibrium_rates():
    table = markdown({"m": {"kuhn": result(0.5)}}, method="bootstrap")
    # Kuhn (1950) at alpha = 1/3: bets J 1/3, Q 0, K 1; calls J 0, Q 1/3 (second to act), K 1
    assert "| Nash (α = 1/3) | 0.33 | 0.00 | 1.00 | 0.00 | 0.33 | 1.00 | 0.000 |" in table


def test_card_rates_of_a_game_without_nash_rates_are_an_error():
    with pytest.raises(ValueError, match="game 'ipd' reports card-conditioned rates"):
        markdown({"m": {"ipd": result(0.5)}}, method="bootstrap")
