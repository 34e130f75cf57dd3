"""The exact single-issue negotiation exploiter (envs.negotiation_exact) against brute force, hand-derived figures
and the real game, and its oracle through the adaptive hook and `sepo eval` on a tiny model.

Oracles: brute force over every pure opponent strategy (a function of the policy's past demands, since the
opponent's own past demands follow from them: K^(1 + K + ... + K^(T−1)) strategies for K legal demands) in small
games at T = 2, 3 and 4, with the payoff rule written out here from the rules; figures derived by hand in comments;
and the best response played through the real game, the policy's draws enumerated with their probabilities.
"""

from __future__ import annotations

import itertools
import json
import random

import pytest

from envs import make_game
from envs.negotiation_exact import (
    PlaysBestResponse,
    best_response,
    demands,
    exploitability,
    full_keys,
    history_key,
    markov_keys,
)


def paid(x: int, y: int, pie: int) -> tuple[int, int]:
    """The rules: both demands are paid if they fit in the pie, else both get 0."""
    return (x, y) if x + y <= pie else (0, 0)


def table_at(table, history):
    """The distribution at `history`, full key first, then the Markov key (written out here, not imported)."""
    r = len(history) + 1
    full = f"{r}|" + (".".join(f"{x},{y}" for x, y in history) or "--")
    if full in table:
        return table[full]
    return table[f"{r}|" + (f"{history[-1][0]},{history[-1][1]}" if history else "--")]


def brute_force_e(table, game) -> float:
    """max over pure opponent strategies of E[Σ (o − a)] / T."""
    ks, rounds, pie = demands(game), game.num_rounds, game.pie
    points = [tuple(m) for r in range(rounds) for m in itertools.product(ks, repeat=r)]  # the policy's past demands
    best = float("-inf")
    for choice in itertools.product(ks, repeat=len(points)):
        strategy = dict(zip(points, choice))
        total = 0.0
        for own in itertools.product(ks, repeat=rounds):
            joint, prob, adv = [], 1.0, 0.0
            for t in range(rounds):
                prob *= table_at(table, joint).get(str(own[t]), 0.0)
                if prob == 0.0:
                    break
                y = strategy[own[:t]]
                a, o = paid(own[t], y, pie)
                adv += o - a
                joint.append((own[t], y))
            total += prob * adv
        best = max(best, total / rounds)
    return best


def random_dist(rng: random.Random, ks: list[int]) -> dict[str, float]:
    """A pure demand, or random weights on a random subset of the demands."""
    if rng.random() < 0.3:
        return {str(rng.choice(ks)): 1.0}
    support = rng.sample(ks, rng.randint(1, len(ks)))
    w = [rng.random() + 1e-3 for _ in support]
    return {str(k): v / sum(w) for k, v in zip(support, w)}


def random_table(rng: random.Random, game, markov: bool) -> dict[str, dict[str, float]]:
    keys = markov_keys(game) if markov else full_keys(game)
    return {k: random_dist(rng, demands(game)) for k in keys}


def constant(game, demand: int) -> dict[str, dict[str, float]]:
    return {k: {str(demand): 1.0} for k in markov_keys(game)}


SMALL = [  # (params, tables per case): games small enough to enumerate every pure opponent strategy
    ({"pie": 3, "min_demand": 1, "max_demand": 2, "greedy_demand": 2, "num_rounds": 2}, 60),  # 2 demands: 2^3 strategies
    ({"pie": 3, "min_demand": 1, "max_demand": 2, "greedy_demand": 2, "num_rounds": 3}, 30),  # 2^7
    ({"pie": 3, "min_demand": 1, "max_demand": 2, "greedy_demand": 2, "num_rounds": 4}, 2),  # 2^15
    ({"pie": 4, "min_demand": 1, "max_demand": 3, "greedy_demand": 3, "num_rounds": 2}, 20),  # 3 demands: 3^4
    ({"pie": 5, "min_demand": 1, "max_demand": 4, "greedy_demand": 4, "num_rounds": 2}, 20),  # 4 demands: 4^5
]


@pytest.mark.parametrize("params, n", SMALL)
@pytest.mark.parametrize("markov", [True, False])
def test_backward_induction_equals_brute_force_over_pure_opponents(params, n, markov):
    game = make_game("negotiation", **params)
    rng = random.Random(f"{sorted(params.items())}{markov}")
    for _ in range(n):
        table = random_table(rng, game, markov)
        assert exploitability(table, game) == pytest.approx(brute_force_e(table, game), abs=1e-12)


