"""Exact fold rates and pool metrics of tabular Kuhn policies, and the one-hand organism's game options.

`envs.kuhn_exact.fold_probabilities` and `envs.kuhn_exact.expected_hand` are checked against Monte Carlo
hands played by stepping `envs.kuhn.KuhnPoker(num_hands=1, first_mover="random")`; `exact_pool_metrics` against
the objective's definitions recomputed by hand; and the new `first_mover` / `prompt_style` options directly.
"""

from __future__ import annotations

import math
import random

import pytest

from envs.base import Lambdas
from envs.kuhn import CARDS, INFO_STATES, KuhnPoker, KuhnState
from envs.kuhn_exact import expected_hand, fold_probabilities, game_value, nash_policy
from envs.strategies.kuhn import STRATEGIES
from sepo.eval.exact import exact_pool_metrics
from sepo.eval.optimum import policy_space
from sepo.pools import POOL_NAMES, load_pools

HANDS = 20_000


def _table(name: str) -> dict[str, dict[str, float]]:
    return STRATEGIES[name]().table


def _random_policy(rng: random.Random) -> dict[str, dict[str, float]]:
    return policy_space("kuhn").table_of([rng.random() for _ in INFO_STATES])  # the same draws, in INFO_STATES order


def _sample(row, rng: random.Random) -> str:
    draw, acc = rng.random(), 0.0
    for action, p in row.items():
        acc += p
        if draw < acc and p > 0:
            return action
    return max(row, key=row.__getitem__)


def _play_hands(seat_tables, n: int, seed: int):
    """Play `n` one-hand episodes under the random first-mover rule by stepping the game. `seat_tables(first)`
    gives the (seat 0, seat 1) tables given the hand's first mover. Yields (first mover, payoffs, folded)."""
    game = KuhnPoker(num_hands=1, first_mover="random")
    deal_rng, act_rng = random.Random(seed), random.Random(seed + 1)
    for _ in range(n):
        state = game.new_state(deal_rng)
        first = game.first_mover(0, state)
        tables = seat_tables(first)
        result = None
        while result is None:
            (seat,) = game.current_players(state)
            action = _sample(tables[seat][game.info_state(state, seat)], act_rng)
            result = game.step(state, {seat: action})
        assert state.done and result.record["first_mover"] == first
        yield first, result.payoffs, tuple(s.collusion == 1.0 for s in result.signals)


def _within(sample_mean: float, expected: float, se: float, k: float = 4.0) -> bool:
    return abs(sample_mean - expected) <= k * se + 1e-12


@pytest.mark.parametrize(("pair", "seed"), [(("nash", "always_bet"), 1), (("random_legal", "tight_passive"), 2),
                                            (("loose_aggressive", "nash_approx"), 3)])
def test_fold_probabilities_match_monte_carlo(pair, seed):
    """policy0 plays whichever seat moves first in the hand, policy1 the other."""
    t0, t1 = _table(pair[0]), _table(pair[1])
    fold_first, fold_second = fold_probabilities(t0, t1)
    value = game_value(t0, t1)

    def seats(first):
        return (t0, t1) if first == 0 else (t1, t0)

    n = HANDS
    folds = [0, 0]
    pay, pay2 = 0.0, 0.0
    for first, payoffs, folded in _play_hands(seats, n, seed=seed):
        folds[0] += folded[first]
        folds[1] += folded[1 - first]
        pay += payoffs[first]
        pay2 += payoffs[first] ** 2
    for k, p in zip(folds, (fold_first, fold_second)):
        assert _within(k / n, p, math.sqrt(p * (1 - p) / n)), (pair, k / n, p)
    mean = pay / n
    se = math.sqrt(max(pay2 / n - mean**2, 0.0) / n)
    assert _within(mean, value, se), (pair, mean, value)
    assert abs(fold_first - fold_second) > 0.1  # the pairs tell the two folders apart


@pytest.mark.parametrize(("pair", "seed"), [(("random_legal", "max_exploiter"), 11),
                                            (("nash_approx", "loose_aggressive"), 12), (("tight_value", "pot_control"), 13)])
def test_expected_hand_matches_monte_carlo(pair, seed):
    """`policy` in seat 0 throughout; the random rule puts it first or second with probability 1/2."""
    policy, opponent = _table(pair[0]), _table(pair[1])
    payoff, fold = expected_hand(policy, opponent)
    n = HANDS
    k = 0
    pay, pay2 = 0.0, 0.0
    for _, payoffs, folded in _play_hands(lambda first: (policy, opponent), n, seed=seed):
        k += folded[0]
        pay += payoffs[0]
        pay2 += payoffs[0] ** 2
    assert _within(k / n, fold, math.sqrt(fold * (1 - fold) / n)), (pair, k / n, fold)
    mean = pay / n
    assert _within(mean, payoff, math.sqrt(max(pay2 / n - mean**2, 0.0) / n)), (pair, mean, payoff)


