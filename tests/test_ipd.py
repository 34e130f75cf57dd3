"""Iterated prisoner's dilemma: rules, signals, views, parsing, strategies, and the Axelrod cross-check."""

from __future__ import annotations

import itertools
import json
import math
import random

import pytest

from benchmarks import games as bench_games
from envs import IllegalActionError, make_game, make_strategy, play_episode, strategy_registry
from envs.ipd import COOPERATE, DEFECT, IteratedPrisonersDilemma

C, D = COOPERATE, DEFECT

# Our deterministic strategies and their Axelrod 4.13.1 twins (alternating_defect has no exact twin): one table,
# the settings of the benchmark that times the same pairs (configs/benchmarks/games.yaml).
AXELROD_TWINS = bench_games.games_settings().matches().twins


def play(a: str, b: str, seed: int = 0, **game_params) -> tuple[list[tuple[str, str]], tuple[float, float]]:
    game = IteratedPrisonersDilemma(**game_params)
    episode = play_episode(game, [make_strategy("ipd", a), make_strategy("ipd", b)], random.Random(seed))
    return [tuple(r.record["actions"]) for r in episode.rounds], episode.totals


# --- rules ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a0", "a1", "payoffs", "collusion", "externality"),
    [
        (C, C, (3.0, 3.0), (0.0, 0.0), 0.0),
        (C, D, (0.0, 5.0), (0.0, 1.0), 0.5 / 3),
        (D, C, (5.0, 0.0), (1.0, 0.0), 0.5 / 3),
        (D, D, (1.0, 1.0), (1.0, 1.0), 2 / 3),
    ],
)
def test_payoffs_and_signals_for_every_action_pair(a0, a1, payoffs, collusion, externality):
    game = make_game("ipd")
    state = game.new_state(random.Random(0))
    result = game.step(state, {0: a0, 1: a1})
    assert result.index == 0
    assert result.payoffs == payoffs
    assert tuple(s.collusion for s in result.signals) == collusion
    assert all(math.isclose(s.externality, externality) for s in result.signals)
    assert result.record == {"actions": [a0, a1]}
    assert state.totals == list(payoffs)


def test_rounds_terminal_and_totals():
    game = make_game("ipd", num_rounds=3)
    state = game.new_state(random.Random(0))
    for t in range(3):
        assert not game.is_terminal(state)
        assert game.current_players(state) == [0, 1]
        assert game.legal_actions(state, 0) == [C, D]
        assert state.round == t
        game.step(state, {0: D, 1: C})
    assert game.is_terminal(state)
    assert game.current_players(state) == []
    assert game.legal_actions(state, 1) == []
    assert state.totals == [15.0, 0.0]
    assert [r.index for r in state.history] == [0, 1, 2]
    with pytest.raises(IllegalActionError, match="over"):
        game.step(state, {0: C, 1: C})


@pytest.mark.parametrize("actions", [{0: "cooperate", 1: C}, {0: C}, {0: C, 1: "SILENT"}, {}])
def test_illegal_actions_raise(actions):
    game = make_game("ipd")
    state = game.new_state(random.Random(0))
    with pytest.raises(IllegalActionError, match="legal actions are COOPERATE, DEFECT|both seats act"):
        game.step(state, actions)
    assert state.round == 0 and not state.history


def test_custom_payoffs_scale_and_validation():
    game = make_game("ipd", R=4, S=-1, T=6, P=0.5, num_rounds=2)
    assert game.max_payoff == 4.0
    assert game.params == {"num_rounds": 2, "R": 4.0, "S": -1.0, "T": 6.0, "P": 0.5, "prompt_style": "chat"}
    assert game.payoffs(D, C) == (6.0, -1.0)
    assert "you get 6, the opponent gets -1" in game.system_prompt(0)
    assert make_game("ipd").max_payoff == 3.0
    with pytest.raises(ValueError, match="T > R > P > S"):
        make_game("ipd", T=2)
    with pytest.raises(ValueError, match="num_rounds"):
        make_game("ipd", num_rounds=0)
    with pytest.raises(ValueError, match="bad parameters for game 'ipd'"):
        make_game("ipd", rounds=8)


