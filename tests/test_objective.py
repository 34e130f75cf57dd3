"""SEPO terms, credited rewards and metrics on hand-built episodes with known numbers; credit-mode proofs."""

from __future__ import annotations

import math
import random
import statistics

import pytest
import torch

from envs import Lambdas, RoundResult, Signals, Strategy, View, make_game, make_strategy, play_episode
from sepo.objective import (
    aggregate,
    episode_terms,
    group_penalty,
    nra_gtbench,
    nra_sepo,
    penalty,
    probe_penalty,
    probe_penalty_parts,
    round_rewards,
    scale,
)

IPD_LAMBDAS = Lambdas(e=2.4, c=1.0, x=1.8)


def rounds_of(a, o, k=None, x=None, k_opp=None):
    """RoundResults for seat 0 with payoffs a/o, collusion k (None allowed) and externality x."""
    n = len(a)
    k = k if k is not None else [0.0] * n
    x = x if x is not None else [0.0] * n
    k_opp = k_opp if k_opp is not None else [0.0] * n
    return [
        RoundResult(
            index=i,
            payoffs=(float(a[i]), float(o[i])),
            signals=(Signals(k[i], x[i]), Signals(k_opp[i], x[i])),
            record={},
        )
        for i in range(n)
    ]


def reward(t, lam, credit="per_pool", **kw):
    """An episode's credited reward as the trainer takes it (`sepo.grpo.rewards.SEPOReward`): the mean of its
    per-round rewards."""
    return statistics.fmean(round_rewards(t, lam, credit, **kw))


# IPD-like (s = 1): (C,C), (D,C), (C,D), (D,D) from seat 0
IPD_A, IPD_O = [3, 5, 0, 1], [3, 0, 5, 1]
IPD_K = [0.0, 1.0, 0.0, 1.0]
IPD_X = [0.0, 1 / 6, 1 / 6, 2 / 3]


def test_scale():
    assert scale(3.0) == 1.0
    assert scale(10.0) == pytest.approx(0.3)
    assert scale(2.0) == 1.5
    with pytest.raises(ValueError, match="positive"):
        scale(0.0)


def test_episode_terms_by_hand_ipd():
    t = episode_terms(
        rounds_of(IPD_A, IPD_O, IPD_K, IPD_X), seat=0, pool="training", max_payoff=3.0, opponent="tft"
    )
    assert t.rounds == 4 and t.opponent == "tft"
    assert t.payoff == pytest.approx(2.25) and t.u == pytest.approx(2.25)
    assert t.e == 0.0  # equal means
    assert t.c == pytest.approx(0.5)
    assert t.x == pytest.approx(0.25)
    assert t.welfare == pytest.approx(4.5)


def test_episode_terms_seat_1_and_scale():
    # negotiation-like, s = 0.3: seat 1 demanded 2 against 8 in three deals, one breakdown
    t = episode_terms(rounds_of([8, 8, 0, 8], [2, 2, 0, 2]), seat=1, pool="exploit", max_payoff=10.0)
    assert t.payoffs == (2.0, 2.0, 0.0, 2.0) and t.opp_payoffs == (8.0, 8.0, 0.0, 8.0)
    assert t.payoff == pytest.approx(1.5)
    assert t.u == pytest.approx(0.45)
    assert t.e == pytest.approx(0.3 * 4.5)


def test_collusion_ignores_rounds_without_the_decision():
    t = episode_terms(
        rounds_of([1, -1, 2, 1], [-1, 1, -2, -1], k=[None, 1.0, 0.0, None]), 0, "collusive", 2.0
    )
    assert t.c == pytest.approx(0.5)
    none = episode_terms(rounds_of([1], [-1], k=[None]), 0, "collusive", 2.0)
    assert none.c == 0.0


