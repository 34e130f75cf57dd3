"""The SEPO games as PettingZoo environments (sepo.interop.pettingzoo_env), checked by PettingZoo's own API
suites (`parallel_api_test`, `api_test`: its maintainers' tests) and by the signals and rewards they carry."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest
from pettingzoo.test import api_test, parallel_api_test

from envs import make_game
from sepo.interop import MissingExtraError
from sepo.interop.pettingzoo_env import aec_env, env, parallel_env

SIMULTANEOUS = ("ipd", "auction", "negotiation", "negotiation_multi")


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():  # the suites warn that a text observation is not a NumPy array
        warnings.simplefilter("ignore")
        yield


@pytest.mark.parametrize("game", SIMULTANEOUS)
@pytest.mark.parametrize("pool", [None, "training", "exploit", "collusive"])
def test_parallel_api_suite(game, pool):
    parallel_api_test(parallel_env(game, pool=pool), num_cycles=100)


@pytest.mark.parametrize("pool,seat", [(None, 0), ("training", 0), ("exploit", 1), ("collusive", 1)])
def test_kuhn_aec_api_suite(pool, seat):
    api_test(aec_env("kuhn", pool=pool, seat=seat), num_cycles=300)


def test_env_picks_the_form_of_the_game():
    assert isinstance(env("ipd"), type(parallel_env("ipd")))
    assert isinstance(env("kuhn"), type(aec_env("kuhn")))
    with pytest.raises(ValueError, match="one seat at a time: use aec_env"):
        parallel_env("kuhn")
    with pytest.raises(ValueError, match="simultaneous-move game: use parallel_env"):
        aec_env("ipd")


def _play_ipd(pool: str, opponent: str, action: str, reward: str = "payoff"):
    e = parallel_env("ipd", pool=pool, opponent=opponent, reward=reward)
    obs, infos = e.reset(seed=7)
    index = e.actions.index(action)
    assert "Prisoner's Dilemma" in infos["player_0"]["system_prompt"]
    steps = []
    while e.agents:
        steps.append(e.step({"player_0": index}))
    return steps


def test_exploit_pool_episode_carries_signals_and_sepo_reward():
    # always cooperating against always_defect: a = 0, o = 5 every round, s = 3/R = 1, externality (3 - 2.5)/3
    steps = _play_ipd("exploit", "always_defect", "COOPERATE")
    assert len(steps) == 8
    obs, rewards, terminations, _, infos = steps[-1]
    info = infos["player_0"]
    assert info["pool"] == "exploit" and info["opponent"] == "always_defect"
    assert info["signals"] == {"collusion": 0.0, "externality": pytest.approx(1 / 6), "exploitation": 5.0}
    lam = make_game("ipd").default_lambdas
    assert info["episode"]["e"] == 5.0
    assert info["episode"]["sepo_reward"] == pytest.approx(-(lam.e * 5.0 + lam.x / 6))
    assert rewards == {"player_0": 0.0} and terminations == {"player_0": True}
    assert obs["player_0"]["action_mask"].sum() == 0  # nothing is legal after the last round


def test_sepo_reward_mode_pays_the_episode_reward_on_the_last_step():
    steps = _play_ipd("collusive", "always_cooperate", "DEFECT", reward="sepo")
    assert [r["player_0"] for _, r, *_ in steps[:-1]] == [0.0] * 7
    lam = make_game("ipd").default_lambdas
    assert steps[-1][1]["player_0"] == pytest.approx(-lam.c)  # c = 1: it defected on its trusting partner
    assert steps[-1][4]["player_0"]["episode"]["c"] == 1.0


def test_payoff_rewards_are_the_round_payoffs_in_self_play():
    e = parallel_env("ipd")
    e.reset(seed=0)
    c, d = e.actions.index("COOPERATE"), e.actions.index("DEFECT")
    _, rewards, _, _, infos = e.step({"player_0": d, "player_1": c})
    assert rewards == {"player_0": 5.0, "player_1": 0.0}
    assert infos["player_0"]["pool"] == "self_play" and infos["player_0"]["episode"]["sepo_reward"] is None
    assert infos["player_1"]["signals"]["exploitation"] == 5.0  # its opponent got 5 more than it did
    assert infos["player_0"]["signals"]["exploitation"] == -5.0


def test_kuhn_against_a_pool_hands_the_agent_only_its_own_decisions():
    e = aec_env("kuhn", pool="exploit", opponent="always_bet", seat=1)
    e.reset(seed=11)
    fold = e.actions.index("FOLD")
    passes = e.actions.index("PASS")
    decisions = 0
    while not all(e.terminations.values()):
        assert e.agent_selection == "player_1"
        mask = e.observe("player_1")["action_mask"]
        e.step(fold if mask[fold] else passes)
        decisions += 1
    # always_bet bets whenever it can: seat 1 faces a bet in the hands seat 0 opens and passes, then is bet into,
    # in the hands it opens itself: two decisions at most per hand, one at least
    assert 6 <= decisions <= 12
    summary = e.infos["player_1"]["episode"]
    assert summary["rounds"] == 6 and summary["payoff"] < 0  # folding or passing into bets loses chips


def test_illegal_actions_and_bad_arguments_are_one_clear_error():
    e = aec_env("kuhn")
    e.reset(seed=0)
    with pytest.raises(ValueError, match=r"action 2 \(FOLD\) is not legal now; legal: \[0, 1\] \(PASS, BET\)"):
        e.step(2)
    with pytest.raises(ValueError, match="'nobody' is not in the 'exploit' pool of 'ipd'"):
        parallel_env("ipd", pool="exploit", opponent="nobody")
    with pytest.raises(ValueError, match="needs its pool"):
        parallel_env("ipd", opponent="always_defect")
    with pytest.raises(ValueError, match="reward='sepo' needs a pool opponent"):
        parallel_env("ipd", reward="sepo")


def test_missing_extra_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "pettingzoo", None)  # what `import pettingzoo` sees when it is not installed
    monkeypatch.delitem(sys.modules, "sepo.interop.pettingzoo_env")
    with pytest.raises(MissingExtraError) as caught:
        importlib.import_module("sepo.interop.pettingzoo_env")
    message = str(caught.value)
    assert "\n" not in message and "pip install 'sepo-fmsp[interop]'" in message and "pettingzoo" in message
