"""Benchmark the envs engines against the reference libraries they are checked against.

(a) IPD: every ordered pair of our deterministic Axelrod-twin strategies plays a 200-turn match with
    `envs.play_episode` and with `axelrod.Match.play`; per-match time of each and the speedup.
(b) Kuhn: exact exploitability of random tabular policies with `envs.kuhn_exact.exploitability` and with
    OpenSpiel's `exploitability` on the equivalent `TabularPolicy`; per-call time and the speedup.
Both parts also check that the two implementations agree (totals exactly, exploitability to 1e-9).

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

from envs import make_game, make_strategy, play_episode
from envs.kuhn import INFO_STATES, actions_at
from envs.kuhn_exact import exploitability
from sepo.checks import UsageError
from sepo.subcommands import report_usage_errors

if TYPE_CHECKING:
    from sepo.recipes import RecipeParser

PROG = "python -m benchmarks.games"

# Our deterministic IPD strategies and their Axelrod 4.13.1 twins (checked move for move in tests/test_ipd.py).
AXELROD_TWINS = {
    "tit_for_tat": "TitForTat",
    "grim_trigger": "Grudger",
    "always_defect": "Defector",
    "always_cooperate": "Cooperator",
    "tit_for_two_tats": "TitFor2Tats",
    "win_stay_lose_shift": "WinStayLoseShift",
    "suspicious_tit_for_tat": "SuspiciousTitForTat",
    "prober": "Prober",
    "alternator": "Alternator",
}
TURNS = 200
KUHN_POLICIES = 20
_KUHN_CARD_INDEX = {"J": "0", "Q": "1", "K": "2"}  # OpenSpiel kuhn_poker info states: "0", "1pb", ...
_KUHN_ACTION_INDEX = {"PASS": 0, "FOLD": 0, "BET": 1, "CALL": 1}  # OpenSpiel: 0 = Pass(/fold), 1 = Bet(/call)


def _best_time(fn: Callable[[], object], repeats: int) -> float:
    """Smallest wall time of `repeats` calls of `fn`, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_ipd(repeats: int) -> dict[str, Any]:
    """Per-match milliseconds of 200-turn matches, ours vs Axelrod, over all ordered twin pairs."""
    start = time.perf_counter()
    # deferred: axelrod is the [dev] extra's reference, and its import time is itself a measured figure
    import axelrod

    import_s = time.perf_counter() - start
    game = make_game("ipd", num_rounds=TURNS)
    ax_game = axelrod.Game(r=game.R, s=game.S, t=game.T, p=game.P)
    pairs = list(itertools.product(AXELROD_TWINS, repeat=2))

    def ours() -> list[tuple[float, float]]:
        return [
            play_episode(game, [make_strategy("ipd", a), make_strategy("ipd", b)], random.Random(0)).totals
            for a, b in pairs
        ]

    def theirs() -> list[tuple[float, float]]:
        totals = []
        for a, b in pairs:
            players = (getattr(axelrod, AXELROD_TWINS[a])(), getattr(axelrod, AXELROD_TWINS[b])())
            match = axelrod.Match(players, turns=TURNS, game=ax_game)
            match.play()
            totals.append(match.final_score())
        return totals

    if ours() != [tuple(map(float, t)) for t in theirs()]:
        raise AssertionError("IPD totals differ from axelrod's")
    ours_ms = _best_time(ours, repeats) / len(pairs) * 1e3
    axelrod_ms = _best_time(theirs, repeats) / len(pairs) * 1e3
    return {
        "pairs": len(pairs),
        "turns": TURNS,
        "ours_ms_per_match": ours_ms,
        "axelrod_ms_per_match": axelrod_ms,
        "speedup": axelrod_ms / ours_ms,
        "axelrod_import_s": import_s,
    }