def test_bad_inputs():
    with pytest.raises(ValueError, match="training, exploit, collusive"):
        episode_terms(rounds_of([1], [1]), 0, "train", 3.0)
    with pytest.raises(ValueError, match="seat"):
        episode_terms(rounds_of([1], [1]), 2, "training", 3.0)
    t = episode_terms(rounds_of([1], [1]), 0, "training", 3.0)
    with pytest.raises(ValueError, match="per_pool, reward_only, shared, auxiliary"):
        reward(t, IPD_LAMBDAS, "cached")
    with pytest.raises(ValueError, match="shared_penalty"):
        reward(t, IPD_LAMBDAS, "shared")
    with pytest.raises(ValueError, match="probe episodes"):
        reward(t, IPD_LAMBDAS, "auxiliary")
    with pytest.raises(ValueError, match="probe episodes per rollout"):
        group_penalty([t, t], [[]], IPD_LAMBDAS)
    # under the training-only credits an exploit or collusive episode is a probe, never credited itself
    for credit in ("reward_only", "shared", "auxiliary"):
        probe = episode_terms(rounds_of([1], [1]), 0, "exploit", 3.0)
        with pytest.raises(ValueError, match=f"credit='{credit}' credits training-pool episodes only.*'exploit'"):
            round_rewards(probe, IPD_LAMBDAS, credit, shared_penalty=0.0, probes=[])


# ------------------------------------------------------------------------------------------------
# per-pool reward and its per-round version


def test_per_pool_reward_training():
    t = episode_terms(rounds_of(IPD_A, IPD_O, IPD_K, IPD_X), 0, "training", 3.0)
    # r = s·ā − λx·x = 2.25 − 1.8·0.25; collusion (0.5) is not a training-pool term
    assert reward(t, IPD_LAMBDAS) == pytest.approx(1.8)
    assert round_rewards(t, IPD_LAMBDAS) == pytest.approx([3.0, 5 - 0.3, -0.3, 1 - 1.2])


def test_per_pool_reward_exploit():
    t = episode_terms(rounds_of([2, 2, 0, 2], [8, 8, 0, 8], x=[0, 0, 1, 0]), 0, "exploit", 10.0)
    # r = −(λe·s·max(0, ō−ā) + λx·x) = −(2.4·1.35 + 1.8·0.25); no utility term
    assert reward(t, IPD_LAMBDAS) == pytest.approx(-3.69)
    assert round_rewards(t, IPD_LAMBDAS) == pytest.approx([-4.32, -4.32, -1.8, -4.32])


def test_per_pool_exploit_clip_is_decided_by_the_episode():
    # the agent out-earns the opponent over the episode: e = 0, only externality is charged per round
    t = episode_terms(rounds_of([5, 0, 5], [0, 5, 0], x=[0.5, 0.5, 0.5]), 0, "exploit", 3.0)
    assert t.e == 0.0
    assert reward(t, IPD_LAMBDAS) == pytest.approx(-0.9)
    assert round_rewards(t, IPD_LAMBDAS) == pytest.approx([-0.9, -0.9, -0.9])


def test_per_pool_reward_collusive():
    t = episode_terms(rounds_of(IPD_A, IPD_O, IPD_K, IPD_X), 0, "collusive", 3.0)
    assert reward(t, IPD_LAMBDAS) == pytest.approx(-0.5)  # −λc·c only: no payoff, no externality
    assert round_rewards(t, IPD_LAMBDAS) == pytest.approx([0.0, -1.0, 0.0, -1.0])
    kuhn = episode_terms(
        rounds_of([1, -1, 2, 1], [-1, 1, -2, -1], k=[None, 1.0, 0.0, None]), 0, "collusive", 2.0
    )
    lam = Lambdas(e=1.5, c=2.4, x=0.0)
    assert reward(kuhn, lam) == pytest.approx(-1.2)
    assert round_rewards(kuhn, lam) == pytest.approx([0.0, -4.8, 0.0, 0.0])  # k·T/T_k = 1·4/2


def test_penalty_terms_present_only_for_their_pool():
    rr = rounds_of([0, 0], [5, 5], k=[1.0, 1.0], x=[0.5, 0.5])
    lam = Lambdas(e=1.0, c=10.0, x=100.0)
    assert penalty(episode_terms(rr, 0, "training", 5.0), lam) == pytest.approx(50.0)
    assert penalty(episode_terms(rr, 0, "exploit", 5.0), lam) == pytest.approx(3.0 + 50.0)
    assert penalty(episode_terms(rr, 0, "collusive", 5.0), lam) == pytest.approx(10.0)


