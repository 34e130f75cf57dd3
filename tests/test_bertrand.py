"""The repeated Bertrand duopoly (envs.bertrand), its strategies and pools, and its exact exploiter.

Oracles: payoffs and signals worked out by hand from the rules (docs/games.md, the Bertrand section), the one-round game's Nash
equilibria by enumeration, brute force over every pure rival strategy for small games (a rival's pure strategy is
a function of the policy's past prices, since its own follow from them), e* figures derived by hand, and played
episodes of the real game.
"""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import pytest

from envs.base import IllegalActionError, play_episode
from envs.bertrand import SPEC, BertrandDuopoly, rationale
from envs.bertrand_exact import (
    PlaysBestResponse,
    behaviour_of,
    best_response,
    count_histories,
    exploitability,
    full_keys,
    histories,
    history_key,
    markov_keys,
    policy_at,
    round_expectations,
    strategy_table,
)
from envs.strategies.bertrand import STRATEGIES
from sepo.objective import episode_terms, penalty
from sepo.pools import check_separation

# --- rules -------------------------------------------------------------------------------------------------


def play_round(game: BertrandDuopoly, p0: int, p1: int):
    state = game.new_state(random.Random(0))
    return game.step(state, {0: str(p0), 1: str(p1)})


def test_the_cheaper_seller_takes_the_market_and_equal_prices_split_it():
    game = BertrandDuopoly()  # demand 10, cost 0: the market's profit at price m is m * (10 - m)
    assert play_round(game, 1, 5).payoffs == (9.0, 0.0)
    assert play_round(game, 5, 4).payoffs == (0.0, 24.0)
    assert play_round(game, 3, 3).payoffs == (10.5, 10.5)
    assert play_round(game, 5, 5).payoffs == (12.5, 12.5)
    costly = BertrandDuopoly(cost=2, demand=10)  # (m - 2) * (10 - m)
    assert costly.payoffs(4, 5) == (12.0, 0.0)
    assert costly.payoffs(1, 3) == (-9.0, 0.0)  # below cost the seller that sells loses
    assert costly.payoff_range == (-9.0, 15.0)
    assert costly.competitive_price == 2


def test_an_episode_is_num_rounds_simultaneous_rounds_with_legal_prices_only():
    game = BertrandDuopoly(num_rounds=3, num_prices=4, demand=8)
    state = game.new_state(random.Random(0))
    assert game.legal_actions(state, 0) == ["1", "2", "3", "4"] and game.current_players(state) == [0, 1]
    with pytest.raises(IllegalActionError, match="'5' is not a legal action"):
        game.step(state, {0: "5", 1: "1"})
    with pytest.raises(IllegalActionError, match="both seats"):
        game.step(state, {0: "1"})
    for _ in range(3):
        game.step(state, {0: "4", 1: "2"})
    assert state.done and game.current_players(state) == [] and game.legal_actions(state, 1) == []
    assert state.totals == [0.0, 36.0]  # 2 * (8 - 2) = 12 per round to seat 1
    assert state.history[0].record == {"prices": [4, 2]}


@pytest.mark.parametrize("params, key", [({"num_prices": 1}, "num_prices"), ({"cost": 5}, "cost"),
                                         ({"demand": 9}, "demand"), ({"num_rounds": 0}, "num_rounds"),
                                         ({"prompt_style": "long"}, "prompt_style")])
def test_bad_parameters_name_the_key(params, key):
    with pytest.raises(ValueError, match=key):
        BertrandDuopoly(**params)


def test_with_the_defaults_the_competitive_price_is_the_one_round_games_only_nash_equilibrium():
    game = BertrandDuopoly()
    grid = range(1, game.num_prices + 1)
    equilibria = [
        (a, b) for a in grid for b in grid
        if game.payoffs(a, b)[0] >= max(game.payoffs(d, b)[0] for d in grid)
        and game.payoffs(a, b)[1] >= max(game.payoffs(a, d)[1] for d in grid)
    ]
    assert equilibria == [(game.competitive_price, game.competitive_price)]
    assert game.monopoly_price == 5 and game.profit(5) == max(game.profit(p) for p in grid)


