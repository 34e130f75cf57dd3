"""The SEPO games of `envs` as FMSP domains: an exploiter population against a cooperator population.

Policies are duck-typed `envs.base.Strategy` classes that receive `View.to_dict()` (the pool manifest's
`"view": "dict"` form), so an exported policy file is loaded by `sepo.pools.load_pool_dir` unchanged.
Both sides are scored by their own mean per-round payoff, normalised to [0, 1] by the game's payoff
range; the sides differ in the goal their task prompt states and in the pool they are exported to.
A match plays `n_episodes` seeded episodes, alternating seats so neither side keeps a seat advantage; each
episode's rng (the deal, the seats' rngs) is keyed by the run's secret `rng_key` (`episode_rng`).
The game runs in the harness; each policy is an `envs.sandbox.SandboxedStrategy` whose every action is
checked against the view's legal actions.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envs import GAMES, Game, Strategy, game_spec, make_game, play_episode, strategy_registry
from envs.base import MatchResult
from envs.sandbox import SandboxedPolicy, SandboxedStrategy
from envs.sandbox.rng import private_rng
from fmsp.domain import PolicyCode, PolicyInterface

SIDES = ("exploiter", "cooperator")
DEFAULT_CONFIG: dict[str, Any] = {"n_episodes": 20, "seed": 0, "game_params": {}}


def _strategy(policy: SandboxedPolicy) -> SandboxedStrategy:
    return SandboxedStrategy(policy, policy.label, "dict")


def episode_rng(key: str, seed: int, episode: int) -> random.Random:
    """The harness's rng of one match episode (the deal, then each seat's rng): keyed by the run's secret key
    (`SandboxConfig.rng_key`), so a policy that knows the config's seed still cannot compute the deal."""
    return private_rng(key, "fmsp-episode", seed, episode)


def play_episodes(game: Game, a: Strategy, b: Strategy, config: Mapping[str, Any], key: str) -> list[MatchResult]:
    """The match's seeded episodes, `a` in seat 0 on even episodes."""
    return [play_episode(game, [a, b] if i % 2 == 0 else [b, a], episode_rng(key, config["seed"], i))
            for i in range(config["n_episodes"])]  # fmt: skip


def _episodes(game: Game, a: Strategy, b: Strategy, config: Mapping[str, Any], key: str) -> tuple[float, float, int]:
    """Mean normalised payoff of `a` and `b` over the seeded episodes (a in seat 0 on even episodes)."""
    lo, hi = game.payoff_range
    totals, rounds = [0.0, 0.0], 0
    for i, episode in enumerate(play_episodes(game, a, b, config, key)):
        mine = (0, 1) if i % 2 == 0 else (1, 0)
        for side, seat in enumerate(mine):
            totals[side] += episode.totals[seat]
        rounds += len(episode.rounds)
    return tuple((t / rounds - lo) / (hi - lo) for t in totals) + (rounds,)  # type: ignore[return-value]


def play_match(policy_a: SandboxedPolicy, policy_b: SandboxedPolicy, config: Mapping[str, Any]) -> dict:
    """Match: policy_a (exploiter) against policy_b (cooperator) in `config["game"]`."""
    game = make_game(config["game"], **config["game_params"])
    score_a, score_b, rounds = _episodes(game, _strategy(policy_a), _strategy(policy_b), config, policy_a.config.rng_key)
    return {
        "score_a": score_a,
        "score_b": score_b,
        "details": {"rounds": rounds, "episodes": config["n_episodes"]},
    }


def unit_test(policy: SandboxedPolicy, side: str, config: Mapping[str, Any]) -> None:
    """The class loads, names itself, and plays full episodes in both seats against a scripted opponent
    (in the harness) with legal actions only. Raises AssertionError (or the policy's PolicyError)."""
    assert side in SIDES, f"side must be one of {SIDES}, got {side!r}"
    info = policy.loaded()
    for attr in ("name", "description"):
        assert isinstance(info.get(attr), str), f"the policy class needs a string `{attr}`"
    game = make_game(config["game"], **config["game_params"])
    opponent_name = game_spec(config["game"]).pools["training"][0]
    opponent = strategy_registry(config["game"])[opponent_name]()
    _episodes(game, _strategy(policy), opponent, {**config, "n_episodes": 2}, policy.config.rng_key)


# --- baselines: the scripted strategies rendered as code -----------------------------------------