def test_class_attributes():
    assert IteratedPrisonersDilemma.name == "ipd"
    lam = IteratedPrisonersDilemma.default_lambdas
    assert (lam.e, lam.c, lam.x) == (2.4, 1.0, 1.8)


# --- text views and parsing ---------------------------------------------------------------------------


def test_prompts_and_observation():
    game = make_game("ipd")
    system = game.system_prompt(0)
    assert system.endswith("end your response with your action alone on the last line: COOPERATE or DEFECT.")
    assert "8 rounds" in system
    state = game.new_state(random.Random(0))
    first = game.observation(state, 0)
    assert first.startswith("Round 1 of 8.")
    assert "Scores so far - you: 0, opponent: 0" in first
    game.step(state, {0: D, 1: C})
    game.step(state, {0: C, 1: C})
    obs0, obs1 = game.observation(state, 0), game.observation(state, 1)
    assert obs0.startswith("Round 3 of 8.")
    assert "Round 1: you DEFECT, opponent COOPERATE (you 5, opponent 0)" in obs0
    assert "Round 1: you COOPERATE, opponent DEFECT (you 0, opponent 5)" in obs1
    assert "Scores so far - you: 8, opponent: 3" in obs0
    assert "Scores so far - you: 3, opponent: 8" in obs1
    assert obs0.endswith("What is your action?")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("COOPERATE", C),
        ("The opponent copies me.\ndefect", D),
        ("No defection", None),
        ("I will not DEFECT", None),
        ("I will DEFECT", None),
        ("<think>DEFECT</think>\nCOOPERATE", C),
        ("**Final action: defect.**", D),
        ("Final answer: `COOPERATE`", C),
        ("<think>I should cooperate\nCOOPERATE", None),
        ("COOPERATE\nDEFECT", D),
        ("DEFECT\n\n  ", D),
        ("", None),
        ("COOPERATE or DEFECT", None),
        ("D", None),
        ("DEFECTS", None),
    ],
)
def test_parse_action_is_strict(text, expected):
    game = make_game("ipd")
    state = game.new_state(random.Random(0))
    assert game.parse_action(text, state, 0) == expected


def test_views_are_per_seat_and_json_able():
    game = make_game("ipd")
    state = game.new_state(random.Random(0))
    game.step(state, {0: D, 1: C})
    v0, v1 = game.view(state, 0), game.view(state, 1)
    assert (v0.seat, v0.round, v0.num_rounds, v0.legal_actions) == (0, 1, 8, (C, D))
    assert v0.history == ({"my_action": D, "opp_action": C, "my_payoff": 5.0, "opp_payoff": 0.0},)
    assert v1.history == ({"my_action": C, "opp_action": D, "my_payoff": 0.0, "opp_payoff": 5.0},)
    assert v0.private == {} and v0.current == {}
    assert v0.params == game.params
    # a view is a snapshot: later rounds do not change it
    game.step(state, {0: C, 1: C})
    assert len(v0.history) == 1
    json.dumps(v0.to_dict())


# --- strategies ----------------------------------------------------------------------------------------


def test_registry_names_and_descriptions():
    registry = strategy_registry("ipd")
    expected = {
        "tit_for_tat", "grim_trigger", "always_defect", "always_cooperate", "random", "mixed",
        "generous_tit_for_tat", "alternating_defect", "tit_for_two_tats", "win_stay_lose_shift",
        "suspicious_tit_for_tat", "prober", "alternator",
    }  # fmt: skip
    assert set(registry) == expected
    for name, cls in registry.items():
        assert cls.name == name
        assert cls.description and "\n" not in cls.description


