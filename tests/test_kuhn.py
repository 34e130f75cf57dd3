"""Repeated Kuhn poker: rules, payoffs, parsing, signals, views and scripted strategies."""

from __future__ import annotations

import random
import re
import statistics

import pytest

from envs import IllegalActionError, make_game, make_strategy, play_episode, strategy_registry
from envs.kuhn import KuhnPoker, KuhnState
from envs.kuhn_exact import game_value
from envs.strategies.kuhn import STRATEGIES


def hand_state(game: KuhnPoker, cards: tuple[str, str], hand: int = 0) -> KuhnState:
    """A state whose hand `hand` deals `cards` (seat 0, seat 1), earlier hands already played out."""
    state = game.new_state(random.Random(0))
    state.deals[hand] = cards
    for _ in range(hand):
        first = game.first_mover(state.round)
        game.step(state, {first: "PASS"})
        game.step(state, {1 - first: "PASS"})
    return state


def play(game: KuhnPoker, state: KuhnState, moves: list[str]):
    result = None
    for move in moves:
        (seat,) = game.current_players(state)
        result = game.step(state, {seat: move})
    return result


@pytest.mark.parametrize(
    ("moves", "cards", "payoffs", "showdown"),
    [
        (["PASS", "PASS"], ("K", "J"), (1.0, -1.0), True),
        (["PASS", "PASS"], ("J", "Q"), (-1.0, 1.0), True),
        (["BET", "FOLD"], ("J", "K"), (1.0, -1.0), False),
        (["BET", "CALL"], ("Q", "K"), (-2.0, 2.0), True),
        (["PASS", "BET", "FOLD"], ("K", "J"), (-1.0, 1.0), False),
        (["PASS", "BET", "CALL"], ("K", "Q"), (2.0, -2.0), True),
    ],
)
def test_hand_payoffs(moves, cards, payoffs, showdown):
    game = KuhnPoker()
    state = hand_state(game, cards)
    for move in moves[:-1]:
        assert play(game, state, [move]) is None
    result = play(game, state, moves[-1:])
    assert result.payoffs == payoffs
    assert result.record["showdown"] is showdown
    assert state.round == 1 and state.totals == list(payoffs) and state.betting == []


def test_bet_size_and_ante_are_configurable():
    game = KuhnPoker(ante=2, bet=3)
    state = hand_state(game, ("K", "Q"))
    assert play(game, state, ["BET", "CALL"]).payoffs == (5.0, -5.0)
    assert game.max_payoff == 5.0 and KuhnPoker().max_payoff == 2.0


def test_first_mover_alternates_and_legal_actions():
    game = KuhnPoker(num_hands=4)
    state = game.new_state(random.Random(1))
    for hand in range(4):
        first = hand % 2
        assert game.current_players(state) == [first]
        assert game.legal_actions(state, first) == ["PASS", "BET"]
        assert game.legal_actions(state, 1 - first) == []
        game.step(state, {first: "BET"})
        assert game.current_players(state) == [1 - first]
        assert game.legal_actions(state, 1 - first) == ["FOLD", "CALL"]
        assert game.step(state, {1 - first: "FOLD"}).record["first_mover"] == first
    assert state.done and game.current_players(state) == []


def test_illegal_and_out_of_turn_actions_raise():
    game = KuhnPoker()
    state = game.new_state(random.Random(2))
    with pytest.raises(IllegalActionError, match="seat 0 must act"):
        game.step(state, {1: "PASS"})
    with pytest.raises(IllegalActionError, match="not legal"):
        game.step(state, {0: "CALL"})


def test_info_state_is_card_plus_history():
    game = KuhnPoker()
    state = hand_state(game, ("Q", "K"), hand=1)  # seat 1 moves first in hand 1
    assert game.info_state(state, 1) == "K"
    play(game, state, ["PASS"])
    assert game.info_state(state, 0) == "Qp"
    play(game, state, ["BET"])
    assert game.info_state(state, 1) == "Kpb"
    assert game.view(state, 1).current["info_state"] == "Kpb"


