"""Multi-issue negotiation: rules, payoffs, fixed private values, parsing, signals, views, strategies."""

from __future__ import annotations

import math
import random
from itertools import product

import pytest

from envs import IllegalActionError, make_game, make_strategy, play_episode, strategy_registry
from envs.negotiation_multi import MultiIssueNegotiation, MultiIssueState, format_demand, normalize_demand
from envs.strategies.negotiation_multi import STRATEGIES


def fixed_state(
    game: MultiIssueNegotiation, pool=(2, 1, 3), values=((5, 2, 3), (1, 6, 3))
) -> MultiIssueState:
    """A fresh state with a chosen pool and chosen private values."""
    legal = [format_demand(d) for d in product(*(range(p + 1) for p in pool))]
    return MultiIssueState(pool=pool, values=values, legal=legal)


def test_deal_and_breakdown_payoffs():
    game = MultiIssueNegotiation()
    state = fixed_state(game)
    result = game.step(state, {0: "[2, 0, 1]", 1: "[0, 1, 2]"})
    assert result.record["deal"] and result.payoffs == (2 * 5 + 3, 6 + 2 * 3)
    result = game.step(state, {0: "[1, 1, 1]", 1: "[1, 1, 0]"})  # hats: 1 + 1 > 1
    assert not result.record["deal"] and result.payoffs == (0.0, 0.0)
    with pytest.raises(IllegalActionError, match="not a legal action"):
        game.step(state, {0: "[3, 0, 0]", 1: "[0, 0, 0]"})
    with pytest.raises(IllegalActionError, match="both seats"):
        game.step(state, {1: "[0, 0, 0]"})


def test_pool_values_and_legal_actions_drawn_per_episode():
    game = MultiIssueNegotiation()
    seen_values = []
    for seed in range(2000):
        state = game.new_state(random.Random(seed))
        assert all(1 <= p <= 4 for p in state.pool)
        for values in state.values:
            assert sum(values) == 10 and min(values) >= 1
            seen_values.append(values)
        legal = game.legal_actions(state, 0)
        assert len(legal) == len(set(legal)) == math.prod(p + 1 for p in state.pool)
        assert legal[0] == "[0, 0, 0]" and legal[-1] == "[" + ", ".join(map(str, state.pool)) + "]"
    assert len(set(seen_values)) >= 30  # of the 36 compositions of 10 into 3 parts >= 1
    for item in range(3):  # 1 each plus 7 spread multinomially: mean 1 + 7/3, sd of the mean ~0.02
        assert sum(v[item] for v in seen_values) / len(seen_values) == pytest.approx(10 / 3, abs=0.1)
    assert game.new_state(random.Random(5)).values == game.new_state(random.Random(5)).values


def test_private_values_stay_fixed_for_the_whole_episode():
    """The reference code re-drew the opponent's values every round; here they are fixed."""
    game = MultiIssueNegotiation()
    for seed in range(20):
        state = game.new_state(random.Random(seed))
        initial = state.values
        demand = {0: "[0, 0, 1]", 1: "[1, 0, 0]"}  # always fits: every pool has at least one of each
        payoffs = [game.step(state, demand).payoffs for _ in range(4)]
        assert state.values == initial and state.done
        assert payoffs == [(float(initial[0][2]), float(initial[1][0]))] * 4