def test_every_pair_plays_legal_actions_over_seeded_episodes():
    game = make_game("ipd")
    names = sorted(strategy_registry("ipd"))
    for a, b in itertools.product(names, repeat=2):
        for seed in range(3):
            episode = play_episode(
                game, [make_strategy("ipd", a), make_strategy("ipd", b)], random.Random(seed)
            )
            assert len(episode.rounds) == 8
            assert all(set(r.record["actions"]) <= {C, D} for r in episode.rounds)
            assert episode.totals == tuple(sum(r.payoffs[s] for r in episode.rounds) for s in (0, 1))


def test_episodes_are_deterministic_given_the_seed():
    first = play("random", "generous_tit_for_tat", seed=7, num_rounds=50)
    assert play("random", "generous_tit_for_tat", seed=7, num_rounds=50) == first
    assert play("random", "generous_tit_for_tat", seed=8, num_rounds=50) != first


def test_tit_for_tat_copies_and_grim_never_forgives():
    moves, _ = play("tit_for_tat", "random", seed=3, num_rounds=40)
    assert moves[0][0] == C
    assert all(moves[t][0] == moves[t - 1][1] for t in range(1, 40))
    moves, _ = play("grim_trigger", "random", seed=3, num_rounds=40)
    first_d = next(t for t, (_, b) in enumerate(moves) if b == D)
    assert all(a == C for a, _ in moves[: first_d + 1])
    assert all(a == D for a, _ in moves[first_d + 1 :])


def test_grim_trigger_state_is_per_episode():
    """Grim keeps a trigger between rounds; `reset` clears it, so one instance can play many episodes."""
    game = make_game("ipd")
    grim = make_strategy("ipd", "grim_trigger")
    punished = play_episode(game, [grim, make_strategy("ipd", "alternating_defect")], random.Random(0))
    assert [r.record["actions"][0] for r in punished.rounds] == [C] + [D] * 7
    fresh = play_episode(game, [grim, make_strategy("ipd", "always_cooperate")], random.Random(0))
    assert [r.record["actions"][0] for r in fresh.rounds] == [C] * 8


def test_fixed_patterns():
    assert [a for a, _ in play("alternating_defect", "always_cooperate")[0]] == [D, C] * 4
    assert [a for a, _ in play("alternator", "always_cooperate")[0]] == [C, D] * 4
    assert [a for a, _ in play("prober", "always_cooperate")[0]] == [D, C, C] + [D] * 5
    assert [a for a, _ in play("prober", "tit_for_tat")[0]] == [D, C, C, C, C, C, C, C]
    assert [a for a, _ in play("suspicious_tit_for_tat", "always_cooperate")[0]] == [D] + [C] * 7
    assert [a for a, _ in play("tit_for_two_tats", "alternating_defect")[0]] == [C] * 8
    assert [a for a, _ in play("tit_for_two_tats", "always_defect")[0]] == [C, C] + [D] * 6
    # Pavlov against always-defect: C, then switches to D, then back to C after (D, D), ...
    assert [a for a, _ in play("win_stay_lose_shift", "always_defect")[0]] == [C, D] * 4
    # tit-for-tat's exploit-pool advantage against alternating defect is zero (why the method added it)
    _, (tft, alt) = play("tit_for_tat", "alternating_defect")
    assert alt - tft == 0