_WRAPPER = '''from envs import make_strategy
from envs.base import View


class {cls}:
    """The scripted `{name}` strategy of envs.strategies.{game} (source below), on dict views."""

    name = {name!r}
    description = {description!r}

    def reset(self, game, seat, rng):
        self.inner = make_strategy({game!r}, {name!r})
        self.inner.reset(game, seat, rng)

    def act(self, view):
        fields = {{**view, "legal_actions": tuple(view["legal_actions"]), "history": tuple(view["history"])}}
        return self.inner.act(View(**fields))


# Reference implementation ({module}.{qualname}):
{source}
'''


def scripted_policy_code(game: str, name: str, side: str) -> PolicyCode:
    """Scripted strategy `name` of `game` as policy code: a dict-view wrapper plus its source as comments."""
    cls = strategy_registry(game)[name]
    source = "\n".join("# " + line if line else "#" for line in inspect.getsource(cls).rstrip().splitlines())
    description = cls.description or (cls.__doc__ or name).strip().splitlines()[0]
    code = _WRAPPER.format(
        cls="Scripted" + "".join(part.title() for part in name.split("_")),
        name=name,
        game=game,
        description=description,
        module=cls.__module__,
        qualname=cls.__qualname__,
        source=source,
    )
    return PolicyCode(name, description, code, side)


_PROMPT = """You write the {side} policy for the repeated game {game!r} (two seats, {rounds} rounds).
{goal}

The rules as the game explains them to a player:
{rules}

Write ONE Python class (imports allowed: {imports}):

class MyPolicy:
    name = "short_unique_name"
    description = "one line: the idea of the policy"
    def reset(self, game, seat, rng): ...   # start of every episode; rng is a seeded random.Random: use it
    def act(self, view: dict) -> str: ...   # must return one of view["legal_actions"]

`view` keys: game, seat, round (0-based), num_rounds, legal_actions (list of str), private (your
private information), current (public in-round information), history (one dict per finished round
from your point of view, with my_payoff and opp_payoff, and my_action/opp_action where moves are
simultaneous) and params (the game's parameters). Your score is your mean payoff per round scaled
to [0, 1]; you play both seats."""

_GOALS = {
    "exploiter": "Goal: maximise your own payoff; find and exploit weaknesses of the opponents' policies.",
    "cooperator": "Goal: maximise your own long-run payoff by building cooperation where it pays, while "
    "not letting exploiters take advantage of you.",
}


@dataclass(frozen=True)
class SepoGameDomain:
    """One `envs` game as an FMSP domain (exploiter vs cooperator)."""

    name: str
    config: Mapping[str, Any]
    sides: tuple[str, str] = SIDES
    allowed_imports: tuple[str, ...] = ("math", "random", "collections", "itertools", "envs")

    def task_prompt(self, side: str) -> str:
        _check_side(side)
        game = make_game(self.name, **self.config["game_params"])
        return _PROMPT.format(
            side=side,
            game=self.name,
            rounds=game.num_rounds,
            goal=_GOALS[side],
            rules=game.system_prompt(0),
            imports=", ".join(self.allowed_imports),
        )

    def baselines(self, side: str) -> list[PolicyCode]:
        _check_side(side)
        pools = game_spec(self.name).pools
        # a name may serve two pools (separation by role): each baseline once
        names = pools["exploit"] if side == "exploiter" else tuple(dict.fromkeys(pools["training"] + pools["collusive"]))
        return [scripted_policy_code(self.name, n, side) for n in names]

    def match_config(self) -> dict[str, Any]:
        return {**self.config, "game": self.name}

    def interface(self, side: str) -> PolicyInterface:
        _check_side(side)
        return PolicyInterface(("act",), preload=("envs",))

    def play_match(self, a: SandboxedPolicy, b: SandboxedPolicy) -> dict[str, Any]:
        return play_match(a, b, self.match_config())

    def unit_test(self, policy: SandboxedPolicy, side: str) -> None:
        unit_test(policy, side, self.match_config())


def _check_side(side: str) -> None:
    if side not in SIDES:
        raise ValueError(f"unknown side {side!r}; choose one of: {', '.join(SIDES)}")


def make_sepo_game_domain(game: str, **config: Any) -> SepoGameDomain:
    """The SEPO game `game` as an FMSP domain; `config` overrides DEFAULT_CONFIG (game_params: the game's)."""
    if game not in GAMES:
        raise ValueError(f"unknown game {game!r}; choose one of: {', '.join(GAMES)}")
    unknown = set(config) - set(DEFAULT_CONFIG)
    if unknown:
        raise ValueError(f"unknown config key(s) {sorted(unknown)}; valid: {', '.join(DEFAULT_CONFIG)}")
    merged = {**DEFAULT_CONFIG, **config}
    make_game(game, **merged["game_params"])  # bad game parameters fail here, with the game's message
    return SepoGameDomain(game, merged)