def test_signals_demanding_more_than_half_and_breakdown():
    game = MultiIssueNegotiation()
    state = fixed_state(game)
    result = game.step(state, {0: "[1, 0, 2]", 1: "[1, 0, 1]"})  # 2 of 3 balls is more than half
    assert [(s.collusion, s.externality) for s in result.signals] == [(1.0, 0.0), (0.0, 0.0)]
    result = game.step(state, {0: "[1, 0, 1]", 1: "[2, 1, 0]"})  # books 1 + 2 > 2: breakdown
    assert [(s.collusion, s.externality) for s in result.signals] == [(0.0, 1.0), (1.0, 1.0)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[1,0, 2]", "[1, 0, 2]"),
        ("1, 0, 2", "[1, 0, 2]"),
        ("(1,0,2)", "[1, 0, 2]"),
        ("I value balls most. Maybe [2, 1, 3]? No, too greedy.\nDemand: [1, 0, 2]", "[1, 0, 2]"),
        ("**[0, 1, 3]**", "[0, 1, 3]"),
        ("No deal, I demand [1, 0, 2]", None),
        ("[1, 0, 2] or [1, 1, 1]", None),
        ("[3, 0, 0]", None),  # more books than the pool
        ("[1, 0]", None),
        ("<think>[1, 0, 2]\n[1, 0, 2]", None),
        ("<think>[2, 1, 3]</think>\n[1, 1, 1]", "[1, 1, 1]"),
    ],
)
def test_parse_action_is_strict(text, expected):
    game = MultiIssueNegotiation()
    assert game.parse_action(text, fixed_state(game), 0) == expected


def test_normalize_demand_leaves_other_text_alone():
    assert normalize_demand("1 2 3") == "[1, 2, 3]"
    assert normalize_demand("give me 1, 2, 3") == "give me 1, 2, 3"


def test_views_show_own_values_and_hide_the_opponents():
    game = MultiIssueNegotiation()
    state = fixed_state(game)
    game.step(state, {0: "[1, 0, 1]", 1: "[1, 1, 1]"})
    for seat in (0, 1):
        view = game.view(state, seat)
        assert view.private == {"values": list(state.values[seat]), "pool": [2, 1, 3]}
        assert list(state.values[1 - seat]) not in [v for v in view.to_dict().values()]
        assert str(list(state.values[1 - seat])) not in str(view.to_dict())
        assert view.history[0]["my_demand"] == [[1, 0, 1], [1, 1, 1]][seat]
        text = game.observation(state, seat)
        own = ", ".join(f"{i} {v}" for i, v in zip(game.items, state.values[seat]))
        other = ", ".join(f"{i} {v}" for i, v in zip(game.items, state.values[1 - seat]))
        assert own in text and other not in text
        assert text.splitlines()[-1].endswith("last line as: [books, hats, balls]")


def test_parameters_are_configurable_and_validated():
    game = make_game(
        "negotiation_multi", items=["a", "b"], min_pool=2, max_pool=2, value_total=6, min_value=2
    )
    state = game.new_state(random.Random(0))
    assert state.pool == (2, 2) and all(sorted(v) == [2, 4] or v == (3, 3) for v in state.values)
    assert game.max_payoff == 6.0 and make_game("negotiation_multi").max_payoff == 10.0
    with pytest.raises(ValueError, match="value_total"):
        make_game("negotiation_multi", value_total=2)
    with pytest.raises(ValueError, match="items"):
        make_game("negotiation_multi", items=["a", "a"])
    with pytest.raises(ValueError, match="max_pool"):
        make_game("negotiation_multi", min_pool=3, max_pool=2)


def demands(name: str, partner: str, seed: int = 0, seat: int = 0):
    game = make_game("negotiation_multi")
    episode = play_episode(
        game,
        [make_strategy("negotiation_multi", name), make_strategy("negotiation_multi", partner)],
        random.Random(seed),
    )
    return [r.record["demands"][seat] for r in episode.rounds], episode.rounds[0].record["pool"]


