"""A game is one registration: its spec is checked when loaded, and nothing outside `envs/` names a game.

The names come from the registry (`envs.GAMES`), so a newly registered game is guarded the day it registers.
"""

from __future__ import annotations

import importlib
import re
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest

import envs
from envs.registry import POOL_ROLES, Demonstration, GameSpec

ROOT = Path(__file__).resolve().parents[1]
# the packages and folders whose modules must not name a game (tests, configs and docs may)
GUARDED = ("sepo", "fmsp", "benchmarks", "launch")
# the modules this part of issue 37 (the registration) rewrote; the whole tree follows once every part is merged
REGISTRATION_CONSUMERS = (
    "sepo/pools.py",
    "sepo/sft/__init__.py",
    "sepo/sft/data.py",
    "sepo/sft/train.py",
    "sepo/config/recipes.py",
    "sepo/config/checks.py",
    "sepo/tiny_models.py",
    "sepo/quickstart.py",
    "sepo/eval/tournament.py",
    "sepo/objective.py",
    "sepo/grpo/config.py",
    "sepo/interop/__init__.py",
    "sepo/interop/episode.py",
    "sepo/interop/openenv_env.py",
    "sepo/interop/pettingzoo_env.py",
    "sepo/interop/textarena_env.py",
    "sepo/interop/trl_env.py",
    "sepo/eval/wandb_log.py",
    "sepo/eval/config.py",
    "sepo/eval/optimum.py",
    "sepo/backends/hf_decoding.py",
    "sepo/rollout/engine.py",
    "fmsp/domains/__init__.py",
    "fmsp/domains/sepo_games.py",
    "fmsp/export.py",
    "fmsp/config.py",
    "benchmarks/syscalls.py",
    # the benchmarks (their games: configs/benchmarks/*.yaml or the registry)
    "benchmarks/__init__.py",
    "benchmarks/__main__.py",
    "benchmarks/behaviour.py",
    "benchmarks/car_tag.py",
    "benchmarks/engine.py",
    "benchmarks/exact_eval.py",
    "benchmarks/gpu/check.py",
    "benchmarks/step_trace.py",
    "benchmarks/games.py",
    "benchmarks/organism_step.py",
    "benchmarks/overhead.py",
    "benchmarks/rollout.py",
    "benchmarks/sandbox.py",
    "benchmarks/sandbox_bounds.py",
    "benchmarks/settings.py",
    "benchmarks/sft_format.py",
    "benchmarks/startup.py",
    "benchmarks/suite.py",
)

# words of identifiers, strings and comments alike: `lm_kuhn`, `KuhnPoker`, "SEPO-IPD-v0" and "Kuhn's" all hold
# a game's word; `negotiation_multi` is the words negotiation, multi
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def game_mentions(text: str, games: list[str]) -> list[tuple[int, str]]:
    """(line number, game) for every line of `text` whose words contain a registered game's name (its words in a
    row, any case, in code, strings and comments alike)."""
    names = [(game, game.lower().split("_")) for game in games]
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        words = _words(line)
        for game, parts in names:
            if any(words[i : i + len(parts)] == parts for i in range(len(words) - len(parts) + 1)):
                found.append((number, game))
    return found


def offenders(paths: list[Path]) -> list[str]:
    """'path:line: game' for every mention of a registered game in `paths`."""
    games = list(envs.GAMES)
    return [f"{path.relative_to(ROOT)}:{line}: {game}"
            for path in paths for line, game in game_mentions(path.read_text(encoding="utf-8"), games)]  # fmt: skip


def guarded_modules() -> list[Path]:
    """Every Python module outside `envs/` that must not name a game."""
    return sorted(path for folder in GUARDED for path in (ROOT / folder).rglob("*.py"))


def test_the_check_finds_a_game_in_code_strings_and_comments():
    games = list(envs.GAMES)
    first, last = games[0], games[-1]
    text = "\n".join([
        "x = 1",
        f"name = {first.upper()!r}",                                    # a string, any case
        f"# the {first.capitalize()} recipe",                           # a comment
        f"run = lm_{last}_step",                                        # inside an identifier
        f"class {''.join(p.capitalize() for p in last.split('_'))}Poker: ...",  # CamelCase
        f"y = {first}x",                                                 # another word that begins with one
    ])  # fmt: skip
    assert game_mentions(text, games) == [(2, first), (3, first), (4, last), (5, last)]
    assert game_mentions("negotiation_multi", ["negotiation_multi"]) == [(1, "negotiation_multi")]
    assert game_mentions("multi negotiation", ["negotiation_multi"]) == []  # a name's words in its order only


def test_the_registration_consumers_name_no_game():
    paths = [ROOT / path for path in REGISTRATION_CONSUMERS]
    assert all(path.is_file() for path in paths)
    assert offenders(paths) == []


def test_no_module_outside_envs_names_a_game():
    modules = guarded_modules()
    assert len(modules) > 50  # the walk found the packages
    assert offenders(modules) == []


