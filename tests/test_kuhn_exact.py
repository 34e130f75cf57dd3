"""Exact analysis of classic Kuhn poker against the literature and against OpenSpiel."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from open_spiel.python.algorithms import best_response as os_best_response
from open_spiel.python.algorithms import expected_game_score
from open_spiel.python.algorithms import exploitability as os_exploitability
from openspiel_kuhn import GAME, to_openspiel

from envs.kuhn import INFO_STATES, actions_at
from envs.kuhn_exact import (
    best_response,
    best_response_value,
    exploitability,
    game_value,
    nash_policy,
    validate_policy,
)
from envs.strategies.kuhn import STRATEGIES

random_tables = st.lists(st.floats(0.0, 1.0), min_size=12, max_size=12).map(
    lambda ps: {
        info: dict(zip(actions_at(info[1:]), (1.0 - p, p), strict=True)) for info, p in zip(INFO_STATES, ps)
    }
)


def test_uniform_random_exploitability_is_11_over_24():
    assert exploitability({}) == pytest.approx(11 / 24, abs=1e-12)


@pytest.mark.parametrize("alpha", [0.0, 1 / 12, 1 / 6, 0.25, 1 / 3])
def test_nash_family_is_unexploitable_and_worth_minus_one_eighteenth(alpha):
    nash = nash_policy(alpha)
    assert exploitability(nash) == pytest.approx(0.0, abs=1e-12)
    assert game_value(nash, nash) == pytest.approx(-1 / 18, abs=1e-12)
    assert best_response_value(nash, 0) == pytest.approx(-1 / 18, abs=1e-12)
    assert best_response_value(nash, 1) == pytest.approx(1 / 18, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(table=random_tables, other=random_tables)
def test_random_tabular_policies_agree_with_openspiel(table, other):
    ours = to_openspiel(table)
    assert exploitability(table) == pytest.approx(os_exploitability.exploitability(GAME, ours), abs=1e-9)
    root = GAME.new_initial_state()
    for player in (0, 1):
        expected = os_best_response.BestResponsePolicy(GAME, player, ours).value(root)
        assert best_response_value(table, player) == pytest.approx(expected, abs=1e-9)
    value = expected_game_score.policy_value(root, [ours, to_openspiel(other)])[0]
    assert game_value(table, other) == pytest.approx(value, abs=1e-9)


@settings(max_examples=30, deadline=None)
@given(table=random_tables)
def test_best_response_table_achieves_best_response_value(table):
    br0, br1 = best_response(table, 0), best_response(table, 1)
    assert set(br0) == {i for i in INFO_STATES if len(i) % 2 == 1}  # player 0 acts at "", "pb"
    assert game_value(br0, table) == pytest.approx(best_response_value(table, 0), abs=1e-12)
    assert -game_value(table, br1) == pytest.approx(best_response_value(table, 1), abs=1e-12)


def test_every_scripted_strategy_matches_openspiel_exploitability():
    for name, cls in STRATEGIES.items():
        table = cls().table
        expected = os_exploitability.exploitability(GAME, to_openspiel(table))
        assert exploitability(table) == pytest.approx(expected, abs=1e-9), name


def test_best_response_is_a_best_response_to_uniform_play():
    table = STRATEGIES["best_response"]().table
    uniform_br = (best_response_value({}, 0) + best_response_value({}, 1)) / 2
    achieved = (game_value(table, {}) - game_value({}, table)) / 2
    assert achieved == pytest.approx(uniform_br, abs=1e-12)
    assert uniform_br == pytest.approx(11 / 24, abs=1e-12)  # zero-sum: mean BR value = exploitability


def test_missing_entries_default_to_uniform_and_zero():
    assert validate_policy({})["Qpb"] == {"FOLD": 0.5, "CALL": 0.5}
    assert validate_policy({"K": {"BET": 1.0}})["K"] == {"PASS": 0.0, "BET": 1.0}


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"X": {"BET": 1.0}}, "unknown info states"),
        ({"K": {"CALL": 1.0}}, "not legal at 'K'"),
        ({"Qb": {"FOLD": 0.7, "CALL": 0.7}}, "sum to 1"),
        ({"Qb": {"FOLD": -0.5, "CALL": 1.5}}, "sum to 1"),
        ({"Qb": {"FOLD": float("nan"), "CALL": 1.0}}, "sum to 1"),
    ],
)
def test_bad_policies_are_rejected_clearly(table, message):
    with pytest.raises(ValueError, match=message):
        exploitability(table)


def test_bad_alpha_and_seat_are_rejected():
    with pytest.raises(ValueError, match="alpha"):
        nash_policy(0.5)
    with pytest.raises(ValueError, match="seat"):
        best_response_value({}, 2)