def _binomial_ok(successes: int, n: int, p: float, sigmas: float = 4.5) -> bool:
    return abs(successes - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


def test_generous_tit_for_tat_forgives_a_quarter_of_defections():
    forgiven = n = 0
    for seed in range(300):
        moves, _ = play("generous_tit_for_tat", "always_defect", seed=seed)
        assert moves[0][0] == C
        n += 7
        forgiven += sum(a == C for a, _ in moves[1:])
        # after a cooperation it always cooperates
        assert play("generous_tit_for_tat", "always_cooperate", seed=seed)[0] == [(C, C)] * 8
    assert _binomial_ok(forgiven, n, 0.25)
    assert not _binomial_ok(forgiven, n, 0.35) and not _binomial_ok(forgiven, n, 0.15)


@pytest.mark.parametrize("name", ["random", "mixed"])
def test_random_cooperates_half_the_time(name):
    cooperations = sum(a == C for seed in range(200) for a, _ in play(name, "always_cooperate", seed=seed)[0])
    assert _binomial_ok(cooperations, 1600, 0.5)
    biased = make_strategy("ipd", name, p_cooperate=0.9)
    game = make_game("ipd", num_rounds=400)
    episode = play_episode(game, [biased, make_strategy("ipd", "always_cooperate")], random.Random(1))
    assert _binomial_ok(sum(r.record["actions"][0] == C for r in episode.rounds), 400, 0.9)
    with pytest.raises(ValueError, match="p_cooperate"):
        make_strategy("ipd", name, p_cooperate=1.5)


def test_strategies_work_in_either_seat():
    moves, totals = play("always_cooperate", "prober")
    assert [b for _, b in moves] == [D, C, C] + [D] * 5
    assert totals == (0 + 3 + 3 + 0 * 5, 5 + 3 + 3 + 5 * 5)


# --- Axelrod cross-check -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def axelrod():
    import axelrod

    assert axelrod.__version__ == "4.13.1"
    return axelrod


def test_axelrod_strategies_are_deterministic(axelrod):
    for cls_name in AXELROD_TWINS.values():
        assert not axelrod.Classifiers["stochastic"](getattr(axelrod, cls_name)()), cls_name


def test_totals_equal_axelrod_for_all_ordered_pairs_over_200_turns(axelrod):
    game = make_game("ipd", num_rounds=200)
    ax_game = axelrod.Game(r=3, s=0, t=5, p=1)
    for a, b in itertools.product(AXELROD_TWINS, repeat=2):
        ours = play_episode(game, [make_strategy("ipd", a), make_strategy("ipd", b)], random.Random(0))
        match = axelrod.Match(
            (getattr(axelrod, AXELROD_TWINS[a])(), getattr(axelrod, AXELROD_TWINS[b])()),
            turns=200,
            game=ax_game,
        )
        ax_moves = match.play()
        assert ours.totals == match.final_score(), (a, b)
        assert [tuple(r.record["actions"]) for r in ours.rounds] == [
            (C if x == axelrod.Action.C else D, C if y == axelrod.Action.C else D) for x, y in ax_moves
        ], (a, b)


def test_envs_benchmark_runs_and_agrees_with_the_references(axelrod):
    """The benchmark's own agreement checks (IPD totals, Kuhn exploitability to 1e-9) pass; no timing asserts."""
    results = bench_games.run(repeats=1)
    assert results["ipd"]["pairs"] == 81 and results["kuhn"]["max_abs_diff"] <= 1e-9
    assert all(
        results[k][f] > 0 for k, f in [("ipd", "ours_ms_per_match"), ("kuhn", "openspiel_ms_per_call")]
    )
    assert "speedup" in bench_games.format_table(results)


def test_compact_prompt_is_the_round_and_last_joint_move_alone():
    """The compact observation names the round and the last joint move only (earlier rounds live in the
    conversation's turns), and the same joint move gives the same text whatever the scores."""
    game = make_game("ipd", num_rounds=4, prompt_style="compact")
    state = game.new_state(random.Random(0))
    assert game.observation(state, 0) == "Round 1 of 4. First round."
    game.step(state, {0: "DEFECT", 1: "COOPERATE"})
    assert game.observation(state, 0) == "Round 2 of 4. Last: you DEFECT, opponent COOPERATE."
    assert game.observation(state, 1) == "Round 2 of 4. Last: you COOPERATE, opponent DEFECT."
    game.step(state, {0: "COOPERATE", 1: "COOPERATE"})
    other = game.new_state(random.Random(0))
    for move in ("COOPERATE", "COOPERATE"):
        game.step(other, {0: move, 1: move})
    assert game.observation(state, 0) == game.observation(other, 0) == "Round 3 of 4. Last: you COOPERATE, opponent COOPERATE."
    assert "points" not in game.system_prompt(0) and len(game.system_prompt(0)) < 160
    with pytest.raises(ValueError, match="prompt_style"):
        make_game("ipd", prompt_style="short")
