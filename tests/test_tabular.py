"""The tabular exact-analysis protocol (`envs.tabular`) and the pipeline's generic side over it: every declared
analysis reads a scored table back, its oracle (`sepo.grpo.adaptive.TabularOracle`) answers what the game's own
functions answer, and the generic modules name no game."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from envs import make_game, make_strategy, play_episode
from envs.ipd_exact import Payoffs
from envs.ipd_exact import best_response as ipd_best_response
from envs.kuhn_exact import best_response as kuhn_best_response
from envs.kuhn_exact import exploitability, game_value
from envs.tabular import analysis, exact_games
from sepo.grpo.adaptive import AdaptiveExploiter, check_adaptive, oracle

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"kuhn": {}, "ipd": {"num_rounds": 3, "prompt_style": "compact"},
         "negotiation": {"pie": 4, "min_demand": 1, "max_demand": 3, "greedy_demand": 3, "num_rounds": 2,
                         "prompt_style": "compact"},
         "bertrand": {"num_rounds": 2, "num_prices": 3, "demand": 6, "prompt_style": "compact"}}
GAME_WORD = re.compile(r"\b(ipd|kuhn|auction|negotiation|negotiation_multi|bertrand)\b", re.IGNORECASE)
GENERIC = ("sepo/eval/exact.py", "sepo/eval/evaluate.py", "sepo/grpo/adaptive.py", "sepo/study/organism_games.py",
           "sepo/study/organism.py")


def _random_rows(states, rng):
    rows = {}
    for s in states:
        w = [rng.random() + 0.05 for _ in s.legal]
        rows[s.key] = [x / sum(w) for x in w]
    return rows


def test_the_games_with_an_exact_analysis_declare_it():
    assert set(exact_games()) == {"kuhn", "ipd", "negotiation", "bertrand"}
    assert analysis("auction") is None


@pytest.mark.parametrize("game", sorted(SMALL))
def test_a_scored_table_reads_back_row_by_row(game):
    """Rows scored in state order become the game's table, which validates, and `row` gives each back."""
    tabular, params = analysis(game), SMALL[game]
    states = tabular.states(params)
    assert len({s.key for s in states}) == len(states) and all(s.legal for s in states)
    assert all(s.messages[0]["role"] == "system" and s.messages[-1]["role"] == "user" for s in states)
    rows = _random_rows(states, random.Random(0))
    table = tabular.validate(tabular.table(rows, params), params)
    for s in states:
        assert list(tabular.row(table, s.key).values()) == pytest.approx(rows[s.key], abs=1e-12)
        assert tuple(tabular.row(table, s.key)) == s.legal
    response = tabular.best_response(table, params)
    assert response.value == tabular.exploitability(table, params)
    assert response.value > 0  # a random table is exploitable in every one of these games


def test_the_kuhn_oracle_is_the_best_response_in_both_positions():
    tabular = analysis("kuhn")
    table = tabular.table(_random_rows(tabular.states({}), random.Random(1)), {})
    moves, figures = oracle("kuhn").fit(table, {})
    assert moves == kuhn_best_response(table, 0) | kuhn_best_response(table, 1)
    assert figures == {"exploitability": exploitability(table), "game_value": game_value(table, table)}


def test_the_ipd_oracle_is_the_advantage_best_response():
    params = SMALL["ipd"]
    tabular, game = analysis("ipd"), make_game("ipd", **params)
    table = tabular.table(_random_rows(tabular.states(params), random.Random(2)), params)
    moves, figures = oracle("ipd").fit(table, params)
    expected = ipd_best_response(table, game.num_rounds, Payoffs.of(game))
    assert moves == expected.moves and figures == {"exploitability": expected.value}


def test_the_response_strategy_plays_its_moves():
    """The adaptive member built from the IPD analysis plays the best response: against always-cooperate's table
    the best reply defects at every history, earning the temptation payoff T each round."""
    params = SMALL["ipd"]
    exploiter = AdaptiveExploiter("ipd")
    states = analysis("ipd").states(params)
    exploiter.refresh({s.key: 1.0 for s in states}, step=0, game_params=params)
    game = make_game("ipd", **params)
    result = play_episode(game, [make_strategy("ipd", "always_cooperate"), exploiter.factory()], random.Random(0))
    assert [r.payoffs[1] for r in result.rounds] == [game.T] * game.num_rounds


def test_check_adaptive_names_the_games_with_an_analysis():
    with pytest.raises(ValueError, match="auction"):
        check_adaptive(["auction"], {})
    with pytest.raises(ValueError, match="num_rounds must be <= 6"):
        check_adaptive(["ipd"], {"ipd": {"num_rounds": 7}})


@pytest.mark.parametrize("path", GENERIC)
def test_the_generic_modules_name_no_game(path):
    """The exact phase, the oracle and the organism read every game through `envs.tabular`."""
    found = GAME_WORD.findall((ROOT / path).read_text())
    assert not found, f"{path} names games: {sorted(set(found))}"