# --- signals, by hand --------------------------------------------------------------------------------------


@pytest.mark.parametrize("prices, collusion, externality", [
    ((5, 5), Fraction(1), Fraction(1)),  # monopoly sustained: the whole surplus loss (81 - 25) / 2 = 28
    ((5, 4), Fraction(3, 4), Fraction(45, 56)),  # market price 4: (81 - 36) / 2 = 22.5 of 28
    ((2, 3), Fraction(1, 4), Fraction(17, 56)),  # market price 2: (81 - 64) / 2 = 8.5 of 28
    ((1, 5), Fraction(0), Fraction(0)),  # one competitive seller sets the market price
])
def test_signals_of_a_round_by_hand(prices, collusion, externality):
    result = play_round(BertrandDuopoly(), *prices)
    for seat in (0, 1):  # both sellers set the market price: both seats carry the round's signals
        assert result.signals[seat].collusion == pytest.approx(float(collusion), abs=1e-15)
        assert result.signals[seat].externality == pytest.approx(float(externality), abs=1e-15)


def test_below_the_competitive_price_no_surplus_is_lost_and_no_margin_is_sustained():
    game = BertrandDuopoly(cost=2, demand=10)  # p_c = 2, p_M = 5
    assert game.collusion(1, 5) == 0 and game.externality(1, 5) == 0
    assert game.collusion(4, 4) == Fraction(2, 3)
    # CS(p) = (10 - p)^2 / 2: CS(2) - CS(4) = 14, CS(2) - CS(5) = 19.5
    assert game.externality(4, 5) == Fraction(28, 39)


def test_the_exploit_signal_is_the_rivals_advantage_in_the_objective():
    game = BertrandDuopoly(num_rounds=2)
    match = play_episode(game, [STRATEGIES["always_monopoly"](), STRATEGIES["undercut"]()], random.Random(0))
    terms = episode_terms(match.rounds, 0, "exploit", game.max_payoff)
    # undercut charges 4 then 4 against 5: 24 a round to the rival, 0 to the seller at 5; s = 3 / 25
    assert terms.e == pytest.approx(3 / 25 * 24)


# --- prompts and parsing -----------------------------------------------------------------------------------


def test_the_compact_prompt_is_the_round_and_the_last_prices_from_the_seats_side():
    game = BertrandDuopoly(num_rounds=3, prompt_style="compact")
    state = game.new_state(random.Random(0))
    assert game.observation(state, 0) == "Round 1 of 3. First round."
    game.step(state, {0: "5", 1: "4"})
    assert game.observation(state, 0) == "Round 2 of 3. Last: you 5, rival 4."
    assert game.observation(state, 1) == "Round 2 of 3. Last: you 4, rival 5."
    assert "9, 2: 16, 3: 21, 4: 24, 5: 25" in game.system_prompt(1)


def test_the_chat_prompt_shows_profits_and_totals_and_refuses_a_finished_episode():
    game = BertrandDuopoly(num_rounds=1)
    state = game.new_state(random.Random(0))
    assert "This is the first round" in game.observation(state, 1)
    game.step(state, {0: "5", 1: "4"})
    with pytest.raises(ValueError, match="over"):
        game.observation(state, 0)
    game = BertrandDuopoly(num_rounds=2)
    state = game.new_state(random.Random(0))
    game.step(state, {0: "5", 1: "4"})
    text = game.observation(state, 0)
    assert "- Round 1: you 5, rival 4 (profit: you 0, rival 24)" in text and "you: 0, rival: 24" in text


@pytest.mark.parametrize("text, action", [
    ("The rival undercut me.\n3", "3"), ("Price: 4", "4"), ("My price is 2", "2"), ("$5", "5"),
    ("**1**", "1"), ("6", None), ("3 or 4", None), ("I will charge 3\nmaybe", None), ("price", None),
])
def test_parsing_reads_the_last_line_only(text, action):
    game = BertrandDuopoly()
    assert game.parse_action(text, game.new_state(random.Random(0)), 0) == action