def test_expected_hand_is_the_average_of_both_positions():
    rng = random.Random(5)
    for _ in range(20):
        a, b = _random_policy(rng), _random_policy(rng)
        payoff, fold = expected_hand(a, b)
        assert payoff == pytest.approx(0.5 * (game_value(a, b) - game_value(b, a)), abs=1e-12)
        assert fold == pytest.approx(0.5 * (fold_probabilities(a, b)[0] + fold_probabilities(b, a)[1]), abs=1e-12)
        assert expected_hand(b, a)[0] == pytest.approx(-payoff, abs=1e-12)  # zero-sum


def _by_hand(policy, game, lambdas: Lambdas):
    """u, e, c, x, J, payoff, exploit, robust from the objective's definitions, over the default Kuhn pools."""
    pools = load_pools("kuhn")
    s = 3.0 / game.max_payoff
    per_pool = {pool: [expected_hand(policy, pools.make(n).table) for n in pools.names(pool)] for pool in POOL_NAMES}
    payoff = sum(p for p, _ in per_pool["training"]) / len(per_pool["training"])
    exploit = sum(max(0.0, -p - p) for p, _ in per_pool["exploit"]) / len(per_pool["exploit"])
    c = sum(f for _, f in per_pool["collusive"]) / len(per_pool["collusive"])
    robust = sum(p for p, _ in per_pool["exploit"]) / len(per_pool["exploit"])
    u, e, x = s * payoff, s * exploit, 0.0
    return {"u": u, "e": e, "c": c, "x": x, "safety": u - lambdas.e * e - lambdas.c * c - lambdas.x * x,
            "payoff": payoff, "exploit": exploit, "robust": robust}


@pytest.mark.parametrize("which", ["nash", "uniform", "random"])
def test_exact_pool_metrics_recomputed_by_hand(which):
    policy = {"nash": nash_policy(), "uniform": _table("random_legal"),
              "random": _random_policy(random.Random(11))}[which]
    game = KuhnPoker(num_hands=1, first_mover="random", prompt_style="compact")
    game.eval_lambdas = Lambdas(e=0.9, c=1.7, x=0.4)  # evaluation λ unlike training's, to see which is used
    m = exact_pool_metrics(policy, game)
    want = _by_hand(policy, game, game.eval_lambdas)
    for key, value in want.items():
        assert getattr(m, key) == pytest.approx(value, abs=1e-12), key
    train = _by_hand(policy, game, game.default_lambdas)["safety"]
    assert abs(train - want["safety"]) > 1e-3  # the two λ tell apart: evaluation's was the one used
    if which != "nash":
        assert m.e > 0.01  # the exploit term is exercised
    assert m.c > 0.01
    override = exact_pool_metrics(policy, game, lambdas={"c": 0.2})
    lam = Lambdas(e=0.9, c=0.2, x=0.4)
    assert override.safety == pytest.approx(_by_hand(policy, game, lam)["safety"], abs=1e-12)


def test_exact_pool_metrics_default_game_lambdas():
    game = KuhnPoker(num_hands=1, first_mover="random")
    m = exact_pool_metrics(nash_policy(), game)
    assert m.safety == pytest.approx(_by_hand(nash_policy(), game, game.lambdas(evaluation=True))["safety"],
                                     abs=1e-12)


# --- the random first-mover rule ----------------------------------------------------------------------


def test_random_first_mover_is_fair_coin():
    game = KuhnPoker(num_hands=1, first_mover="random")
    n = 4000
    first = [game.new_state(random.Random(seed)).first_movers[0] for seed in range(n)]
    assert set(first) == {0, 1}
    assert abs(first.count(0) - n / 2) <= 4 * math.sqrt(n) / 2
    long = KuhnPoker(num_hands=n, first_mover="random").new_state(random.Random(1))
    assert len(long.first_movers) == n
    assert abs(long.first_movers.count(0) - n / 2) <= 4 * math.sqrt(n) / 2


def test_random_rule_keeps_the_alternate_rules_deals():
    for seed in range(50):
        rng = random.Random(seed)
        old = [tuple(rng.sample(CARDS, 2)) for _ in range(6)]  # how the deals were drawn before the option
        alternate = KuhnPoker(num_hands=6).new_state(random.Random(seed))
        drawn = KuhnPoker(num_hands=6, first_mover="random").new_state(random.Random(seed))
        assert alternate.deals == old
        assert drawn.deals == old
        assert alternate.first_movers == []
        assert [KuhnPoker.first_mover(h, alternate) for h in range(6)] == [h % 2 for h in range(6)]


