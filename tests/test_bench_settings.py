"""The benchmarks' game settings (configs/benchmarks/*.yaml): each file loads into its benchmark's settings, names
registered games and strategies, and a bad key is a one-line error naming the file and the key."""

from __future__ import annotations

import pytest

import envs
from benchmarks import (
    behaviour,
    engine,
    exact_eval,
    games,
    organism_step,
    overhead,
    rollout,
    sandbox,
    step_trace,
)
from benchmarks.gpu import check as gpu_check
from benchmarks.settings import CONFIGS, game_settings, settings_path
from envs.tabular import exact_games
from sepo.config.checks import UsageError
from sepo.config.recipes import load_section

# benchmark module name -> its settings dataclass
SETTINGS = {
    "behaviour": behaviour.BehaviourSettings,
    "engine": engine.EngineSettings,
    "exact_eval": exact_eval.ExactEvalSettings,
    "games": games.GamesSettings,
    "gpu_check": gpu_check.CheckSettings,
    "organism_step": organism_step.OrganismStepSettings,
    "overhead": overhead.OverheadSettings,
    "rollout": rollout.RolloutSettings,
    "sandbox": sandbox.SandboxSettings,
    "step_trace": step_trace.StepSettings,
}


def test_every_settings_file_belongs_to_a_benchmark_and_loads():
    assert sorted(p.stem for p in CONFIGS.glob("*.yaml")) == sorted(SETTINGS)
    for name, kind in SETTINGS.items():
        assert isinstance(game_settings(kind, name), kind)


def test_the_settings_name_registered_games_and_their_strategies():
    def strategies(game: str) -> set[str]:
        return set(envs.strategy_registry(game))

    assert set(game_settings(engine.EngineSettings, "engine").answers) == set(envs.GAMES)  # every game answers
    assert game_settings(exact_eval.ExactEvalSettings, "exact_eval").game in exact_games()
    match = games.games_settings().matches()
    assert set(match.twins) <= strategies(match.game)
    assert games.games_settings().exploits().game in exact_games()
    box = game_settings(sandbox.SandboxSettings, "sandbox")
    assert len(box.players) == 2 and {p["strategy"] for p in box.players} <= strategies(box.game)
    mix = game_settings(overhead.OverheadSettings, "overhead").quick_pool_mix
    game = game_settings(overhead.OverheadSettings, "overhead").game
    assert {m for members in mix.values() if members != "all" for m in members} <= strategies(game)
    assert game_settings(rollout.RolloutSettings, "rollout").game in envs.GAMES
    for case in game_settings(behaviour.BehaviourSettings, "behaviour").cases.values():
        assert set(case["games"]) <= set(envs.GAMES)


@pytest.mark.parametrize(("text", "error"), [
    ("game: ipd\nrounds_param: num_rounds\nturns: 3\n", ", line 3: unknown key 'turns'; valid: game, rounds_param"),
    ("game: ipd\nround_param: num_rounds\n", ", line 2: unknown key 'round_param' (did you mean 'rounds_param'?)"),
    ("game: ipd\n", ": missing key 'rounds_param'"),
    ("game: ipd\nrounds_param: [num_rounds]\n", ", line 2: rounds_param must be a string, got ['num_rounds']"),
    ("- ipd\n", ": a recipe is a mapping of keys (key: value), not a list"),
])
def test_a_bad_settings_file_is_a_one_line_error_naming_file_and_key(tmp_path, text, error):
    path = tmp_path / "rollout.yaml"
    path.write_text(text)
    with pytest.raises(UsageError) as caught:
        load_section(rollout.RolloutSettings, path)
    message = str(caught.value)
    assert message.startswith(f"{path}{error[:1]}") and error in message and "\n" not in message


def test_a_game_without_answers_is_named_in_one_line(monkeypatch):
    answers = dict(game_settings(engine.EngineSettings, "engine").answers)
    dropped = next(iter(answers))
    del answers[dropped]
    monkeypatch.setattr(engine, "engine_settings", lambda: engine.EngineSettings("x", 1.0, 1.0, 1.0, answers))
    with pytest.raises(UsageError, match=f"{settings_path('engine')}: no answers for game '{dropped}'"):
        engine.game_answers(dropped)


def test_exact_eval_refuses_a_game_without_an_exact_analysis(tmp_path):
    plain = next(g for g in envs.GAMES if g not in exact_games())
    path = tmp_path / "exact_eval.yaml"
    path.write_text(f"game: {plain}\neval_config: none.yaml\nout: {tmp_path / 'out.json'}\n")
    with pytest.raises(UsageError, match=f"game '{plain}' has no exact analysis"):
        exact_eval.main(["--settings", str(path)])
    assert not (tmp_path / "out.json").exists()