def random_kuhn_policy(rng: random.Random) -> dict[str, dict[str, float]]:
    """A random tabular policy over all 12 info states (probabilities uniform on the simplex)."""
    policy = {}
    for info in INFO_STATES:
        weights = [rng.expovariate(1.0) for _ in actions_at(info[1:])]
        policy[info] = {a: w / sum(weights) for a, w in zip(actions_at(info[1:]), weights)}
    return policy


def to_openspiel(policy: dict[str, dict[str, float]], game: Any) -> Any:
    """The equivalent OpenSpiel `TabularPolicy` of a policy over our info-state strings."""
    # deferred: open_spiel is the [dev] extra's reference; only the comparison against it needs it
    from open_spiel.python.policy import TabularPolicy

    tabular = TabularPolicy(game)
    for info, row in policy.items():
        probs = tabular.policy_for_key(_KUHN_CARD_INDEX[info[0]] + info[1:])
        for action, p in row.items():
            probs[_KUHN_ACTION_INDEX[action]] = p
    return tabular


def bench_kuhn(repeats: int) -> dict[str, Any]:
    """Per-call milliseconds of exact exploitability, ours vs OpenSpiel, on random tabular policies."""
    # deferred: open_spiel is the [dev] extra's reference; the IPD part and our own exact exploitability run
    # without it
    import pyspiel
    from open_spiel.python.algorithms.exploitability import exploitability as openspiel_exploitability

    game = pyspiel.load_game("kuhn_poker")
    rng = random.Random(0)
    policies = [random_kuhn_policy(rng) for _ in range(KUHN_POLICIES)]
    tabular = [to_openspiel(p, game) for p in policies]
    ours = [exploitability(p) for p in policies]
    theirs = [openspiel_exploitability(game, t) for t in tabular]
    worst = max(abs(a - b) for a, b in zip(ours, theirs))
    if worst > 1e-9:
        raise AssertionError(f"Kuhn exploitability differs from OpenSpiel's by {worst:.3g}")
    ours_ms = _best_time(lambda: [exploitability(p) for p in policies], repeats) / len(policies) * 1e3
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
    return {"benchmark": "envs", "repeats": repeats, "ipd": bench_ipd(repeats), "kuhn": bench_kuhn(repeats)}


def bench(quick: bool, gpu: bool) -> dict[str, Any]:
    """The suite's envs part (the engines run on the CPU whatever `gpu` says)."""
    return run(repeats=1 if quick else 5)


def format_table(results: dict[str, Any]) -> str:
    """A compact text table of `run`'s figures."""
    ipd, kuhn = results["ipd"], results["kuhn"]
    rows = [
        ("task", "ours (ms)", "reference (ms)", "speedup"),
        (
            f"IPD {ipd['turns']}-turn match ({ipd['pairs']} pairs) vs axelrod",
            f"{ipd['ours_ms_per_match']:.3f}",
            f"{ipd['axelrod_ms_per_match']:.3f}",
            f"{ipd['speedup']:.1f}x",
        ),
        (
            f"Kuhn exploitability ({kuhn['policies']} policies) vs OpenSpiel",
            f"{kuhn['ours_ms_per_call']:.3f}",
            f"{kuhn['openspiel_ms_per_call']:.3f}",
            f"{kuhn['speedup']:.1f}x",
        ),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths)))
             for r in rows]  # fmt: skip
    lines.insert(1, "-" * len(lines[0]))
    lines.append(
        f"(best of {results['repeats']}; axelrod import {ipd['axelrod_import_s']:.1f} s; "
        f"Kuhn max |diff| {kuhn['max_abs_diff']:.1e})"
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
    # deferred: sepo.recipes imports transformers' argument parser (~1.4 s); test_ipd imports this module's
    # Axelrod twins without a command line
    from sepo.recipes import RecipeParser

    return RecipeParser((GamesConfig,), prog=PROG, description=__doc__.splitlines()[0])


def main(argv: list[str] | None = None) -> int:
    (args,) = parser().parse(sys.argv[1:] if argv is None else argv)
    results = run(args.repeats)
    print(json.dumps(results, indent=2) if args.json else format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
