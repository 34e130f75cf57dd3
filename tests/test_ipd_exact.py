"""The exact IPD exploiter (envs.ipd_exact) against brute force and the method's published figures.

Oracles: brute force over every pure opponent strategy for T = 3 and 4 (an opponent's pure strategy is a
function of the policy's past moves, since its own past moves follow from them: 2^(2^T - 1) strategies), the
method's IPD figures (always-cooperate 5.000, tit-for-tat 1.250 at T = 4), always-defect 0, and sampled
episodes of the real game for the exact payoffs.
"""

from __future__ import annotations

import itertools
import random

import pytest

from envs import make_game
from envs.ipd import COOPERATE, DEFECT
from envs.ipd_exact import (
    Payoffs,
    PlaysBestResponse,
    behaviour_of,
    best_response,
    expected_payoffs,
    exploitability,
    full_keys,
    histories,
    history_key,
    markov_keys,
    policy_at,
)
from envs.strategies.ipd import STRATEGIES


def brute_force_e(table: dict[str, float], rounds: int, payoffs: Payoffs = Payoffs()) -> float:
    """max over pure opponent strategies (functions of the policy's past moves) of E[Σ (o − a)] / T."""
    decision_points = [tuple(m) for r in range(rounds) for m in itertools.product("CD", repeat=r)]
    best = float("-inf")
    for choice in itertools.product("CD", repeat=len(decision_points)):
        strategy = dict(zip(decision_points, choice))
        total = 0.0
        for own in itertools.product("CD", repeat=rounds):  # the policy's moves, with their probability
            joint, prob, adv = [], 1.0, 0.0
            for t in range(rounds):
                p = policy_at(table, joint)
                prob *= p if own[t] == "C" else 1.0 - p
                y = strategy[own[:t]]
                a, o = payoffs.pair(own[t], y)
                adv += o - a
                joint.append((own[t], y))
            total += prob * adv
        best = max(best, total / rounds)
    return best


def random_table(rng: random.Random, rounds: int, markov: bool) -> dict[str, float]:
    keys = markov_keys(rounds) if markov else full_keys(rounds)
    return {k: rng.choice([0.0, 1.0, rng.random()]) for k in keys}


def tit_for_tat(rounds: int) -> dict[str, float]:
    return {k: 1.0 if k.endswith("--") or k.endswith("C") else 0.0 for k in markov_keys(rounds)}


@pytest.mark.parametrize("rounds", [3, 4])
@pytest.mark.parametrize("markov", [True, False])
def test_backward_induction_equals_brute_force_over_pure_opponents(rounds, markov):
    rng = random.Random(rounds * 10 + markov)
    for _ in range(4 if rounds == 4 else 150):
        table = random_table(rng, rounds, markov)
        assert exploitability(table, rounds) == pytest.approx(brute_force_e(table, rounds), abs=1e-12)


def test_the_methods_published_ipd_figures_and_always_defect():
    keys = markov_keys(4)
    assert exploitability(dict.fromkeys(keys, 1.0), 4) == pytest.approx(5.0)  # always-cooperate
    assert exploitability(tit_for_tat(4), 4) == pytest.approx(1.25)  # 5 in round 1, then 0: 5/4
    assert exploitability(dict.fromkeys(keys, 0.0), 4) == pytest.approx(0.0)  # always-defect


def test_the_best_response_is_a_strategy_that_attains_e_star_in_the_real_game():
    """Played in the real game against the policy it answers, the best response's mean per-round advantage
    is e* (exact, since the sampled policy is pure here; the mixed case is checked against sampling)."""
    game = make_game("ipd", num_rounds=4)
    for table, rounds in ((tit_for_tat(4), 4), (dict.fromkeys(markov_keys(4), 1.0), 4)):
        br = best_response(table, rounds)
        state, opponent, policy_moves = game.new_state(random.Random(0)), PlaysBestResponse(br.moves), []
        opponent.reset(game, 1, random.Random(0))
        while not state.done:
            x = "C" if policy_at(table, policy_moves) >= 0.5 else "D"
            y = opponent.act(game.view(state, 1))
            game.step(state, {0: COOPERATE if x == "C" else DEFECT, 1: y})
            policy_moves.append((x, y[0]))
        assert (state.totals[1] - state.totals[0]) / rounds == pytest.approx(br.value)


def test_a_markov_table_and_its_full_expansion_have_the_same_best_response():
    rng = random.Random(5)
    table = random_table(rng, 4, markov=True)
    full = {history_key(h): policy_at(table, h) for h in histories(4)}
    assert best_response(table, 4).value == pytest.approx(best_response(full, 4).value, abs=1e-12)
    assert best_response(table, 4).moves == best_response(full, 4).moves


@pytest.mark.parametrize("name", ["tit_for_tat", "generous_tit_for_tat", "mixed", "grim_trigger",
                                  "always_defect", "alternating_defect"])
def test_exact_payoffs_against_each_pool_member_match_sampled_episodes(name):
    """expected_payoffs against a member's declared behaviour equals the mean of real episodes (within 4.5
    standard errors over 4,000 episodes), the policy sampled from its table."""
    game = make_game("ipd", num_rounds=4)
    table = random_table(random.Random(11), 4, markov=True)
    exact_own, _ = expected_payoffs(table, behaviour_of(STRATEGIES[name], game), 4)
    rng, values = random.Random(3), []
    for _ in range(4000):
        state, opponent, joint = game.new_state(rng), STRATEGIES[name](), []
        opponent.reset(game, 1, random.Random(rng.random()))
        while not state.done:
            x = "C" if rng.random() < policy_at(table, joint) else "D"
            y = opponent.act(game.view(state, 1))
            game.step(state, {0: COOPERATE if x == "C" else DEFECT, 1: y})
            joint.append((x, y[0]))
        values.append(state.totals[0] / 4)
    mean = sum(values) / len(values)
    se = (sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values)) ** 0.5
    assert abs(mean - exact_own) <= 4.5 * se + 1e-9


def test_a_probability_outside_zero_one_is_refused_by_key():
    table = dict.fromkeys(markov_keys(3), 0.5) | {"2|CD": 1.5}
    with pytest.raises(ValueError, match="2\\|CD"):
        exploitability(table, 3)