def closed_form(t, lam, credit, shared_penalty=None, probes=None):
    """The credited episode reward as the revised paper writes it: per_pool u·1[training] − P(terms), the
    training-only credits u minus their penalty (none, the group's shared one, the rollout's probe penalty)."""
    if credit == "per_pool":
        return (t.u if t.pool == "training" else 0.0) - penalty(t, lam)
    if credit == "auxiliary":
        return t.u - probe_penalty(t, probes, lam)
    return t.u - (shared_penalty if credit == "shared" else 0.0)


def test_round_rewards_mean_equals_episode_reward_random():
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(1, 8)
        rr = rounds_of(
            [rng.choice([0, 1, 3, 5, -2]) for _ in range(n)],
            [rng.choice([0, 1, 3, 5, -2]) for _ in range(n)],
            k=[rng.choice([None, 0.0, 1.0]) for _ in range(n)],
            x=[rng.random() for _ in range(n)],
        )
        pool = rng.choice(["training", "exploit", "collusive"])
        t = episode_terms(rr, rng.randint(0, 1), pool, 5.0)
        probe = episode_terms(rr, 0, "exploit", 5.0)
        lam = Lambdas(rng.random() * 3, rng.random() * 3, rng.random() * 3)
        arms = [("per_pool", {})]
        if pool == "training":
            arms += [("reward_only", {}), ("shared", {"shared_penalty": 0.7}), ("auxiliary", {"probes": [probe]})]
        for credit, kw in arms:
            for paper in (False, True):
                assert statistics.fmean(round_rewards(t, lam, credit, paper=paper, **kw)) == pytest.approx(
                    closed_form(t, lam, credit, **kw), abs=1e-9
                )


def test_paper_round_reward_by_hand():
    """return_mode paper: rew_t = s·a_t·1[train] − P_r, the whole-episode penalty on every round."""
    lam = Lambdas(e=2.4, c=1.0, x=1.8)
    train = episode_terms(rounds_of(IPD_A, IPD_O, IPD_K, IPD_X), 0, "training", 3.0)
    # P = λx·x = 1.8·0.25 = 0.45 on every round (the pieces form charges λx·x_t per round instead)
    assert round_rewards(train, lam, paper=True) == pytest.approx([2.55, 4.55, -0.45, 0.55])
    exploit = episode_terms(rounds_of([2, 2, 0, 2], [8, 8, 0, 8], x=[0, 0, 1, 0]), 0, "exploit", 10.0)
    # P = λe·s·e + λx·x = 2.4·0.3·4.5 + 1.8·0.25 = 3.69; no payoff term outside the training pool
    assert round_rewards(exploit, lam, paper=True) == pytest.approx([-3.69] * 4)
    collusive = episode_terms(rounds_of(IPD_A, IPD_O, IPD_K, IPD_X), 0, "collusive", 3.0)
    assert round_rewards(collusive, lam, paper=True) == pytest.approx([-0.5] * 4)  # λc·c = 1.0·0.5


def test_probe_penalty_by_hand():
    """The method's auxiliary penalty: metrics of [credited] + probes; x pools the credited and exploit rounds."""
    credited = episode_terms(rounds_of(IPD_A, IPD_O, IPD_K, IPD_X), 0, "training", 3.0, "tft")  # Σx = 1
    exploit = episode_terms(rounds_of([0, 1], [5, 1], x=[1 / 6, 2 / 3]), 0, "exploit", 3.0, "ad")  # e = 2.5
    collusive = episode_terms(rounds_of([5, 3], [0, 3], k=[1.0, 0.0], x=[1.0, 0.0]), 0, "collusive", 3.0, "ac")
    # e = max(0, 3 − 0.5) = 2.5; c = 0.5; x = (1 + 5/6) / 6 rounds (the collusive probe's x is not pooled)
    x = (1 + 5 / 6) / 6
    expected = 2.4 * 2.5 + 1.0 * 0.5 + 1.8 * x
    assert probe_penalty(credited, [exploit, collusive], IPD_LAMBDAS) == pytest.approx(expected)
    from_probes, from_credited = probe_penalty_parts(credited, [exploit, collusive], IPD_LAMBDAS)
    assert from_credited == pytest.approx(1.8 * 1 / 6)  # λx · Σ_t x_t of the credited episode / 6 pooled rounds
    assert from_probes == pytest.approx(expected - 1.8 / 6)
    assert reward(credited, IPD_LAMBDAS, "auxiliary", probes=[exploit, collusive]) == pytest.approx(
        2.25 - expected
    )
    other = episode_terms(rounds_of([3] * 4, [3] * 4), 0, "training", 3.0, "tft")  # no externality
    assert group_penalty([credited, other], [[exploit, collusive], [exploit]], IPD_LAMBDAS) == pytest.approx(
        (expected + 2.4 * 2.5 + 1.8 * (5 / 6) / 6) / 2
    )
    assert [reward(t, IPD_LAMBDAS, "reward_only") for t in (credited, other)] == pytest.approx([2.25, 3.0])


