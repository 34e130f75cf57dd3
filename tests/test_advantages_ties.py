"""Tie robustness of the float64 group normalisation (`sepo.grpo.advantages`, SPREAD_RTOL).

Tied groups (every member has the same per-round rewards) must give advantages of exactly 0 and zero_std True
in every return / advantage mode; groups with real spread must equal TRL's own float32 formula
`(x - mean) / (std + eps)` (nan-aware unbiased std, or the population std under return_mode paper).
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from trl.trainer.utils import nanstd

from sepo.grpo.advantages import (
    PAPER_EPSILON,
    RETURN_MODES,
    SCALE_REWARDS,
    group_normalize,
    sepo_round_advantages,
)

ADVANTAGE_MODES = ("per_round", "episode")
TIE_VALUES = (-1.2, 0.1, 1.0 / 3.0, 1e6, -1e6, 1e-9, -1e-9, 0.0, 2.7, -0.35, 7.0 / 9.0, 123456.789)


def _eps(return_mode: str) -> float:
    return PAPER_EPSILON if return_mode == "paper" else 1e-4


def _tied_batch(rng: random.Random, groups: int, G: int, K: int) -> torch.Tensor:
    """(groups*G, K) rewards: within a group every member has the same row; some rounds NaN for all members."""
    rows = []
    for _ in range(groups):
        row = [rng.choice(TIE_VALUES) for _ in range(K)]
        for t in range(K):
            if rng.random() < 0.25:
                row[t] = math.nan  # absent for every member of the group
        if K > 1 and rng.random() < 0.5:  # often a tail of absent rounds, as when an episode ends early
            cut = rng.randrange(1, K)
            row[cut:] = [math.nan] * (K - cut)
        rows.extend([list(row) for _ in range(G)])
    return torch.tensor(rows, dtype=torch.float32)


@pytest.mark.parametrize("scale", SCALE_REWARDS)
@pytest.mark.parametrize("return_mode", RETURN_MODES)
@pytest.mark.parametrize("advantage_mode", ADVANTAGE_MODES)
def test_tied_groups_get_exactly_zero(return_mode, advantage_mode, scale):
    rng = random.Random(f"ties-{return_mode}-{advantage_mode}")
    checked_cells = 0
    for G in range(2, 17):
        for K in range(1, 9):
            for _ in range(2):
                groups = rng.randint(1, 3)
                rewards = _tied_batch(rng, groups, G, K)
                adv, zero_std = sepo_round_advantages(
                    rewards, G, advantage_mode=advantage_mode, return_mode=return_mode, eps=_eps(return_mode),
                    scale=scale,
                )
                assert adv.shape == rewards.shape
                assert torch.equal(adv, torch.zeros_like(adv)), (G, K, rewards[::G], adv[::G])
                present = ~torch.isnan(rewards.reshape(groups, G, K)[:, 0, :])  # (groups, K), shared by members
                if advantage_mode == "per_round":
                    assert zero_std.shape == (groups, K)
                    exists = present
                else:
                    assert zero_std.shape == (groups,)
                    exists = present.any(dim=1)
                assert bool(zero_std[exists].all()), (G, K, rewards[::G], zero_std)
                assert not bool(zero_std[~exists].any())  # cells that do not exist are not reported as ties
                checked_cells += int(exists.sum())
    assert checked_cells > (1000 if advantage_mode == "per_round" else 300)


@pytest.mark.parametrize("return_mode", RETURN_MODES)
def test_regression_constant_reward_paper_issue(return_mode):
    """The issue's case: reward -1.2 on every round of every member, G=8, 6 rounds. The old float32 paper
    formula gave about -0.92 on every member (the mean is an ulp off and the std is that ulp)."""
    G, K = 8, 6
    rewards = torch.full((G, K), -1.2, dtype=torch.float32)
    grouped = rewards.reshape(1, G, K)
    mean = grouped.mean(dim=1, keepdim=True)
    old = (grouped - mean) / ((grouped - mean).pow(2).mean(dim=1, keepdim=True).sqrt() + PAPER_EPSILON)
    assert float(old.abs().max()) > 0.5  # the case does bite the old formula
    for advantage_mode in ADVANTAGE_MODES:
        adv, zero_std = sepo_round_advantages(
            rewards, G, advantage_mode=advantage_mode, return_mode=return_mode, eps=_eps(return_mode)
        )
        assert torch.equal(adv, torch.zeros_like(adv))
        assert bool(zero_std.all())


def _reward_to_go(row: list[float]) -> list[float]:
    out, acc = [], 0.0
    for r in reversed(row):
        if not math.isnan(r):
            acc += r
        out.append(math.nan if math.isnan(r) else acc)
    return out[::-1]


def _trl_normalize(values: torch.Tensor, G: int, eps: float, population: bool) -> torch.Tensor:
    """TRL's formula in float32, per trailing index; NaN (absent or single-member cells) -> 0."""
    x = values.to(torch.float32).reshape(-1, G, *values.shape[1:])
    mean = torch.nanmean(x, dim=1, keepdim=True)
    if population:
        std = torch.nanmean((x - mean) ** 2, dim=1, keepdim=True).sqrt()
    else:
        std = nanstd(x, dim=1, keepdim=True)
    return torch.nan_to_num((x - mean) / (std + eps), nan=0.0).reshape(values.shape)