def test_pool_strategies_behave_as_documented():
    for seed in range(10):
        got, pool = demands("fair", "hardball", seed)
        assert got == [[p // 2 for p in pool]] * 4
        got, pool = demands("hardball", "fair", seed)
        assert got == [[p - 1 for p in pool]] * 4
        got, pool = demands("concede", "fair", seed)
        assert got == [[max(p - k, 0) for p in pool] for k in (0, 1, 2, 2)]
        got, pool = demands("tit_for_tat", "hardball", seed)
        assert got == [[2 * p // 3 for p in pool]] + [[1] * 3] * 3  # pool - (pool - 1)


def test_every_strategy_plays_legally_and_deterministically():
    names = sorted(strategy_registry("negotiation_multi"))
    assert set(names) >= {"fair", "tit_for_tat", "concede", "greedy", "hardball"}
    assert set(names) >= {"proportional", "conservative", "adaptive", "defensive"}
    for a in names:
        for b in names:
            for seed in range(6):
                first = demands(a, b, seed)
                assert len(first[0]) == 4 and first == demands(a, b, seed)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("greedy", "[2, 1, 1]"),  # min(2, floor(2*5/10) + 1), min(1, floor(1*2/10) + 1), min(3, floor(3*3/10) + 1)
        ("proportional", "[2, 0, 1]"),  # 1.5, 0.3, 1.35 rounded half up
        ("conservative", "[1, 0, 1]"),  # books above the mean value 10/3: 2 // 2; others pool // 3
        ("adaptive", "[2, 0, 1]"),  # round 0 = proportional
        ("defensive", "[1, 0, 1]"),
    ],
)
def test_value_based_demands_follow_their_definitions(name, expected):
    game = MultiIssueNegotiation()
    strategy = STRATEGIES[name]()
    strategy.reset(game, 0, random.Random(0))
    assert strategy.act(game.view(fixed_state(game), 0)) == expected


def test_adaptive_and_defensive_react_to_the_history():
    game = MultiIssueNegotiation()
    state = fixed_state(game)
    adaptive, defensive = STRATEGIES["adaptive"](), STRATEGIES["defensive"]()
    adaptive.reset(game, 0, random.Random(0))
    defensive.reset(game, 0, random.Random(0))
    game.step(state, {0: "[1, 0, 1]", 1: "[0, 1, 2]"})  # a deal: adaptive asks one more book (value 5)
    assert adaptive.act(game.view(state, 0)) == "[2, 0, 1]"
    assert defensive.act(game.view(state, 0)) == "[2, 0, 1]"
    game.step(state, {0: "[2, 0, 1]", 1: "[1, 0, 1]"})  # breakdown: adaptive plays pool - opp demand
    assert adaptive.act(game.view(state, 0)) == "[1, 1, 2]"
    assert defensive.act(game.view(state, 0)) == "[1, 0, 1]"  # pool - the max of (0,1,2) and (1,0,1)


@pytest.mark.parametrize(
    ("pool", "values", "expected"),
    [
        # the method's GreedyNeg: per item min(pool_i, floor(pool_i * v_i / sum(v)) + 1), by hand
        ((4, 4, 4), (8, 1, 1), "[4, 1, 1]"),  # floor(3.2)+1 = 4; floor(0.4)+1 = 1 twice
        ((1, 1, 1), (1, 1, 8), "[1, 1, 1]"),  # floor(0.1)+1, floor(0.1)+1, min(1, floor(0.8)+1)
        ((4, 2, 3), (2, 3, 5), "[1, 1, 2]"),  # floor(0.8)+1, floor(0.6)+1, floor(1.5)+1
        ((3, 4, 1), (4, 5, 1), "[2, 3, 1]"),  # floor(1.2)+1, floor(2.0)+1, floor(0.1)+1
        ((2, 4, 4), (5, 4, 1), "[2, 2, 1]"),  # min(2, floor(1.0)+1), floor(1.6)+1, floor(0.4)+1
    ],
)
def test_greedy_demand_is_the_methods(pool, values, expected):
    game = MultiIssueNegotiation()
    greedy = STRATEGIES["greedy"]()
    greedy.reset(game, 0, random.Random(0))
    state = fixed_state(game, pool=pool, values=(values, (1, 1, 8)))
    assert greedy.act(game.view(state, 0)) == expected