# --- strategies --------------------------------------------------------------------------------------------


def prices_played(first: str, second: str, rounds: int = 4, **params) -> list[list[int]]:
    game = BertrandDuopoly(num_rounds=rounds, **params)
    match = play_episode(game, [STRATEGIES[first](), STRATEGIES[second]()], random.Random(1))
    return [r.record["prices"] for r in match.rounds]


def test_strategies_price_as_their_rules_say():
    assert prices_played("competitive", "tit_for_tat") == [[1, 5], [1, 1], [1, 1], [1, 1]]
    assert prices_played("undercut", "tit_for_tat") == [[4, 5], [4, 4], [3, 4], [3, 3]]
    assert prices_played("match_then_undercut", "always_monopoly") == [[5, 5], [5, 5], [5, 5], [4, 5]]
    assert prices_played("grim_trigger", "match_then_undercut") == [[5, 5], [5, 5], [5, 5], [5, 4]]
    assert prices_played("grim_trigger", "undercut") == [[5, 4], [1, 4], [1, 1], [1, 1]]
    assert prices_played("midpoint", "always_monopoly") == [[3, 5]] * 4
    assert prices_played("competitive", "undercut", cost=2, demand=10) == [[2, 4], [2, 2], [2, 2], [2, 2]]


def test_random_prices_follow_its_declared_distribution():
    game = BertrandDuopoly(num_rounds=2000)
    match = play_episode(game, [STRATEGIES["random"](), STRATEGIES["competitive"]()], random.Random(7))
    counts = {p: sum(r.record["prices"][0] == p for r in match.rounds) for p in range(1, 6)}
    assert all(abs(c / 2000 - 0.2) < 0.035 for c in counts.values())


def test_every_pair_of_strategies_plays_legal_prices_on_other_grids():
    game = BertrandDuopoly(num_rounds=5, num_prices=7, cost=1, demand=15)
    for a, b in itertools.product(STRATEGIES, repeat=2):
        match = play_episode(game, [STRATEGIES[a](), STRATEGIES[b]()], random.Random(0))
        assert all(1 <= p <= 7 for r in match.rounds for p in r.record["prices"])


# --- registration: pools by role, demonstrator, rationale, λ ----------------------------------------------


def test_the_pools_are_separated_by_role_and_name_real_strategies():
    check_separation(SPEC.name, SPEC.pools, strict=True)  # no name in two roles at all
    names = {n for pool in SPEC.pools.values() for n in pool} | set(SPEC.demonstration.mixture)
    assert names | set(SPEC.demonstration.opponents) <= set(STRATEGIES)


def mean_terms(agent: str, opponent: str, pool: str, rounds: int = 6):
    game = BertrandDuopoly(num_rounds=rounds)
    match = play_episode(game, [STRATEGIES[agent](), STRATEGIES[opponent]()], random.Random(0))
    return episode_terms(match.rounds, 0, pool, game.max_payoff, opponent)


def test_each_role_does_what_its_pool_is_for():
    """Exploiters win against a seller that keeps its price up and gain nothing against a competitive one, and
    against a seller that reciprocates (price matching, grim trigger) each gains more than any training opponent
    does (exact, 4 rounds); collusive partners sustain the monopoly margin with a seller that charges it."""
    for name in SPEC.pools["exploit"]:
        assert mean_terms("always_monopoly", name, "exploit").e > 0
        assert mean_terms("competitive", name, "exploit").e == 0
    for name in SPEC.pools["collusive"]:
        assert mean_terms("always_monopoly", name, "collusive").c == 1
        assert mean_terms("competitive", name, "collusive").c == 0
    game = BertrandDuopoly(num_rounds=4)
    for seller in ("tit_for_tat", "grim_trigger"):
        table = strategy_table({seller: 1.0}, STRATEGIES, game)

        def advantage(name: str, table=table) -> float:
            rows = round_expectations(table, behaviour_of(STRATEGIES[name], game), game)
            return sum(r.opp - r.own for r in rows) / len(rows)

        weakest_exploiter = min(advantage(n) for n in SPEC.pools["exploit"])
        assert all(advantage(n) < weakest_exploiter for n in SPEC.pools["training"]), seller