def test_hand_derived_figures_in_the_default_game():
    game = make_game("negotiation", num_rounds=4)  # pie 10, demands 1..9
    # Always demanding the minimum concedes the most the rules allow: the opponent demands 9, 1 + 9 = 10 fits,
    # so every round pays 9 − 1 = 8 to the opponent's side, and no pair of legal demands has a larger gap.
    assert exploitability(constant(game, 1), game) == pytest.approx(8.0)
    # Always 5: a 5 ties (deal, 0); 6..9 break down (0); 1..4 lose. e* = 0.
    assert exploitability(constant(game, 5), game) == pytest.approx(0.0)
    # Always 9: only a demand of 1 fits (−8); anything else breaks down (0). e* = 0, not negative.
    assert exploitability(constant(game, 9), game) == pytest.approx(0.0)
    # Accommodating: 5 first, then pie minus the opponent's last demand. The opponent demands 9 every round:
    # round 1 breaks down (5 + 9 > 10), rounds 2..4 the policy demands 1 and the opponent gets +8: 3·8 / 4 = 6.
    accommodating = {k: {"5": 1.0} if k.endswith("--") else {str(10 - int(k.split(",")[1])): 1.0}
                     for k in markov_keys(game)}
    assert exploitability(accommodating, game) == pytest.approx(6.0)
    # One round, half on 1 and half on 5: a 9 gets 0.5·8 + 0.5·0 (5 + 9 breaks down) = 4; a 5 gets 0.5·4 = 2;
    # a 6 gets 0.5·5 + 0.5·0 = 2.5. e* = 4, and the best response demands 9.
    one = make_game("negotiation", num_rounds=1)
    br = best_response({"1|--": {"1": 0.5, "5": 0.5}}, one)
    assert br.value == pytest.approx(4.0) and br.moves == {"1|--": 9}


def play_exactly(table, game, moves) -> float:
    """E[Σ (o − a)] / T of `table` against PlaysBestResponse(moves) in the real game, every sequence of the
    policy's demands enumerated with its probability (the opponent is deterministic)."""
    total = 0.0

    def walk(state, opponent, joint, prob):
        nonlocal total
        if state.done:
            total += prob * (state.totals[1] - state.totals[0])
            return
        for demand, p in table_at(table, joint).items():
            if p == 0.0:
                continue
            s = game.new_state(random.Random(0))
            for x, y in joint:  # replay the history into a fresh state
                game.step(s, {0: str(x), 1: str(y)})
            y = opponent.act(game.view(s, 1))
            game.step(s, {0: demand, 1: y})
            walk(s, opponent, [*joint, (int(demand), int(y))], prob * p)

    opponent = PlaysBestResponse(moves)
    opponent.reset(game, 1, random.Random(0))
    walk(game.new_state(random.Random(0)), opponent, [], 1.0)
    return total / game.num_rounds


def test_ties_go_to_the_highest_demand():
    # Against always 9 only a demand of 1 fits (−8); 2..9 all break down (0) and tie, so the reply is 9.
    game = make_game("negotiation", num_rounds=2)
    response = best_response(constant(game, 9), game)
    assert response.value == 0.0
    assert set(response.moves.values()) == {9}


@pytest.mark.parametrize("params, markov", [({"num_rounds": 2}, True), ({"num_rounds": 3, "pie": 6,
                                            "max_demand": 5, "greedy_demand": 5}, True),
                                           ({"num_rounds": 3, "pie": 4, "max_demand": 3, "greedy_demand": 3}, False)])
def test_the_best_response_attains_e_star_in_the_real_game(params, markov):
    game = make_game("negotiation", **params)
    rng = random.Random(7)
    for _ in range(3):
        table = {k: {str(d): p for d, p in random_dist(rng, demands(game)).items()}
                 for k in (markov_keys(game) if markov else full_keys(game))}
        br = best_response(table, game)
        assert play_exactly(table, game, br.moves) == pytest.approx(br.value, abs=1e-12)