def _signal_rows(rows: list[list[float]], return_mode: str, advantage_mode: str) -> list[list[float]]:
    """What gets normalised, per member: the episode mean, the reward-to-go, or the round reward."""
    if advantage_mode == "episode":
        return [[sum(v for v in r if not math.isnan(v)) / max(1, sum(not math.isnan(v) for v in r))
                 if any(not math.isnan(v) for v in r) else math.nan] for r in rows]
    return [_reward_to_go(r) for r in rows] if return_mode == "reward_to_go" else rows


def _well_conditioned(signal: list[list[float]]) -> bool:
    """Every existing cell has population std >= 0.3 of its largest magnitude, so float32 rounding (a few
    ulps of the values) moves the float32 formula by well under its tolerance."""
    for t in range(len(signal[0])):
        col = [r[t] for r in signal if not math.isnan(r[t])]
        if not col:
            continue
        mean = sum(col) / len(col)
        std = math.sqrt(sum((v - mean) ** 2 for v in col) / len(col))
        if std < 0.3 * max(abs(v) for v in col):
            return False
    return True


def _spread_group(rng: random.Random, G: int, K: int, return_mode: str, advantage_mode: str) -> list[list[float]]:
    for _ in range(10_000):
        absent = [rng.random() < 0.2 for _ in range(K)]  # rounds absent for the whole group
        if all(absent):
            continue
        rows = [[math.nan if absent[t] else rng.gauss(0.0, 2.0) for t in range(K)] for _ in range(G)]
        rows = torch.tensor(rows, dtype=torch.float32).tolist()  # the values as float32 holds them
        if _well_conditioned(_signal_rows(rows, return_mode, advantage_mode)):
            return rows
    raise AssertionError("no well-conditioned group drawn")


@pytest.mark.parametrize("return_mode", RETURN_MODES)
@pytest.mark.parametrize("advantage_mode", ADVANTAGE_MODES)
def test_groups_with_spread_match_trl_formula_float32(return_mode, advantage_mode):
    rng = random.Random(f"spread-{return_mode}-{advantage_mode}")
    eps = _eps(return_mode)
    population = return_mode == "paper"
    nonzero = 0
    for G in range(2, 17):
        for K in range(1, 9):
            groups = rng.randint(1, 3)
            rows = [row for _ in range(groups) for row in _spread_group(rng, G, K, return_mode, advantage_mode)]
            rewards = torch.tensor(rows, dtype=torch.float32)
            adv, zero_std = sepo_round_advantages(
                rewards, G, advantage_mode=advantage_mode, return_mode=return_mode, eps=eps
            )
            present = ~torch.isnan(rewards)
            if advantage_mode == "per_round":
                signal = torch.tensor(_signal_rows(rows, return_mode, advantage_mode), dtype=torch.float32)
                expected = _trl_normalize(signal, G, eps, population)
                exists = present.reshape(groups, G, K)[:, 0, :]
            else:
                episode = torch.nanmean(rewards, dim=1)
                expected = _trl_normalize(episode, G, eps, population).unsqueeze(1).expand_as(rewards)
                exists = present.reshape(groups, G, K)[:, 0, :].any(dim=1)
            expected = torch.where(present, expected, torch.zeros_like(expected))
            assert adv.dtype == torch.float32
            torch.testing.assert_close(adv, expected, rtol=1e-5, atol=1e-6)
            assert not bool(zero_std[exists].any())  # real spread is never a tie
            nonzero += int((adv.abs() > 0.1).sum())
    assert nonzero > 1000