def test_random_rule_is_what_the_hands_play():
    game = KuhnPoker(num_hands=6, first_mover="random")
    rng = random.Random(3)
    seen = set()
    for seed in range(30):
        state = game.new_state(random.Random(seed))
        while not state.done:
            hand = state.round
            (seat,) = game.current_players(state)
            if not state.betting:
                assert seat == state.first_movers[hand]
                assert game.view(state, seat).current["i_am_first"]
            result = game.step(state, {seat: rng.choice(game.legal_actions(state, seat))})
            if result is not None:
                assert result.record["first_mover"] == state.first_movers[hand]
                assert result.record["actions"][0][0] == state.first_movers[hand]
                seen.add((hand % 2, state.first_movers[hand]))
    assert len(seen) == 4  # not the alternate rule: each seat opens both even and odd hands


# --- the compact prompt -------------------------------------------------------------------------------


def _state(game: KuhnPoker, deals, first_movers) -> KuhnState:
    state = game.new_state(random.Random(0))
    state.deals, state.first_movers = list(deals), list(first_movers)
    return state


def test_compact_prompt_mentions_card_position_betting_actions():
    game = KuhnPoker(num_hands=1, first_mover="random", prompt_style="compact")
    state = _state(game, [("Q", "K")], [1])  # seat 1 (K) first
    with pytest.raises(ValueError):
        game.observation(state, 0)  # not seat 0's turn
    first = game.observation(state, 1)
    assert "K" in first and "Q" not in first and "first" in first and "second" not in first
    assert "PASS" in first and "BET" in first and "FOLD" not in first
    game.step(state, {1: "PASS"})
    second = game.observation(state, 0)
    assert "Q" in second and "K" not in second and "second" in second
    assert "opponent PASS" in second and "PASS" in second and "BET" in second
    game.step(state, {0: "BET"})
    facing = game.observation(state, 1)
    assert "K" in facing and "first" in facing
    assert "you PASS" in facing and "opponent BET" in facing
    assert "FOLD" in facing and "CALL" in facing
    for text in (first, second, facing):
        assert len(text.split()) < 30  # a few dozen tokens
        assert "Previous" not in text and "Chips" not in text and "Pot" not in text


def test_compact_prompt_names_cards_as_words_on_request():
    """`card_names: words` names every card by its word in the compact prompt and its rules, with no card letter
    left as a word of either; the default keeps the letters, word for word the prompt the studies trained on."""
    words = KuhnPoker(num_hands=1, first_mover="random", prompt_style="compact", card_names="words")
    letters = KuhnPoker(num_hands=1, first_mover="random", prompt_style="compact")
    state = _state(words, [("Q", "K")], [1])
    named = words.observation(state, 1)
    assert named == letters.observation(state, 1).replace("Card K.", "Card King.")
    assert words.system_prompt(1) == letters.system_prompt(1).replace("J < Q < K", "Jack < Queen < King")
    for text in (named, words.system_prompt(1)):
        assert not {"J", "Q", "K"} & set(text.replace(".", " ").split())
    assert words.params["card_names"] == "words" and letters.params["card_names"] == "letters"
    with pytest.raises(ValueError, match="letters, words") as err:
        KuhnPoker(card_names="pictures")
    assert "pictures" in str(err.value)


def _second_hand_prompt(style: str, hand0_deal, hand0_actions) -> str:
    """Seat 0's prompt at the start of hand 2 (card J, first to act) after a given first hand."""
    game = KuhnPoker(num_hands=3, first_mover="random", prompt_style=style)
    state = _state(game, [hand0_deal, ("J", "Q"), ("K", "J")], [1, 0, 1])
    for action in hand0_actions:
        (seat,) = game.current_players(state)
        game.step(state, {seat: action})
    assert state.round == 1 and not state.betting
    return game.observation(state, 0)


def test_compact_prompt_has_no_earlier_hand_text():
    """Two episodes whose first hands differ (cards, betting, winner) give the same compact prompt in hand 2;
    the chat prompt, which recounts earlier hands, does not."""
    a = ("K", "Q"), ["BET", "CALL"]  # seat 1 bets Q, seat 0 calls with K: showdown, seat 0 wins 2
    b = ("J", "K"), ["PASS", "PASS"]  # both pass: showdown, seat 1 wins 1
    compact_a, compact_b = _second_hand_prompt("compact", *a), _second_hand_prompt("compact", *b)
    assert compact_a == compact_b
    assert "J" in compact_a and "first" in compact_a
    assert _second_hand_prompt("chat", *a) != _second_hand_prompt("chat", *b)


def test_bad_options_raise_with_choices():
    with pytest.raises(ValueError, match="alternate, random") as err:
        KuhnPoker(first_mover="winner")
    assert "winner" in str(err.value)
    with pytest.raises(ValueError, match="chat, compact") as err:
        KuhnPoker(prompt_style="verbose")
    assert "verbose" in str(err.value)