# ------------------------------------------------------------------------------------------------
# credit-mode proofs


def trl_normalise(rewards: list[float]) -> torch.Tensor:
    """TRL GRPO's group normalisation: (r − mean) / (std + 1e-4), unbiased std."""
    r = torch.tensor(rewards, dtype=torch.float64)
    return (r - r.mean()) / (r.std() + 1e-4)


def random_group(rng: random.Random, g: int, pool: str) -> list:
    return [
        episode_terms(
            rounds_of(
                [rng.choice([0, 1, 3, 5]) for _ in range(8)],
                [rng.choice([0, 1, 3, 5]) for _ in range(8)],
                k=[float(rng.random() < 0.5) for _ in range(8)],
                x=[rng.random() for _ in range(8)],
            ),
            0,
            pool,
            3.0,
        )
        for _ in range(g)
    ]


def test_shared_penalty_equals_reward_only_under_group_normalisation():
    rng = random.Random(1)
    differs = 0
    for _ in range(200):
        group = random_group(rng, 8, "training")
        probes = [random_group(rng, 2, "exploit") + random_group(rng, 1, "collusive") for _ in group]
        p_bar = group_penalty(group, probes, IPD_LAMBDAS)  # the shared arm's one penalty of the group
        shared = [reward(t, IPD_LAMBDAS, "shared", shared_penalty=p_bar) for t in group]
        reward_only = [reward(t, IPD_LAMBDAS, "reward_only") for t in group]
        assert max(abs(a - b) for a, b in zip(shared, reward_only)) > 0.1  # the rewards differ ...
        assert torch.allclose(trl_normalise(shared), trl_normalise(reward_only), atol=1e-6, rtol=0)  # ... not A
        auxiliary = trl_normalise([reward(t, IPD_LAMBDAS, "auxiliary", probes=p) for t, p in zip(group, probes)])
        per_pool = trl_normalise([reward(t, IPD_LAMBDAS) for t in group])
        differs += not torch.allclose(auxiliary, trl_normalise(reward_only), atol=1e-3, rtol=0)
        differs += not torch.allclose(per_pool, trl_normalise(reward_only), atol=1e-3, rtol=0)
    assert differs == 400  # a per-rollout penalty changes every group's advantages


class Bernoulli(Strategy):
    """Test policy: cooperates with probability p each round (a one-parameter policy with a known score)."""

    name = "bernoulli"

    def __init__(self, p: float) -> None:
        self.p = p

    def act(self, view: View) -> str:
        return "COOPERATE" if self.rng.random() < self.p else "DEFECT"


def _ipd_terms(opponent: str, pool: str, p: float, rng: random.Random):
    game = make_game("ipd")
    ep = play_episode(game, [Bernoulli(p), make_strategy("ipd", opponent)], rng)
    cooperations = sum(1.0 - r.signals[0].collusion for r in ep.rounds)
    return episode_terms(ep.rounds, 0, pool, game.max_payoff, opponent), cooperations


