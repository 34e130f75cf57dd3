"""Benchmark the envs engines against the reference libraries they are checked against.

(a) Matches: every ordered pair of a repeated game's deterministic strategies that have Axelrod twins plays a
    match with `envs.play_episode` and with `axelrod.Match.play`; per-match time of each and the speedup.
(b) Exploitability: exact exploitability of random tabular policies with the game's exact analysis
    (`envs.tabular`) and with OpenSpiel's `exploitability` on the equivalent `TabularPolicy`; per-call time and
    the speedup.
Both parts also check that the two implementations agree (totals exactly, exploitability to 1e-9). Which games,
their twins and the key mapping are settings: configs/benchmarks/games.yaml.

    python -m benchmarks.games --repeats 5
"""

from __future__ import annotations

import itertools
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from benchmarks.settings import game_settings, settings_path
from envs import game_spec, make_game, make_strategy, play_episode
from envs.tabular import DecisionState, analysis
from sepo.config.checks import UsageError
from sepo.config.recipes import section_as
from sepo.config.subcommands import report_usage_errors

if TYPE_CHECKING:
    from sepo.config.recipes import RecipeParser

PROG = "python -m benchmarks.games"


@dataclass(frozen=True)
class MatchSettings:
    """The match comparison: a repeated 2x2 game (its payoffs R, S, T, P) and its strategies' Axelrod twins."""

    game: str
    rounds_param: str  # the game parameter that sets the match length
    turns: int
    twins: dict[str, str]  # our strategy -> its Axelrod class


@dataclass(frozen=True)
class ExploitabilitySettings:
    """The exploitability comparison: a game with an exact analysis and its OpenSpiel equivalent."""

    game: str
    openspiel_game: str
    policies: int
    first_char: dict[str, str]  # a state key's first character -> OpenSpiel's (the rest is the same)
    actions: dict[str, int]  # action text -> OpenSpiel action id


@dataclass(frozen=True)
class GamesSettings:
    """configs/benchmarks/games.yaml."""

    match: dict[str, Any]
    exploitability: dict[str, Any]

    def matches(self) -> MatchSettings:
        return section_as(MatchSettings, self.match, f"{settings_path('games')}: match")

    def exploits(self) -> ExploitabilitySettings:
        return section_as(ExploitabilitySettings, self.exploitability, f"{settings_path('games')}: exploitability")


def games_settings() -> GamesSettings:
    """The benchmark's settings."""
    return game_settings(GamesSettings, "games")


def _best_time(fn: Callable[[], object], repeats: int) -> float:
    """Smallest wall time of `repeats` calls of `fn`, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_matches(repeats: int, settings: MatchSettings) -> dict[str, Any]:
    """Per-match milliseconds of the settings' matches, ours vs Axelrod, over all ordered twin pairs."""
    start = time.perf_counter()
    # deferred: axelrod is the [dev] extra's reference, and its import time is itself a measured figure
    import axelrod

    import_s = time.perf_counter() - start
    name, twins, turns = settings.game, settings.twins, settings.turns
    game = make_game(name, **{settings.rounds_param: turns})
    ax_game = axelrod.Game(r=game.R, s=game.S, t=game.T, p=game.P)
    pairs = list(itertools.product(twins, repeat=2))

    def ours() -> list[tuple[float, float]]:
        return [
            play_episode(game, [make_strategy(name, a), make_strategy(name, b)], random.Random(0)).totals
            for a, b in pairs
        ]

    def theirs() -> list[tuple[float, float]]:
        totals = []
        for a, b in pairs:
            players = (getattr(axelrod, twins[a])(), getattr(axelrod, twins[b])())
            match = axelrod.Match(players, turns=turns, game=ax_game)
            match.play()
            totals.append(match.final_score())
        return totals

    if ours() != [tuple(map(float, t)) for t in theirs()]:
        raise AssertionError(f"{name} totals differ from axelrod's")
    ours_ms = _best_time(ours, repeats) / len(pairs) * 1e3
    axelrod_ms = _best_time(theirs, repeats) / len(pairs) * 1e3
    return {
        "pairs": len(pairs),
        "turns": turns,
        "ours_ms_per_match": ours_ms,
        "axelrod_ms_per_match": axelrod_ms,
        "speedup": axelrod_ms / ours_ms,
        "axelrod_import_s": import_s,
    }


def random_policy(states: list[DecisionState], rng: random.Random) -> dict[str, dict[str, float]]:
    """A random tabular policy over every decision state (probabilities uniform on the simplex)."""
    policy = {}
    for state in states:
        weights = [rng.expovariate(1.0) for _ in state.legal]
        policy[state.key] = {a: w / sum(weights) for a, w in zip(state.legal, weights)}
    return policy


def to_openspiel(policy: dict[str, dict[str, float]], game: Any, settings: ExploitabilitySettings) -> Any:
    """The equivalent OpenSpiel `TabularPolicy` of a policy over our state keys."""
    # deferred: open_spiel is the [dev] extra's reference; only the comparison against it needs it
    from open_spiel.python.policy import TabularPolicy

    tabular = TabularPolicy(game)
    for key, row in policy.items():
        probs = tabular.policy_for_key(settings.first_char[key[0]] + key[1:])
        for action, p in row.items():
            probs[settings.actions[action]] = p
    return tabular