@pytest.mark.parametrize("paper", [False, True])
def test_spread_matches_trl_formula_float64_any_conditioning(paper):
    """float64 input: the result is TRL's formula in float64 to 1e-12, however small the spread (down to
    1e-6 of the values' size, far above SPREAD_RTOL)."""
    rng = random.Random(f"f64-{paper}")
    eps = PAPER_EPSILON if paper else 1e-4
    for G in range(2, 17):
        for K in range(1, 9):
            base = [rng.gauss(0.0, 100.0) for _ in range(K)]
            width = [10.0 ** rng.uniform(-6, 0) for _ in range(K)]
            rows = [[b * (1.0 + w * rng.uniform(-1, 1)) for b, w in zip(base, width)] for _ in range(G)]
            absent = [rng.random() < 0.2 for _ in range(K)]
            rows = [[math.nan if absent[t] else r[t] for t in range(K)] for r in rows]
            values = torch.tensor(rows, dtype=torch.float64)
            adv, zero_std = group_normalize(values, G, eps=eps, paper=paper)
            x = values.reshape(1, G, K)
            mean = torch.nanmean(x, dim=1, keepdim=True)
            std = (torch.nanmean((x - mean) ** 2, dim=1, keepdim=True).sqrt() if paper
                   else nanstd(x, dim=1, keepdim=True))
            expected = torch.nan_to_num((x - mean) / (std + eps), nan=0.0).reshape(G, K)
            assert adv.dtype == torch.float64
            torch.testing.assert_close(adv, expected, rtol=1e-12, atol=1e-12)
            assert zero_std.tolist() == [[False] * K]  # absent cells do not exist, present ones have spread


def test_tied_and_spread_groups_in_one_batch_are_independent():
    """A tied group next to spread groups: the tie is 0 and the spread groups equal TRL's formula."""
    rng = random.Random(7)
    G, K = 5, 4
    spread = [[rng.gauss(0, 1) for _ in range(K)] for _ in range(2 * G)]
    tie = [[-1.2, 0.1, 1e6, math.nan]] * G
    rewards = torch.tensor(spread[:G] + tie + spread[G:], dtype=torch.float32)
    adv, zero_std = group_normalize(rewards, G)
    assert torch.equal(adv[G : 2 * G], torch.zeros(G, K))
    assert zero_std.tolist() == [[False] * K, [True, True, True, False], [False] * K]
    expected = _trl_normalize(rewards, G, 1e-4, population=False)
    torch.testing.assert_close(adv[:G], expected[:G], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(adv[2 * G :], expected[2 * G :], rtol=1e-5, atol=1e-6)


def test_paper_mode_uses_population_std():
    """Two members (1, 3): population std 1 gives ±1; the unbiased std sqrt(2) would give ±0.707."""
    rewards = torch.tensor([[1.0], [3.0]])
    paper, _ = group_normalize(rewards, 2, eps=PAPER_EPSILON, paper=True)
    trl, _ = group_normalize(rewards, 2, eps=PAPER_EPSILON, paper=False)
    torch.testing.assert_close(paper, torch.tensor([[-1.0], [1.0]]), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(trl, torch.tensor([[-1.0], [1.0]]) / math.sqrt(2.0), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("scale", SCALE_REWARDS)
def test_scale_rewards_per_round_definitions(scale):
    """Per round, TRL's three scalings: group std, the std of every existing value at that round in the batch,
    or none (the centred value), computed here in float64 from their definitions."""
    rng = random.Random(f"scale-{scale}")
    for G in range(2, 9):
        for K in range(1, 6):
            groups = rng.randint(1, 4)
            rows = [[rng.gauss(0.0, 3.0) if rng.random() > 0.15 else math.nan for _ in range(K)]
                    for _ in range(groups * G)]
            values = torch.tensor(rows, dtype=torch.float64)
            adv, _ = group_normalize(values, G, eps=1e-4, scale=scale)
            x = values.reshape(groups, G, K)
            centred = x - torch.nanmean(x, dim=1, keepdim=True)
            if scale == "group":
                expected = centred / (nanstd(x, dim=1, keepdim=True) + 1e-4)
            elif scale == "batch":
                expected = centred / (nanstd(values, dim=0).reshape(1, 1, K) + 1e-4)
            else:
                expected = centred
            members = (~torch.isnan(x)).sum(dim=1, keepdim=True)
            expected = torch.where(members > 1, expected, torch.zeros_like(expected))  # one member: no baseline
            expected = torch.nan_to_num(expected, nan=0.0).reshape(values.shape)
            torch.testing.assert_close(adv, expected, rtol=1e-12, atol=1e-12)


def test_unknown_scale_rewards_is_refused():
    with pytest.raises(ValueError, match="unknown scale_rewards 'grp'"):
        group_normalize(torch.zeros(4, 1), 2, scale="grp")