def test_auxiliary_penalty_is_independent_of_the_credited_actions():
    """The probe part of P_aux is uncorrelated with the credited episode's score ∇logπ = Σ_t (1[C_t] − p);
    the part the method took from the credited episode (its externality) and the per-pool penalty are not."""
    p, n, rng = 0.6, 1500, random.Random(2)
    from_probes, from_credited, credited_score, per_pool_pen, per_pool_score = [], [], [], [], []
    for _ in range(n):
        credited, coop = _ipd_terms("tit_for_tat", "training", p, rng)
        probes = [
            _ipd_terms("always_defect", "exploit", p, rng)[0],
            _ipd_terms("always_cooperate", "collusive", p, rng)[0],
        ]
        total = credited.u - reward(credited, IPD_LAMBDAS, "auxiliary", probes=probes)
        parts = probe_penalty_parts(credited, probes, IPD_LAMBDAS)
        assert sum(parts) == pytest.approx(total)
        from_probes.append(parts[0])
        from_credited.append(parts[1])
        credited_score.append(coop - p * credited.rounds)
        coll, coop_c = _ipd_terms("always_cooperate", "collusive", p, rng)
        per_pool_pen.append(-reward(coll, IPD_LAMBDAS, "per_pool"))
        per_pool_score.append(coop_c - p * coll.rounds)
    assert statistics.pstdev(from_probes) > 0.1  # the probe penalty does vary between rollouts
    assert abs(statistics.correlation(from_probes, credited_score)) < 0.1  # ~N(0, 1/sqrt(n) = 0.026)
    # the REINFORCE estimate of the probe penalty's gradient, E[P·score], is zero within 4 standard errors
    prod = [a * b for a, b in zip(from_probes, credited_score)]
    assert abs(statistics.fmean(prod)) < 4 * statistics.stdev(prod) / math.sqrt(n)
    # the credited externality share moves with the credited actions (more cooperation, less shortfall)
    assert statistics.correlation(from_credited, credited_score) < -0.3
    # per-pool credit: the collusion penalty is a function of the credited actions (defect rate)
    assert statistics.correlation(per_pool_pen, per_pool_score) < -0.99


# ------------------------------------------------------------------------------------------------
# aggregate metrics and NRA


def test_nra_forms():
    assert nra_gtbench([12, 4], [2, 4]) == pytest.approx(10 / 22)
    assert nra_sepo([12, 4], [2, 4]) == pytest.approx(10 / 22)
    assert nra_gtbench([0, 0], [0, 0]) == 0.0
    assert nra_sepo([0, 0], [0, 0]) is None
    assert nra_sepo([-1], [-2]) is None  # non-positive denominator is skipped
    assert nra_gtbench([-1], [-2]) == pytest.approx(1 / 3)
    # GTBench sums absolute values per match: mixed-sign matches do not cancel in the denominator
    assert nra_gtbench([3, -1], [-3, 1]) == pytest.approx(4 / 8)


def test_kuhn_zero_sum_artefact():
    lam = Lambdas(e=1.5, c=2.4, x=0.0)
    eps = [
        episode_terms(rounds_of(a, [-v for v in a]), 0, "training", 2.0, "nash")
        for a in ([1, 2, -1, 1, -2, 1], [2, -1, 1, 1, 1, -1], [-2, -1, 1, -1, 1, 1])
    ]
    m = aggregate(eps, lam)
    assert m.nra_sepo == 0.0  # Σ L + Σ O = 0 in a zero-sum game: every opponent skipped
    own = [sum(t.payoffs) for t in eps]
    assert m.nra_gtbench == pytest.approx(sum(own) * 2 / (2 * sum(abs(v) for v in own)))
    assert m.nra_gtbench == pytest.approx(8 / 12)  # totals 2, 3, −1: (4 − (−4)) / (6 + 6)