def test_a_markov_table_and_its_full_expansion_have_the_same_e_star():
    game = make_game("negotiation", num_rounds=3, pie=4, max_demand=3, greedy_demand=3)
    table = random_table(random.Random(5), game, markov=True)
    full = {k: table_at(table, h) for k, h in
            ((history_key(h), h) for r in range(3) for h in itertools.product(
                itertools.product(demands(game), repeat=2), repeat=r))}
    assert set(full) == set(full_keys(game))
    assert exploitability(table, game) == pytest.approx(exploitability(full, game), abs=1e-12)


def test_bad_tables_are_refused_by_key():
    game = make_game("negotiation", num_rounds=2)
    good = constant(game, 5)
    with pytest.raises(ValueError, match="2\\|3,7"):
        exploitability(good | {"2|3,7": {"5": 0.5, "6": 0.4}}, game)  # sums to 0.9
    with pytest.raises(ValueError, match="outside 1..9"):
        exploitability(good | {"1|--": {"10": 1.0}}, game)
    with pytest.raises(KeyError, match="2\\|9,9"):
        exploitability({k: v for k, v in good.items() if k != "2|9,9"}, game)


def test_the_compact_prompt_shows_the_round_and_the_last_demands_only():
    game = make_game("negotiation", num_rounds=3, prompt_style="compact")
    state = game.new_state(random.Random(0))
    assert game.observation(state, 0) == "Round 1 of 3. First round."
    game.step(state, {0: "4", 1: "8"})
    game.step(state, {0: "3", 1: "6"})
    assert game.observation(state, 0) == "Round 3 of 3. Last: you 3, opponent 6."
    assert game.observation(state, 1) == "Round 3 of 3. Last: you 6, opponent 3."
    assert "Score" not in game.system_prompt(0) and "3 rounds" in game.system_prompt(0)
    with pytest.raises(ValueError, match="prompt_style"):
        make_game("negotiation", prompt_style="terse")


# --- the oracle through the adaptive hook and `sepo eval`, on a tiny model -------------------------------------

PARAMS = {"num_rounds": 2, "prompt_style": "compact"}  # 1 + 81 joint histories


def test_adaptive_exploiter_accepts_negotiation_within_the_history_bound(tmp_path):
    """1 + 81 histories at 2 rounds pass; 1 + 81 + 81² = 6643 at 3 rounds are refused at parse time, and so is
    a pie-4 game at 5 rounds (1 + 9 + 81 + 729 + 6561), while 4 rounds (820) pass."""
    from sepo.grpo.adaptive import check_adaptive
    from sepo.grpo.config import SEPOConfig

    narrow = {"pie": 4, "max_demand": 3, "greedy_demand": 3}
    check_adaptive(["negotiation"], {"negotiation": PARAMS})
    check_adaptive(["negotiation"], {"negotiation": {**narrow, "num_rounds": 4}})
    with pytest.raises(ValueError, match="6643 at 3 rounds"):
        check_adaptive(["negotiation"], {"negotiation": {"num_rounds": 3}})
    with pytest.raises(ValueError, match="7381 at 5 rounds"):
        check_adaptive(["negotiation"], {"negotiation": {**narrow, "num_rounds": 5}})
    with pytest.raises(ValueError, match="more than 1365"):
        SEPOConfig(output_dir=str(tmp_path / "big"), use_cpu=True, games=["negotiation"], adaptive_exploiter=True,
                   game_params={"negotiation": {"num_rounds": 3}}, report_to="none")


def test_the_adaptive_oracle_measures_fits_and_plays_the_exact_best_response(tiny_model_dir):
    """AdaptiveExploiter("negotiation") reads the tiny model's scored policy at all 82 joint histories (the same
    table `sepo.eval.exact.scored_policy` gives), refreshes to its exact best response, and the strategy it
    plays attains the reported e* against that table in the real game."""
    from sepo.backends.hf import HFBackend
    from sepo.grpo.adaptive import AdaptiveExploiter
    from sepo.rollout.chat import ChatRenderer

    backend = HFBackend.from_model(str(tiny_model_dir), device="cpu")
    renderer = ChatRenderer(backend.tokenizer)
    exploiter = AdaptiveExploiter("negotiation")
    policy = exploiter.oracle.measure(backend, renderer, PARAMS, 0)
    game = make_game("negotiation", **PARAMS)
    assert sorted(policy) == sorted(full_keys(game))
    assert all(sum(d.values()) == pytest.approx(1.0, abs=1e-5) and len(d) == 9 for d in policy.values())
    # one entry against the conversation written out by hand: round 1 the model demanded 3, the opponent 8
    from sepo.generation import Prompt

    messages = [{"role": "system", "content": game.system_prompt(0)},
                {"role": "user", "content": "Round 1 of 2. First round."}, {"role": "assistant", "content": "3"},
                {"role": "user", "content": "Round 2 of 2. Last: you 3, opponent 8."}]
    legal = [str(d) for d in range(1, 10)]
    (row,) = backend.score_choices([Prompt(ids=renderer.prompt_ids(messages), messages=messages)], [legal])
    assert [policy["2|3,8"][d] for d in legal] == pytest.approx(row, abs=1e-5)  # batch padding: 1e-7
    figures = exploiter.refresh(policy, 3, PARAMS)
    assert exploiter.refreshed_at == 3
    assert figures["exploitability"] == pytest.approx(exploitability(policy, game), abs=1e-12)
    strategy = exploiter.factory()
    assert play_exactly(policy, game, strategy.moves) == pytest.approx(figures["exploitability"], abs=1e-9)