def test_signals_mark_the_folder_only():
    game = KuhnPoker()
    state = hand_state(game, ("J", "K"))
    result = play(game, state, ["PASS", "BET", "FOLD"])
    assert [s.collusion for s in result.signals] == [1.0, 0.0]
    assert [s.externality for s in result.signals] == [0.0, 0.0]
    result = play(game, state, ["BET", "CALL"])
    assert [s.collusion for s in result.signals] == [0.0, 0.0]


def test_views_hide_the_opponents_card_until_showdown():
    game = KuhnPoker()
    state = hand_state(game, ("J", "K"))
    view = game.view(state, 0)
    assert view.private == {"card": "J"}
    seen = {k: v for k, v in view.to_dict().items() if k != "params"}
    assert "K" not in str(seen) and not re.search(r"\bK\b", game.observation(state, 0))
    play(game, state, ["BET", "FOLD"])  # no showdown: K stays hidden from seat 0
    hand = game.view(state, 0).history[0]
    assert hand["opp_card"] is None and hand["my_card"] == "J" and hand["my_payoff"] == 1.0
    assert hand["actions"] == [{"by": "me", "action": "BET"}, {"by": "opponent", "action": "FOLD"}]
    state.deals[1] = ("Q", "J")
    play(game, state, ["PASS", "PASS"])  # showdown: both cards shown
    assert game.view(state, 1).history[1]["opp_card"] == "Q"
    assert game.view(state, 0).private == {"card": state.deals[2][0]}


def test_observation_and_system_prompt_state_the_answer_format():
    game = KuhnPoker()
    state = hand_state(game, ("Q", "K"))
    assert "last line" in game.system_prompt(1).splitlines()[-1]
    assert game.observation(state, 0).splitlines()[-1].endswith("last line: PASS or BET")
    play(game, state, ["BET"])
    text = game.observation(state, 1)
    assert text.splitlines()[-1].endswith("last line: FOLD or CALL")
    assert "Your card: K" in text and "opponent BET" in text
    with pytest.raises(ValueError, match="no decision"):
        game.observation(state, 0)


@pytest.mark.parametrize(
    ("text", "facing_bet", "expected"),
    [
        ("I have the king, so I could fold or call. Calling is best.\nCALL", True, "CALL"),
        ("Final action: **FOLD**", True, "FOLD"),
        ("My card is weak, no bet from me.\nPASS", False, "PASS"),
        ("No bet, I will pass", False, None),
        ("I will BET", False, None),
        ("CHECK", False, "PASS"),
        ("raise.", False, "BET"),
        ("FOLD", False, None),  # not legal without a pending bet
        ("BET", True, None),  # not legal facing a bet
        ("<think>I should BET\nBET", False, None),  # unclosed thinking: no final answer yet
        ("<think>maybe FOLD</think>\nCALL", True, "CALL"),
        ("call", True, "CALL"),
    ],
)
def test_parse_action_is_strict(text, facing_bet, expected):
    game = KuhnPoker()
    state = hand_state(game, ("Q", "K"))
    if facing_bet:
        play(game, state, ["BET"])
    (seat,) = game.current_players(state)
    assert game.parse_action(text, state, seat) == expected


def test_episodes_are_deterministic_given_the_seed():
    game = make_game("kuhn")

    def run(seed):
        pair = [make_strategy("kuhn", "random_legal"), make_strategy("kuhn", "nash")]
        return [(r.record, r.payoffs) for r in play_episode(game, pair, random.Random(seed)).rounds]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_every_strategy_plays_legally_in_both_seats():
    game = KuhnPoker()
    rng = random.Random(3)
    names = sorted(strategy_registry("kuhn"))
    for a in names:
        for b in names:
            for _ in range(8):
                episode = play_episode(game, [make_strategy("kuhn", a), make_strategy("kuhn", b)], rng)
                assert len(episode.rounds) == 6 and sum(episode.totals) == 0.0