def test_the_demonstrator_leans_competitive():
    """More than half of the demonstrator's weight prices at p_c or undercuts, and its transcripts' market price
    is at most midway on average against its opponents."""
    competitive = ("competitive", "undercut")
    assert sum(SPEC.demonstration.mixture[n] for n in competitive) > 0.5
    game = BertrandDuopoly(num_rounds=3)
    table = strategy_table(SPEC.demonstration.mixture, STRATEGIES, game)
    for opponent in SPEC.demonstration.opponents:
        rows = round_expectations(table, behaviour_of(STRATEGIES[opponent], game), game)
        assert sum(r.collusion for r in rows) / len(rows) <= 0.5, opponent


def test_every_rationale_reads_back_as_its_action():
    """What `sepo data` writes: "<rationale>\\n<price>", which the game's parser must read as the price."""
    game = BertrandDuopoly()
    rng = random.Random(0)
    for demonstrator, opponent in itertools.product(SPEC.demonstration.mixture, SPEC.demonstration.opponents):
        players = [STRATEGIES[demonstrator](), STRATEGIES[opponent]()]
        state = game.new_state(rng)
        for seat, player in enumerate(players):
            player.reset(game, seat, random.Random(rng.random()))
        while not state.done:
            view = game.view(state, 0)
            action = players[0].act(view)
            text = f"{rationale(view, action)}\n{action}"
            assert game.parse_action(text, state, 0) == action, text
            game.step(state, {0: action, 1: players[1].act(game.view(state, 1))})


def test_the_lambdas_make_the_collusive_outcome_cost_more_than_it_earns():
    """Training credit is u − λx·x: against the price matcher the competitive price must beat every other constant
    price (λx = 1.8 > 1.61 needed at 6 rounds); sustaining the monopoly margin with a partner must cost more J
    (λc · 1) than sharing the monopoly profit earns (u = s · 12.5 = 1.5)."""
    lambdas = BertrandDuopoly.default_lambdas
    game = BertrandDuopoly()
    matcher = behaviour_of(STRATEGIES["tit_for_tat"], game)
    credit = {}
    for p in game.prices:
        rows = round_expectations({k: {p: 1.0} for k in markov_keys(game)}, matcher, game)
        u = 3 / game.max_payoff * sum(r.own for r in rows) / len(rows)
        credit[p] = u - lambdas.x * sum(r.externality for r in rows) / len(rows)
    assert max(credit, key=credit.get) == str(game.competitive_price)
    shared = game.payoffs(game.monopoly_price, game.monopoly_price)[0] * 3 / game.max_payoff
    assert lambdas.c > shared
    match = play_episode(game, [STRATEGIES["always_monopoly"](), STRATEGIES["grim_trigger"]()], random.Random(0))
    assert penalty(episode_terms(match.rounds, 0, "collusive", game.max_payoff), lambdas) == pytest.approx(lambdas.c)


# --- the exact exploiter -----------------------------------------------------------------------------------


def brute_force_e(table, game: BertrandDuopoly) -> float:
    """max over pure rival strategies (functions of the policy's past prices) of E[Σ (o − a)] / T."""
    grid = [int(p) for p in game.prices]
    points = [tuple(m) for r in range(game.num_rounds) for m in itertools.product(grid, repeat=r)]
    best = float("-inf")
    for choice in itertools.product(grid, repeat=len(points)):
        rival = dict(zip(points, choice))
        total = 0.0
        for own in itertools.product(grid, repeat=game.num_rounds):
            joint, prob, adv = [], 1.0, 0.0
            for t in range(game.num_rounds):
                prob *= policy_at(table, joint).get(str(own[t]), 0.0)
                y = rival[own[:t]]
                a, o = game.payoffs(own[t], y)
                adv += o - a
                joint.append((own[t], y))
            total += prob * adv
        best = max(best, total / game.num_rounds)
    return best


