"""The five SEPO games registered as TextArena environments (sepo.interop.textarena_env), played through
TextArena's own `make`, `reset`, `get_observation`, `step` and `close`."""

from __future__ import annotations

import pytest
import textarena as ta

from envs import GAMES, make_game
from sepo.interop.episode import Episode
from sepo.interop.textarena_env import ENV_IDS


def _play(env, num_players: int, seed: int, answer):
    """Play one episode; `answer(player, observation, legal)` is the agent's text. Returns the actions played by
    seat, the step infos, and close()'s (rewards, game_info)."""
    env.reset(num_players=num_players, seed=seed)
    done, infos, played = False, [], []
    while not done:
        player, observation = env.get_observation()
        assert isinstance(observation, str) and observation
        seat = env.episode.agents[player]
        legal = env.episode.legal(seat)
        text = answer(player, observation, legal)
        played.append((seat, text.splitlines()[-1]))
        done, info = env.step(text)
        infos.append(info)
    return played, infos, env.close()


def first_legal(player, observation, legal):
    return f"I will keep it simple.\n{legal[0]}"


@pytest.mark.parametrize("game", list(GAMES))
def test_every_game_plays_in_self_play(game):
    env = ta.make(ENV_IDS[game])
    played, infos, (rewards, game_info) = _play(env, 2, seed=3, answer=first_legal)
    assert set(rewards) == {0, 1}
    num_rounds = make_game(game).num_rounds
    for player in (0, 1):
        assert game_info[player]["pool"] == "self_play" and game_info[player]["invalid_moves"] == 0
        assert game_info[player]["episode"]["rounds"] == num_rounds
        assert rewards[player] == game_info[player]["episode"]["u"]
    assert infos[-1]["round"] == num_rounds and infos[-1]["signals"] is not None


@pytest.mark.parametrize("game", list(GAMES))
@pytest.mark.parametrize("pool", ["training", "exploit", "collusive"])
def test_every_game_plays_against_every_pool(game, pool):
    env = ta.make(ENV_IDS[game], pool=pool, seat=1)
    played, infos, (rewards, game_info) = _play(env, 1, seed=5, answer=first_legal)
    assert game_info[0]["pool"] == pool and game_info[0]["seat"] == 1
    # the same seed and actions replayed on the core give the same SEPO reward: the adapter played what it was told
    replay = Episode(game, pool=pool, seat=1, seed=5)
    for seat, action in played:
        replay.step({seat: action})
    assert replay.done and rewards == {0: pytest.approx(replay.reward())}
    assert game_info[0]["opponent"] == replay.opponent_name
    assert all(info["pool"] == pool for info in infos)


def test_exploit_pool_reward_and_signals():
    env = ta.make("SEPO-IPD-v0", pool="exploit", opponent="always_defect")
    _, infos, (rewards, game_info) = _play(env, 1, seed=0, answer=lambda *_: "COOPERATE")
    lam = make_game("ipd").default_lambdas
    assert rewards == {0: pytest.approx(-(lam.e * 5.0 + lam.x / 6))}  # a = 0, o = 5 each round, x = 1/6
    assert infos[0]["signals"] == {"collusion": 0.0, "externality": pytest.approx(1 / 6), "exploitation": 5.0}


def test_simultaneous_moves_stay_hidden_until_the_round_closes():
    env = ta.make("SEPO-IPD-v0-raw")
    env.reset(num_players=2, seed=0)
    assert env.get_observation()[0] == 0
    env.step("DEFECT")
    player, messages = env.get_observation()
    assert player == 1
    assert "No history yet" in messages[-1][1]  # player 1's board: round 1, nothing revealed
    env.step("COOPERATE")
    player, messages = env.get_observation()
    assert player == 0 and "you DEFECT, opponent COOPERATE" in messages[-1][1]


def test_unparsed_answer_is_resubmitted_once_then_played_at_random():
    env = ta.make("SEPO-IPD-v0", pool="training", opponent="tit_for_tat")
    env.reset(num_players=1, seed=0)
    done, info = env.step("I am not sure.")
    assert not done and info["invalid_move"] is True and info["round"] == 0
    player, observation = env.get_observation()
    assert player == 0 and "did not end with a legal action" in observation
    done, info = env.step("still thinking")  # out of resubmissions: a seeded random legal action
    assert info["invalid_move"] is False and info["round"] == 1
    while not done:
        done, _ = env.step("COOPERATE")
    _, game_info = env.close()
    assert game_info[0]["invalid_moves"] == 1


def test_wrong_player_count_is_one_clear_error():
    env = ta.make("SEPO-Kuhn-v0", pool="exploit")
    with pytest.raises(ValueError, match="against a pool opponent has 1 player"):
        env.reset(num_players=2)