def test_eval_reports_the_exact_e_star_of_a_compact_negotiation_policy(tiny_model_dir, tmp_path):
    """`sepo eval` on compact-prompt negotiation stores the scored table and reports e* of it; the chat prompt
    has no exact phase."""
    from sepo.eval.config import EvalConfig
    from sepo.eval.evaluate import run_eval

    def cfg(out, params):
        return EvalConfig(models=[f"Tiny={tiny_model_dir}"], games=["negotiation"],
                          game_params={"negotiation": params}, episodes_per_opponent=1, bootstrap_resamples=100, progress=False,
                          max_turn_tokens=4, output_dir=str(out), torch_threads=1)

    out = tmp_path / "eval"
    run_eval(cfg(out, PARAMS))
    exact = json.loads((out / "results.json").read_text())["results"]["Tiny"]["negotiation"]["negotiation_exact"]
    game = make_game("negotiation", **PARAMS)
    assert sorted(exact["policy"]) == sorted(full_keys(game))
    assert exact["e_star"] == pytest.approx(exploitability(exact["policy"], game), abs=1e-12)
    assert f"| Tiny | {exact['e_star']:.3f} |" in (out / "results.md").read_text()
    run_eval(cfg(tmp_path / "chat", {"num_rounds": 2}))
    result = json.loads((tmp_path / "chat" / "results.json").read_text())["results"]["Tiny"]["negotiation"]
    assert "negotiation_exact" not in result


def test_adaptive_exploiter_trains_in_compact_negotiation(tiny_model_dir, tmp_path):
    """`adaptive_exploiter: true` in single-issue negotiation: one real SEPO-GRPO step (real rollouts on the tiny
    model) whose only exploit opponent is the adaptive exploiter; the refresh before the first rollout logs the
    exact e* of the starting weights' scored policy, recomputed here from the model the run started from."""
    from sepo.backends.hf import HFBackend
    from sepo.eval.exact import scored_policy
    from sepo.grpo.adaptive import ADAPTIVE_NAME
    from sepo.grpo.config import SEPOConfig
    from sepo.grpo.trainer import SEPOTrainer
    from sepo.rollout.chat import ChatRenderer

    args = SEPOConfig(output_dir=str(tmp_path / "run"), use_cpu=True, bf16=False, report_to="none", max_steps=1,
                      logging_steps=1, save_strategy="no", learning_rate=1e-3, gradient_checkpointing=False,
                      games=["negotiation"], game_params={"negotiation": PARAMS}, num_generations=2,
                      pool_mix={"training": ["fair"], "exploit": [ADAPTIVE_NAME]}, adaptive_exploiter=True,
                      per_device_train_batch_size=4, max_turn_tokens=6, max_completion_length=128, seed=0)
    backend = HFBackend.from_model(str(tiny_model_dir), device="cpu")
    start = exploitability(scored_policy(backend, ChatRenderer(backend.tokenizer), "negotiation", PARAMS),
                           make_game("negotiation", **PARAMS))
    trainer = SEPOTrainer(model=tiny_model_dir, args=args)
    trainer.train()
    logs = {k: v for h in trainer.state.log_history for k, v in h.items()}
    assert trainer.state.global_step == 1
    assert logs["sepo/adaptive/exploitability"] == pytest.approx(start, abs=1e-4)
