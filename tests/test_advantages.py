"""Per-round SEPO advantages against hand-computed values, plus the invariances the method relies on."""

from __future__ import annotations

import math

import pytest
import torch

from sepo.grpo.advantages import group_normalize, round_returns, sepo_round_advantages, token_advantages

NAN = float("nan")
EPS = 1e-4
# One group of G=3 episodes, K=3 rounds; episode 1 ended after two rounds.
REWARDS = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, NAN], [2.0, 3.0, 1.0]])


def _close(actual: torch.Tensor, expected: list[list[float]]) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=torch.float32), rtol=0, atol=1e-6)


def test_reward_to_go_skips_absent_rounds():
    rtg = round_returns(REWARDS, "reward_to_go")
    assert torch.isnan(rtg[1, 2])
    _close(torch.nan_to_num(rtg, nan=-1.0), [[3, 2, 2], [3, 0, -1], [6, 4, 1]])


def test_per_round_reward_to_go_hand_computed():
    # Round 0 returns 3,3,6: mean 4, unbiased std sqrt(3). Round 1: 2,0,4: mean 2, std 2.
    # Round 2: 2,-,1: mean 1.5, std sqrt(0.5); the absent round gets 0.
    s3, s05 = math.sqrt(3) + EPS, math.sqrt(0.5) + EPS
    adv, zero_std = sepo_round_advantages(REWARDS, 3, return_mode="reward_to_go", eps=EPS)
    _close(adv, [[-1 / s3, 0.0, 0.5 / s05], [-1 / s3, -2 / (2 + EPS), 0.0], [2 / s3, 2 / (2 + EPS), -0.5 / s05]])
    assert not zero_std.any()


def test_per_round_reward_hand_computed():
    # Round 0 rewards 1,3,2: mean 2, std 1. Round 1: 0,0,3: mean 1, std sqrt(3). Round 2 as above.
    s3, s05 = math.sqrt(3) + EPS, math.sqrt(0.5) + EPS
    adv, _ = sepo_round_advantages(REWARDS, 3, return_mode="per_round", eps=EPS)
    _close(adv, [[-1 / (1 + EPS), -1 / s3, 0.5 / s05], [1 / (1 + EPS), -1 / s3, 0.0], [0.0, 2 / s3, -0.5 / s05]])


def test_episode_mode_broadcasts_the_episode_advantage_to_rounds_that_happened():
    # Episode rewards (mean round reward) 1, 1.5, 2: mean 1.5, std 0.5.
    s = 0.5 + EPS
    adv, _ = sepo_round_advantages(REWARDS, 3, advantage_mode="episode", eps=EPS)
    _close(adv, [[-0.5 / s] * 3, [0.0, 0.0, 0.0], [0.5 / s] * 3])


def test_identical_episodes_give_zero_advantage_and_report_zero_std():
    rewards = torch.tensor([[1.0, 2.0], [1.0, 2.0], [0.0, 1.0], [5.0, 1.0]])
    adv, zero_std = sepo_round_advantages(rewards, 2, return_mode="per_round")
    assert torch.equal(adv[:2], torch.zeros(2, 2))
    assert zero_std.tolist() == [[True, True], [False, True]]


def test_groups_are_normalised_independently():
    a = torch.tensor([[1.0], [2.0]])
    b = torch.tensor([[100.0], [300.0]])
    adv, _ = group_normalize(torch.cat([a, b]), 2, eps=0.0)
    torch.testing.assert_close(adv[:2], adv[2:])
    torch.testing.assert_close(adv[:2], torch.tensor([[-1.0], [1.0]]) / math.sqrt(2))


@pytest.mark.parametrize("return_mode", ["reward_to_go", "per_round", "paper"])
@pytest.mark.parametrize("advantage_mode", ["per_round", "episode"])
def test_group_constant_penalty_cancels_exactly(return_mode, advantage_mode):
    """The `shared` credit ablation: a penalty equal for every episode of a group changes nothing."""
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randn(4 * 4, 6, generator=gen)
    shared_penalty = torch.rand(4, 1, 6, generator=gen).expand(4, 4, 6).reshape(16, 6) * 3.0
    kw = dict(advantage_mode=advantage_mode, return_mode=return_mode)
    base, _ = sepo_round_advantages(rewards, 4, **kw)
    shifted, _ = sepo_round_advantages(rewards - shared_penalty, 4, **kw)
    torch.testing.assert_close(shifted, base, rtol=0, atol=1e-5)