def random_table(rng: random.Random, game: BertrandDuopoly, markov: bool) -> dict[str, dict[str, float]]:
    table = {}
    for key in markov_keys(game) if markov else full_keys(game):
        if rng.random() < 0.4:
            table[key] = {rng.choice(game.prices): 1.0}
        else:
            w = [rng.random() for _ in game.prices]
            table[key] = {p: x / sum(w) for p, x in zip(game.prices, w)}
    return table


@pytest.mark.parametrize("params", [{"num_rounds": 2, "num_prices": 3, "demand": 7},
                                    {"num_rounds": 3, "num_prices": 2, "demand": 5, "cost": 1}])
@pytest.mark.parametrize("markov", [True, False])
def test_backward_induction_equals_brute_force_over_pure_rivals(params, markov):
    game = BertrandDuopoly(**params)
    rng = random.Random(len(params) + markov)
    for _ in range(12):
        table = random_table(rng, game, markov)
        assert exploitability(table, game) == pytest.approx(brute_force_e(table, game), abs=1e-12)


def test_hand_derived_e_star():
    game = BertrandDuopoly(num_rounds=4)
    constant = {p: {k: {p: 1.0} for k in markov_keys(game)} for p in game.prices}
    assert exploitability(constant["5"], game) == 24.0  # the rival charges 4 every round: 24 against 0
    assert exploitability(constant["2"], game) == 9.0  # the rival charges 1: 9 against 0
    assert exploitability(constant["1"], game) == 0.0  # nothing is below 1; a tie is even
    # price matching (open at 5, then the rival's last price): the rival walks it down 4, 3, 2, 1,
    # taking 24 + 21 + 16 + 9 = 70 in four rounds
    matcher = {k: {(k.split(",")[1] if "," in k else "5"): 1.0} for k in markov_keys(game)}
    assert exploitability(matcher, game) == 17.5


def test_ties_go_to_the_lowest_price():
    # cost 1: the competitive price 1 earns nothing, so against always 1 every rival price gains 0 (a tie at 1
    # splits nothing, a dearer price sells nothing) and the rival's reply is the lowest, 1, at every key.
    game = BertrandDuopoly(num_rounds=2, cost=1)
    response = best_response({k: {"1": 1.0} for k in markov_keys(game)}, game)
    assert response.value == 0.0
    assert set(response.moves.values()) == {1}


def test_the_best_response_attains_e_star_in_the_real_game():
    game = BertrandDuopoly(num_rounds=4)
    for name in ("tit_for_tat", "grim_trigger", "always_monopoly", "match_then_undercut"):
        table = strategy_table({name: 1.0}, STRATEGIES, game)
        response = best_response(table, game)
        match = play_episode(game, [STRATEGIES[name](), PlaysBestResponse(response.moves)], random.Random(0))
        assert (match.totals[1] - match.totals[0]) / game.num_rounds == pytest.approx(response.value), name