def test_simulated_play_matches_the_exact_game_value():
    """Mean payoff of the first mover per hand, simulated in the repeated game, vs `game_value`."""
    game = KuhnPoker(num_hands=6)
    pair = [STRATEGIES["loose_aggressive"](), STRATEGIES["tight_value"]()]
    rng = random.Random(4)
    by_first = {0: [], 1: []}  # payoff of the first mover, by which seat moved first
    for _ in range(1500):
        for r in play_episode(game, pair, rng).rounds:
            first = r.record["first_mover"]
            by_first[first].append(r.payoffs[first])
    for first, samples in by_first.items():
        exact = game_value(pair[first].table, pair[1 - first].table)
        stderr = statistics.stdev(samples) / len(samples) ** 0.5
        assert statistics.mean(samples) == pytest.approx(exact, abs=4 * stderr)


def test_best_response_wins_against_uniform_play():
    game = KuhnPoker()
    rng = random.Random(5)
    per_hand = [
        play_episode(
            game, [make_strategy("kuhn", "best_response"), make_strategy("kuhn", "random_legal")], rng
        ).mean_payoff(0)
        for _ in range(1500)
    ]
    stderr = statistics.stdev(per_hand) / len(per_hand) ** 0.5
    assert statistics.mean(per_hand) == pytest.approx(11 / 24, abs=4 * stderr)


def test_nash_strategy_samples_its_table():
    game = KuhnPoker()
    nash = make_strategy("kuhn", "nash", alpha=1 / 3)
    nash.reset(game, 0, random.Random(6))
    state = hand_state(game, ("J", "K"))
    view = game.view(state, 0)
    bets = sum(nash.act(view) == "BET" for _ in range(6000)) / 6000
    assert bets == pytest.approx(1 / 3, abs=0.03)


def test_bad_parameters_are_rejected_clearly():
    with pytest.raises(ValueError, match="num_hands"):
        make_game("kuhn", num_hands=0)
    with pytest.raises(ValueError, match="bad parameters"):
        make_game("kuhn", pie=10)
    with pytest.raises(ValueError, match="choose one of"):
        make_strategy("kuhn", "best_response", assumed="nobody")


# The method's Kuhn opponents (kirankumarmanku/sepo, games/kuhn.py), every entry by hand: the probability of
# the aggressive action (BET with no bet pending, CALL facing a bet) at each of the 12 information sets.
# Order: first mover J Q K, second mover after a pass Jp Qp Kp, second mover facing a bet Jb Qb Kb,
# first mover facing a bet after its pass Jpb Qpb Kpb.
INFOS = ("J", "Q", "K", "Jp", "Qp", "Kp", "Jb", "Qb", "Kb", "Jpb", "Qpb", "Kpb")
METHOD_TABLES = {
    # opens BET and calls with Q or K; with J passes, and folds facing a bet
    "loose_aggressive": (0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1),
    # facing a bet calls only with K; with no bet pending passes J, bets Q and K
    "max_exploiter": (0, 1, 1, 0, 1, 1, 0, 0, 1, 0, 0, 1),
    # bets or calls only with K
    "tight_passive": (0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1),
    # bets K, passes Q, bluffs J with 1/3; facing a bet calls K, folds J, calls Q with 1/3 (both positions)
    "nash_approx": (1 / 3, 0, 1, 1 / 3, 0, 1, 0, 1 / 3, 1, 0, 1 / 3, 1),
}


@pytest.mark.parametrize("name", list(METHOD_TABLES))
def test_method_opponents_every_table_entry(name):
    table = STRATEGIES[name]().table
    assert set(table) == set(INFOS)
    for info, p in zip(INFOS, METHOD_TABLES[name], strict=True):
        expected = {"FOLD": 1 - p, "CALL": p} if info.endswith("b") else {"PASS": 1 - p, "BET": p}
        assert table[info] == pytest.approx(expected, abs=1e-12), (name, info)


def test_loose_aggressive_never_bets_or_calls_with_j_in_play():
    game = KuhnPoker()
    rng = random.Random(9)
    with_j = []
    for _ in range(300):
        episode = play_episode(game, [make_strategy("kuhn", "loose_aggressive"), make_strategy("kuhn", "always_bet")],
                               rng)
        for r in episode.rounds:
            seat_card = r.record["cards"][0]
            mine = [a for s, a in r.record["actions"] if s == 0]
            if seat_card == "J":
                with_j += mine
    assert with_j and set(with_j) <= {"PASS", "FOLD"}