def test_aggregate_by_hand():
    T = "training"
    eps = [
        # training: tft pooled (9 + 12)/8 = 2.625, grim 1.0 -> payoff 1.8125
        episode_terms(rounds_of(IPD_A, IPD_O, IPD_K, IPD_X), 0, T, 3.0, "tft"),
        episode_terms(rounds_of([3] * 4, [3] * 4), 0, T, 3.0, "tft"),
        episode_terms(rounds_of([1] * 4, [1] * 4, x=[2 / 3] * 4), 0, T, 3.0, "grim"),
        # exploit: always_defect advantage 2 − 0.75 = 1.25; alternating: agent ahead -> 0
        episode_terms(
            rounds_of([0, 1, 1, 1], [5, 1, 1, 1], x=[0, 2 / 3, 2 / 3, 2 / 3]), 0, "exploit", 3.0, "ad"
        ),
        episode_terms(rounds_of([5, 1], [0, 1], x=[1 / 6, 2 / 3]), 0, "exploit", 3.0, "alt"),
        # collusive: defect rate 0.5 (its externality is not counted in x)
        episode_terms(
            rounds_of([5, 3, 5, 3], [0, 3, 0, 3], k=[1, 0, 1, 0], x=[1.0] * 4), 0, "collusive", 3.0, "ac"
        ),
    ]
    m = aggregate(eps, IPD_LAMBDAS)
    assert m.payoff == pytest.approx(1.8125) and m.u == pytest.approx(1.8125)
    assert m.exploit == pytest.approx(0.625)  # mean(1.25, 0); pooling before the clip would give 0
    assert m.c == pytest.approx(0.5)
    x_rounds = IPD_X + [0] * 4 + [2 / 3] * 4 + [0, 2 / 3, 2 / 3, 2 / 3] + [1 / 6, 2 / 3]
    assert m.x == pytest.approx(sum(x_rounds) / len(x_rounds))
    assert m.safety == pytest.approx(1.8125 - 2.4 * 0.625 - 1.0 * 0.5 - 1.8 * m.x)
    assert m.welfare == pytest.approx((2 * 2.625 + 2 * 1.0) / 2)
    assert m.robust == pytest.approx((0.75 + 3.0) / 2)
    assert m.episodes == {"training": 3, "exploit": 2, "collusive": 1}
    by_opp = {st.opponent: st for st in m.opponents}
    assert by_opp["ad"].nra_gtbench == pytest.approx((3 - 8) / 11)
    assert by_opp["ac"].nra_sepo == pytest.approx((16 - 6) / 22)


def test_aggregate_scaled_terms_and_safety_at_lambdas():
    # negotiation-like (s = 0.3): J = s·payoff − λe·s·exploit − λc·c − λx·x (fits the paper's numbers)
    lam = Lambdas(e=2.4, c=2.4, x=2.4)
    eps = [
        episode_terms(rounds_of([5, 5, 0, 5], [5, 5, 0, 5], x=[0, 0, 1, 0]), 0, "training", 10.0, "balanced"),
        episode_terms(rounds_of([2, 2, 2, 2], [8, 8, 8, 8]), 0, "exploit", 10.0, "hardball"),
        episode_terms(rounds_of([5] * 4, [5] * 4, k=[0, 0, 0, 1]), 0, "collusive", 10.0, "fair"),
    ]
    m = aggregate(eps, lam)
    assert (m.payoff, m.exploit) == pytest.approx((3.75, 6.0))
    assert (m.u, m.e) == pytest.approx((1.125, 1.8))
    assert m.c == pytest.approx(0.25) and m.x == pytest.approx(1 / 8)
    assert m.safety == pytest.approx(1.125 - 2.4 * 1.8 - 2.4 * 0.25 - 2.4 / 8)


def test_aggregate_rejects_mixed_games_and_handles_empty():
    a = episode_terms(rounds_of([1], [1]), 0, "training", 3.0)
    b = episode_terms(rounds_of([1], [1]), 0, "training", 10.0)
    with pytest.raises(ValueError, match="one game at a time"):
        aggregate([a, b], IPD_LAMBDAS)
    m = aggregate([], IPD_LAMBDAS)
    assert m.safety == 0.0 and m.episodes == {"training": 0, "exploit": 0, "collusive": 0}


def test_objective_is_pure_python():
    import subprocess
    import sys

    code = "import sys, sepo.objective; assert not {'torch', 'transformers'} & set(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_pool_means_are_each_pools_plain_episode_means():
    """The per-pool terms a step logs: each pool's plain mean over its own episodes (no pooling across
    opponents or rounds, unlike `aggregate`), pools without episodes left out."""
    from sepo.objective import pool_means

    train = [episode_terms(rounds_of([3, 1], [3, 5]), 0, "training", 5.0),
             episode_terms(rounds_of([0], [5], x=[2.0]), 0, "training", 5.0)]
    exploit = [episode_terms(rounds_of([1, 1, 1], [5, 5, 2]), 0, "exploit", 5.0)]
    got = pool_means([train[0], exploit[0], train[1]])
    assert list(got) == ["training", "exploit"]
    s = 3 / 5  # the scale at max payoff 5 (as 0.3 at 10 above)
    assert got["training"] == pytest.approx({"u": s * (2 + 0) / 2, "e": s * (2 + 5) / 2, "c": 0.0, "x": (0 + 2) / 2})
    assert got["exploit"] == pytest.approx({"u": s * 1, "e": s * 3, "c": 0.0, "x": 0.0})