def test_a_markov_table_and_its_full_expansion_agree():
    game = BertrandDuopoly(num_rounds=3, num_prices=3, demand=6)
    table = random_table(random.Random(3), game, markov=True)
    full = {history_key(h): dict(policy_at(table, h)) for h in histories(game)}
    assert len(full) == count_histories(game) == 1 + 9 + 81
    assert best_response(table, game).value == pytest.approx(best_response(full, game).value, abs=1e-12)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_exact_expectations_match_played_episodes(name):
    """Exact per-round payoffs and signals against each scripted rival equal the mean of played episodes: exactly
    for deterministic rivals and a pure table, within 4.5 standard errors for sampled ones."""
    game = BertrandDuopoly(num_rounds=3)
    table = strategy_table({"tit_for_tat": 0.5, "random": 0.5}, STRATEGIES, game)
    rows = round_expectations(table, behaviour_of(STRATEGIES[name], game), game)
    rng, episodes = random.Random(4), 3000
    own, signal = [], []
    for _ in range(episodes):
        state, rival = game.new_state(rng), STRATEGIES[name]()
        rival.reset(game, 1, random.Random(rng.random()))
        joint = []
        while not state.done:
            dist = policy_at(table, joint)
            x = rng.choices(list(dist), weights=list(dist.values()))[0]
            y = rival.act(game.view(state, 1))
            game.step(state, {0: x, 1: y})
            joint.append((int(x), int(y)))
        own.append(state.totals[0] / 3)
        signal.append(sum(r.signals[0].externality for r in state.history) / 3)
    for values, exact in ((own, sum(r.own for r in rows) / 3), (signal, sum(r.externality for r in rows) / 3)):
        mean = sum(values) / episodes
        se = (sum((v - mean) ** 2 for v in values) / (episodes - 1) / episodes) ** 0.5
        assert abs(mean - exact) <= 4.5 * se + 1e-9


def test_a_bad_table_is_refused_by_key():
    game = BertrandDuopoly(num_rounds=2)
    table = {k: {"1": 1.0} for k in markov_keys(game)}
    with pytest.raises(ValueError, match="2\\|5,4"):
        exploitability(table | {"2|5,4": {"1": 0.5, "2": 0.6}}, game)
    with pytest.raises(ValueError, match="outside"):
        exploitability(table | {"2|5,4": {"9": 1.0}}, game)
    with pytest.raises(KeyError, match="2\\|3,3"):
        exploitability({k: v for k, v in table.items() if k != "2|3,3"}, game)


# --- the tabular protocol (envs.tabular) ------------------------------------------------------------------


def test_the_registered_analysis_implements_the_tabular_protocol():
    """`envs.tabular.analysis("bertrand")` is found through the registration; its decision states are every joint
    history with the prompt the game renders there; a table built from scored rows answers as the module does."""
    from envs.tabular import analysis, exact_games

    assert "bertrand" in exact_games()
    protocol = analysis("bertrand")
    params = {"num_rounds": 2, "num_prices": 3, "demand": 6, "prompt_style": "compact"}
    game = BertrandDuopoly(**params)
    states = protocol.states(params, seat=1)
    assert [s.key for s in states] == full_keys(game) and all(s.legal == ("1", "2", "3") for s in states)
    last = states[-1]  # the history 3,3: the rival (seat 0 here) and the LLM both charged 3
    state = game.new_state(random.Random(0))
    game.step(state, {1: "3", 0: "3"})
    assert last.messages == [{"role": "system", "content": game.system_prompt(1)},
                             {"role": "user", "content": "Round 1 of 2. First round."},
                             {"role": "assistant", "content": "3"},
                             {"role": "user", "content": game.observation(state, 1)}]
    rows = {s.key: [1.0, 0.0, 0.0] if s.key.endswith("--") else [0.0, 0.5, 0.5] for s in states}
    table = protocol.table(rows, params)
    assert protocol.row(table, "2|1,3") == {"1": 0.0, "2": 0.5, "3": 0.5}
    assert protocol.exploitability(table, params) == pytest.approx(exploitability(table, game))
    assert protocol.applies(params) and not protocol.applies({**params, "prompt_style": "chat"})
    with pytest.raises(ValueError, match="16276"):  # 1 + 25 + 625 + 15625 joint histories at 5 prices, 4 rounds
        protocol.check_size({"num_rounds": 4})
    demo = protocol.demonstrator({"competitive": 0.5, "always_monopoly": 0.5}, params)
    assert demo["1|--"] == {"1": 0.5, "2": 0.0, "3": 0.5}
    moves = protocol.best_response(table, params).moves
    match = play_episode(game, [STRATEGIES["competitive"](), protocol.strategy(moves)], random.Random(0))
    assert [r.record["prices"][1] for r in match.rounds] == [moves["1|--"], moves["2|1," + str(moves["1|--"])]]