def bench_exploitability(repeats: int, settings: ExploitabilitySettings) -> dict[str, Any]:
    """Per-call milliseconds of exact exploitability, ours vs OpenSpiel, on random tabular policies."""
    # deferred: open_spiel is the [dev] extra's reference; the match part and our own exact exploitability run
    # without it
    import pyspiel
    from open_spiel.python.algorithms.exploitability import exploitability as openspiel_exploitability

    exact = analysis(settings.game)
    if exact is None:
        raise UsageError(f"{settings_path('games')}: game {settings.game!r} has no exact analysis")
    game = pyspiel.load_game(settings.openspiel_game)
    rng = random.Random(0)
    states = exact.states(None)
    policies = [random_policy(states, rng) for _ in range(settings.policies)]
    tabular = [to_openspiel(p, game, settings) for p in policies]
    ours = [exact.exploitability(p, None) for p in policies]
    theirs = [openspiel_exploitability(game, t) for t in tabular]
    worst = max(abs(a - b) for a, b in zip(ours, theirs))
    if worst > 1e-9:
        raise AssertionError(f"{settings.game} exploitability differs from OpenSpiel's by {worst:.3g}")
    ours_ms = _best_time(lambda: [exact.exploitability(p, None) for p in policies], repeats) / len(policies) * 1e3
    openspiel_ms = (
        _best_time(lambda: [openspiel_exploitability(game, t) for t in tabular], repeats)
        / len(policies)
        * 1e3
    )
    return {
        "policies": len(policies),
        "ours_ms_per_call": ours_ms,
        "openspiel_ms_per_call": openspiel_ms,
        "speedup": openspiel_ms / ours_ms,
        "max_abs_diff": worst,
    }


def run(repeats: int = 5) -> dict[str, Any]:
    """All figures of this benchmark (best of `repeats` timings), as a JSON-able dict."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    settings = games_settings()
    matches, exploits = settings.matches(), settings.exploits()
    return {"benchmark": "envs", "repeats": repeats, matches.game: bench_matches(repeats, matches),
            exploits.game: bench_exploitability(repeats, exploits)}


def bench(quick: bool, gpu: bool) -> dict[str, Any]:
    """The suite's envs part (the engines run on the CPU whatever `gpu` says)."""
    return run(repeats=1 if quick else 5)


def _parts(results: dict[str, Any]) -> tuple[str, dict[str, Any], str, dict[str, Any]]:
    """(match game, its figures, exploitability game, its figures) of a record (found by their figures' keys)."""
    parts = {k: v for k, v in results.items() if isinstance(v, dict)}
    match = next(k for k, v in parts.items() if "axelrod_ms_per_match" in v)
    exploit = next(k for k, v in parts.items() if "openspiel_ms_per_call" in v)
    return match, parts[match], exploit, parts[exploit]


def suite_rows(results: dict[str, Any], title: Callable[[str], str]) -> list[tuple[str, str, str, str, str]]:
    """The performance suite's rows of a record (benchmark, ours, named baseline, ratio, goal); `title` writes a
    game's name."""
    m_game, m, e_game, e = _parts(results)
    return [(f"{title(m_game)} {m['turns']}-turn match", f"{m['ours_ms_per_match']:.3f} ms",
             f"{m['axelrod_ms_per_match']:.3f} ms Axelrod", f"{m['speedup']:.1f}x", "-"),
            (f"{title(e_game)} exact exploitability", f"{e['ours_ms_per_call']:.3f} ms",
             f"{e['openspiel_ms_per_call']:.3f} ms OpenSpiel", f"{e['speedup']:.1f}x", "-")]  # fmt: skip


def format_table(results: dict[str, Any]) -> str:
    """A compact text table of `run`'s figures."""
    m_game, m, e_game, e = _parts(results)
    m_title, e_title = game_spec(m_game).title, game_spec(e_game).title
    rows = [
        ("task", "ours (ms)", "reference (ms)", "speedup"),
        (
            f"{m_title} {m['turns']}-turn match ({m['pairs']} pairs) vs axelrod",
            f"{m['ours_ms_per_match']:.3f}",
            f"{m['axelrod_ms_per_match']:.3f}",
            f"{m['speedup']:.1f}x",
        ),
        (
            f"{e_title} exploitability ({e['policies']} policies) vs OpenSpiel",
            f"{e['ours_ms_per_call']:.3f}",
            f"{e['openspiel_ms_per_call']:.3f}",
            f"{e['speedup']:.1f}x",
        ),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths)))
             for r in rows]  # fmt: skip
    lines.insert(1, "-" * len(lines[0]))
    lines.append(
        f"(best of {results['repeats']}; axelrod import {m['axelrod_import_s']:.1f} s; "
        f"{e_title} max |diff| {e['max_abs_diff']:.1e})"
    )
    return "\n".join(lines)


@dataclass
class GamesConfig:
    """The keys of `python -m benchmarks.games` (command line or `--config` recipe); checked when built."""

    repeats: int = field(default=5, metadata={"help": "timing repeats; the best is reported"})
    json: bool = field(default=False, metadata={"help": "print the figures as JSON instead of a table"})

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise UsageError("--repeats must be >= 1")


def parser() -> RecipeParser:
    """The command line of the games benchmark."""
    # deferred: sepo.config.recipes imports transformers' argument parser (~1.4 s); the tests import this module's
    # settings without a command line
    from sepo.config.recipes import RecipeParser

    return RecipeParser((GamesConfig,), prog=PROG, description=__doc__.splitlines()[0])


def main(argv: list[str] | None = None) -> int:
    (args,) = parser().parse(sys.argv[1:] if argv is None else argv)
    results = run(args.repeats)
    print(json.dumps(results, indent=2) if args.json else format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