# ------------------------------------------------------------------------------------------------
# a registration is checked when it loads


def _registered(monkeypatch, spec: GameSpec) -> str:
    """Register `spec` under its name as a module of its own (the way a game module declares SPEC)."""
    module = types.ModuleType(f"envs_test_{spec.name}")
    module.SPEC = spec
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(envs.GAMES, spec.name, module.__name__)
    return spec.name


@pytest.fixture
def good_spec(monkeypatch):
    """A copy of the first registered game's spec under a new name, and the cache cleared after the test."""
    spec = envs.game_spec(next(iter(envs.GAMES)))
    yield replace(spec, name="made_up_game")
    envs.game_spec.cache_clear()


def test_a_good_registration_loads(monkeypatch, good_spec):
    name = _registered(monkeypatch, good_spec)
    assert envs.game_spec(name) is good_spec
    assert envs.make_game(name).num_rounds == good_spec.game().num_rounds


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: {"pools": {role: s.pools[role] for role in POOL_ROLES[:-1]}}, "pools must name the roles"),
        (lambda s: {"demonstration": replace(s.demonstration, mixture={**s.demonstration.mixture, "x": 0.5})},
         "mixture must sum to 1"),
    ],
    ids=["pools missing a role", "mixture not summing to 1"],
)
def test_a_malformed_spec_is_a_one_line_error_naming_the_game(good_spec, change, message):
    with pytest.raises(ValueError) as error:
        replace(good_spec, **change(good_spec))
    assert str(error.value).startswith("made_up_game: ") and message in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "change, where",
    [
        (lambda s: {"pools": {**s.pools, "exploit": (*s.pools["exploit"], "no_such_strategy")}}, "'exploit' pool"),
        (lambda s: {"demonstration": Demonstration({"no_such_strategy": 1.0}, s.demonstration.opponents, 1)},
         "mixture"),
        (lambda s: {"demonstration": replace(s.demonstration, opponents=("no_such_strategy",))}, "opponents"),
    ],
    ids=["pool", "demonstrator", "demonstrator's opponent"],
)
def test_an_unknown_strategy_in_a_registration_fails_naming_the_game(monkeypatch, good_spec, change, where):
    name = _registered(monkeypatch, replace(good_spec, **change(good_spec)))
    with pytest.raises(ValueError) as error:
        envs.make_game(name)
    text = str(error.value)
    assert text.startswith("made_up_game: ") and where in text and "'no_such_strategy'" in text
    assert "\n" not in text


def test_a_module_whose_spec_is_another_game_is_refused(monkeypatch, good_spec):
    module = types.ModuleType("envs_test_other")
    module.SPEC = good_spec
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(envs.GAMES, "other_game", module.__name__)
    with pytest.raises(ValueError, match="^other_game: envs_test_other.SPEC registers the game 'made_up_game'"):
        envs.game_spec("other_game")


# ------------------------------------------------------------------------------------------------
# the registered games


@pytest.mark.parametrize("game", list(envs.GAMES))
def test_every_registered_game_names_strategies_it_has(game):
    spec = envs.game_spec(game)
    strategies = envs.strategy_registry(game)
    named = {n for role in POOL_ROLES for n in spec.pools[role]}
    named |= set(spec.demonstration.mixture) | set(spec.demonstration.opponents)
    assert named <= set(strategies), sorted(named - set(strategies))
    assert spec.name == game == spec.game.name
    assert tuple(spec.pools) == POOL_ROLES
    assert all(spec.pools[role] for role in POOL_ROLES)  # every role has a default opponent
    assert spec.prompt_styles[0] == "chat"  # the method's prompt; a game that has more styles takes each by name
    if len(spec.prompt_styles) > 1:
        assert all(envs.make_game(game, prompt_style=style).prompt_style == style for style in spec.prompt_styles)
    if spec.exact is not None:  # the exact analysis is a module of envs that imports
        assert spec.exact.startswith("envs.") and importlib.import_module(spec.exact)


def test_a_registered_game_reaches_the_pools_and_sft_by_its_registration_alone(monkeypatch, good_spec):
    """What once needed edits in sepo (default pools, demonstrators, SFT's own copy of the game list) follows
    the registration: a game registered under a new name gets its pools, its SFT rows and the SFT defaults."""
    import dataclasses

    from sepo.pools import load_pools
    from sepo.sft.data import DataConfig, generate
    from sepo.sft.train import SEPOSFTConfig

    name = _registered(monkeypatch, good_spec)
    assert dict(load_pools(name).members) == dict(good_spec.pools)
    rows = generate([name], seed=0, episodes_scale=0.01)
    assert rows["train"] and {row["game"] for row in rows["train"]} == {name}
    assert {row["opponent"] for row in rows["train"]} <= set(good_spec.demonstration.opponents)
    for config in (DataConfig, SEPOSFTConfig):
        (games,) = [f.default_factory() for f in dataclasses.fields(config) if f.name == "games"]
        assert games == list(envs.GAMES) and name in games