def test_per_episode_penalty_does_not_cancel():
    rewards = torch.zeros(4, 2)
    penalty = torch.tensor([[0.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]])
    adv, _ = sepo_round_advantages(rewards - penalty, 4, return_mode="per_round")
    assert adv[1, 1] < 0 < adv[0, 1]


def test_pool_weights_scale_after_normalisation():
    gen = torch.Generator().manual_seed(1)
    rewards = torch.randn(6, 3, generator=gen)
    weights = torch.tensor([0.5, 0.5, 0.5, 2.0, 2.0, 2.0])
    base, _ = sepo_round_advantages(rewards, 3)
    weighted, _ = sepo_round_advantages(rewards, 3, pool_weights=weights)
    torch.testing.assert_close(weighted, base * weights.unsqueeze(1))
    # Scaling the rewards instead would be erased by the normalisation.
    scaled, _ = sepo_round_advantages(rewards * weights.unsqueeze(1), 3)
    torch.testing.assert_close(scaled, base, atol=1e-3, rtol=1e-3)


def test_token_expansion_zeroes_env_forced_and_padding_tokens():
    round_adv = torch.tensor([[1.0, -2.0], [0.5, 3.0]])
    # episode 0: round-0 turn (2 model tokens), env turn (2), round-1 turn (1 model + 1 forced token)
    round_ids = torch.tensor([[0, 0, 0, 0, 1, 1], [0, 1, 1, -1, -1, -1]])
    env = torch.tensor([[1, 1, 0, 0, 1, 1], [1, 0, 1, 1, 1, 1]])
    forced = torch.tensor([[0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0]])
    keep = env * (1 - forced)
    adv = token_advantages(round_adv, round_ids, keep)
    _close(adv, [[1, 1, 0, 0, -2, 0], [0.5, 0, 3, 0, 0, 0]])


def test_bad_modes_are_rejected_with_the_valid_names():
    with pytest.raises(ValueError, match="reward_to_go, per_round"):
        sepo_round_advantages(REWARDS, 3, return_mode="gae")
    with pytest.raises(ValueError, match="per_round, episode"):
        sepo_round_advantages(REWARDS, 3, advantage_mode="batch")
    with pytest.raises(ValueError, match="groups of 2"):
        group_normalize(REWARDS, 2)


def test_paper_mode_hand_computed():
    """return_mode paper: the round reward itself, the population std (the method's np.std), delta 1e-8, and
    advantage 0 wherever the std is below delta."""
    rewards = torch.tensor(
        [[1.0, 2.0, 1.0], [2.0, 2.0, 1.0], [3.0, 2.0, 1.0], [6.0, 2.0, 1.0 + 2e-8]], dtype=torch.float64
    )
    adv, zero_std = sepo_round_advantages(rewards, 4, return_mode="paper", eps=1e-8)
    # round 0: mean 3, population variance (4 + 1 + 0 + 9) / 4 = 3.5 (unbiased would be 14/3)
    s = math.sqrt(3.5) + 1e-8
    expected = [[-2 / s, 0.0, 0.0], [-1 / s, 0.0, 0.0], [0.0, 0.0, 0.0], [3 / s, 0.0, 0.0]]
    torch.testing.assert_close(adv, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12)
    # round 2: population std 0.43 * 2e-8 = 8.7e-9 is below delta: advantage 0, where the TRL form (unbiased std
    # 1e-8) gives the last episode 1.5e-8 / 2e-8 = 0.75
    trl, _ = sepo_round_advantages(rewards, 4, return_mode="per_round", eps=1e-8)
    assert trl[3, 2].item() == pytest.approx(0.75, abs=1e-6)
    assert zero_std.tolist() == [[False, True, True]]
