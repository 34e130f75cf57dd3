"""Single-issue negotiation: rules, payoffs, parsing, signals, views and scripted strategies."""

from __future__ import annotations

import random

import pytest

from envs import IllegalActionError, make_game, make_strategy, play_episode, strategy_registry
from envs.negotiation import SingleIssueNegotiation


@pytest.mark.parametrize(
    ("demands", "payoffs", "deal"),
    [(("5", "5"), (5.0, 5.0), True), (("3", "7"), (3.0, 7.0), True), (("6", "5"), (0.0, 0.0), False),
     (("1", "9"), (1.0, 9.0), True), (("9", "9"), (0.0, 0.0), False)],
)  # fmt: skip
def test_round_payoffs(demands, payoffs, deal):
    game = SingleIssueNegotiation()
    state = game.new_state(random.Random(0))
    result = game.step(state, dict(enumerate(demands)))
    assert result.payoffs == payoffs and result.record["deal"] is deal
    assert state.totals == list(payoffs) and state.round == 1


def test_episode_length_legal_actions_and_errors():
    game = SingleIssueNegotiation()
    state = game.new_state(random.Random(0))
    assert game.legal_actions(state, 0) == [str(d) for d in range(1, 10)]
    assert game.current_players(state) == [0, 1]
    with pytest.raises(IllegalActionError, match="both seats"):
        game.step(state, {0: "5"})
    with pytest.raises(IllegalActionError, match="not a legal action"):
        game.step(state, {0: "10", 1: "5"})
    for _ in range(4):
        game.step(state, {0: "4", 1: "4"})
    assert state.done and game.current_players(state) == [] and state.totals == [16.0, 16.0]
    with pytest.raises(IllegalActionError, match="over"):
        game.step(state, {0: "4", 1: "4"})


def test_signals_greedy_demand_and_breakdown():
    game = SingleIssueNegotiation()
    state = game.new_state(random.Random(0))
    result = game.step(state, {0: "7", 1: "5"})
    assert [s.collusion for s in result.signals] == [1.0, 0.0]
    assert [s.externality for s in result.signals] == [1.0, 1.0]
    result = game.step(state, {0: "6", 1: "4"})
    assert [(s.collusion, s.externality) for s in result.signals] == [(0.0, 0.0), (0.0, 0.0)]


def test_parameters_are_configurable_and_validated():
    game = make_game("negotiation", pie=20, num_rounds=2, max_demand=19, greedy_demand=12)
    assert game.max_payoff == 20.0 and make_game("negotiation").max_payoff == 10.0
    assert game.legal_actions(game.new_state(random.Random(0)), 1)[-1] == "19"
    assert SingleIssueNegotiation.eval_lambdas.c == 1.0 and SingleIssueNegotiation.default_lambdas.c == 2.0
    with pytest.raises(ValueError, match="max_demand"):
        make_game("negotiation", max_demand=11)
    with pytest.raises(ValueError, match="num_rounds"):
        make_game("negotiation", num_rounds=0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("They asked for 5 last time, 4 would be too low.\n6", "6"),
        ("Demand: 5", "5"),
        ("**7**", "7"),
        ("No deal, I demand 5", None),
        ("I demand 5 or maybe 6", None),
        ("10", None),
        ("0", None),
        ("<think>demand 9\n9", None),
        ("<think>demand 9</think>\n3", "3"),
        ("", None),
    ],
)
def test_parse_action_is_strict(text, expected):
    game = SingleIssueNegotiation()
    assert game.parse_action(text, game.new_state(random.Random(0)), 0) == expected


def test_views_and_text():
    game = SingleIssueNegotiation()
    state = game.new_state(random.Random(0))
    game.step(state, {0: "6", 1: "3"})
    view = game.view(state, 1)
    assert view.history[0] == {
        "round": 0, "my_action": "3", "opp_action": "6", "my_demand": 3, "opp_demand": 6, "deal": True,
        "my_payoff": 3.0, "opp_payoff": 6.0,
    }  # fmt: skip
    text = game.observation(state, 1)
    assert "Round 2 of 4" in text and "you demanded 3, opponent demanded 6" in text
    assert text.splitlines()[-1].endswith("last line: an integer from 1 to 9.")
    assert game.system_prompt(0).splitlines()[-1].endswith("an integer from 1 to 9.")


def play(a: str, b: str, seed: int = 0):
    game = make_game("negotiation")
    pair = [make_strategy("negotiation", a), make_strategy("negotiation", b)]
    return play_episode(game, pair, random.Random(seed))


def demands(episode, seat):
    return [r.record["demands"][seat] for r in episode.rounds]


def test_pool_strategies_behave_as_documented():
    assert demands(play("fair", "hardball"), 0) == [5, 5, 5, 5]
    assert demands(play("balanced", "fair"), 0) == [6, 6, 6, 6]
    assert demands(play("selfish", "fair"), 0) == [7, 7, 7, 7]
    assert demands(play("hardball", "fair"), 0) == [8, 8, 8, 8]
    # the method's ConcedeSplit: 5 only in the round after a breakdown (6 + 5 > 10), back to 6 after a deal
    assert demands(play("concede", "fair"), 0) == [6, 5, 6, 5]
    assert demands(play("concede", "hardball"), 0) == [6, 5, 5, 5]  # 5 + 8 > 10 too: breakdowns throughout
    game = make_game("negotiation")
    modest = make_strategy("negotiation", "fair", demand=4)
    episode = play_episode(game, [make_strategy("negotiation", "concede"), modest], random.Random(0))
    assert demands(episode, 0) == [6, 6, 6, 6] and demands(episode, 1) == [4, 4, 4, 4]
    assert demands(play("tit_for_tat", "hardball"), 0) == [5, 2, 2, 2]
    assert demands(play("tit_for_tat", "fair"), 0) == [5, 5, 5, 5]


def test_every_strategy_plays_legally_and_deterministically():
    names = sorted(strategy_registry("negotiation"))
    assert set(names) >= {"fair", "balanced", "concede", "hardball", "selfish", "tit_for_tat", "random"}
    for a in names:
        for b in names:
            for seed in range(5):
                first = play(a, b, seed)
                assert len(first.rounds) == 4
                assert [r.record for r in first.rounds] == [r.record for r in play(a, b, seed).rounds]
    randoms = {tuple(demands(play("random", "fair", seed), 0)) for seed in range(20)}
    assert len(randoms) > 10  # the random demonstrator does vary with the seed
