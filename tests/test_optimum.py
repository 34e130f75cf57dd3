"""The optimum's policy space (`sepo.eval.optimum`) and the played measure's reach (`sepo.eval.played`) are read
from each game's exact analysis (`envs.tabular`), never from a game's name."""

from __future__ import annotations

import pytest

from envs.tabular import analysis, exact_games
from sepo.eval.optimum import policy_space
from sepo.eval.played import opponents


def test_policy_space_round_trips_where_a_game_declares_its_equilibria():
    spaces = []
    for game in exact_games():
        if not hasattr(analysis(game), "equilibria"):
            with pytest.raises(ValueError):  # no equilibria, or too many states to list
                policy_space(game)
            continue
        space = policy_space(game)
        probs = [i / len(space.states) for i in range(len(space.states))]
        assert space.probs_of(space.table_of(probs)) == probs
        for table in space.analysis.equilibria(None):  # the Nash reference line is an equilibrium's: 0
            assert space.exploitability(table) == pytest.approx(0.0, abs=1e-12)
        assert space.exploitability(space.table_of([0.5] * len(space.states))) > 0.01
        spaces.append(space)
    assert spaces  # at least one registered game has an optimum


def test_played_measure_is_refused_where_the_analysis_cannot_reach_its_states():
    for game in exact_games():
        if hasattr(analysis(game), "played_setup"):
            assert opponents(game)
        else:
            with pytest.raises(ValueError, match="has no played measure"):
                opponents(game)
