"""`sepo tournament`: a round robin among the scripted strategies of one game.

Every ordered pair (a, b), self-play included, plays `--episodes` episodes with a in seat 0 and as
many with a in seat 1; the table and the JSON give each side's mean payoff per round over all of
them. With `--rounds 200` in the iterated prisoner's dilemma the deterministic pairs reproduce Axelrod's match
totals (tests/test_tournament.py).
"""

from __future__ import annotations

import inspect
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from envs import GAMES, Game, make_game, play_episode, strategy_registry
from sepo.checks import COUNT, OPTIONAL_COUNT, UsageError, check_choice, check_names
from sepo.files import write_json_atomic
from sepo.recipes import RecipeParser


@dataclass
class TournamentConfig:
    """The keys of `sepo tournament` (command line or `--config` recipe); the checks run when it is built."""

    game: str = field(metadata={"help": f"one of: {', '.join(GAMES)}", "aliases": ["--games"]})
    strategies: list[str] | None = field(
        default=None, metadata={"help": "strategy names, space- or comma-separated (default: all of the game's)",
                                 "metavar": "NAME"})
    rounds: int | None = field(default=None, metadata={"help": "rounds per episode (default: the game's own)"})
    episodes: int = field(default=10, metadata={"help": "episodes per ordered pair and seat"})
    seed: int = field(default=0, metadata={"help": "base seed"})
    json: str | None = field(
        default=None, metadata={"help": "write the results as JSON to this file (default: none)", "metavar": "FILE"})

    def __post_init__(self) -> None:
        check_choice("game", self.game, GAMES)
        COUNT.check("--episodes", self.episodes)
        OPTIONAL_COUNT.check("--rounds", self.rounds)
        if self.json is not None and Path(self.json).is_dir():
            raise UsageError(f"--json {self.json!r} is a directory; give a file name")
        if self.strategies is not None:
            self.strategies = check_names(f"{self.game} strategy", self.strategies, sorted(strategy_registry(self.game)))


def parser() -> RecipeParser:
    """The command line of `sepo tournament`."""
    return RecipeParser((TournamentConfig,), prog="sepo tournament", description=__doc__.split("\n\n")[0])


def _rounds_parameter(game: Game) -> str:
    """The constructor parameter that sets the episode length (rounds, or hands in a card game)."""
    params = inspect.signature(type(game)).parameters
    for name in ("num_rounds", "num_hands"):
        if name in params:
            return name
    raise ValueError(f"game {game.name!r} has no num_rounds/num_hands parameter; --rounds cannot be set")


def round_robin(
    game_name: str,
    names: Sequence[str],
    episodes: int,
    seed: int,
    rounds: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Play the round robin: {"game", "rounds", "pairs": [{"a", "b", "mean_payoff_a", "mean_payoff_b"}]}.

    Each unordered pair {a, b} (a == b included) plays `episodes` episodes in each seat order; the
    per-round means are Σ payoffs / Σ rounds over all 2·episodes episodes. Seeds are derived from
    (seed, a, b, seat order, episode), so any subset of strategies gives the same numbers per pair.
    """
    game = make_game(game_name)
    if rounds is not None:
        game = make_game(game_name, **{_rounds_parameter(game): rounds})
    registry = strategy_registry(game_name)
    totals: dict[tuple[str, str], list[float]] = {}  # (a, b) -> [a's payoff, b's payoff, rounds]
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i:]]
    task = progress.add_task(f"{game_name} round robin", total=len(pairs)) if progress else None
    for a, b in pairs:
        acc = [0.0, 0.0, 0.0]
        for order, seats in enumerate(((a, b), (b, a))):
            for k in range(episodes):
                rng = random.Random(f"{seed}:{a}:{b}:{order}:{k}")
                ep = play_episode(game, [registry[seats[0]](), registry[seats[1]]()], rng)
                a_seat = 0 if order == 0 else 1
                acc[0] += ep.totals[a_seat]
                acc[1] += ep.totals[1 - a_seat]
                acc[2] += len(ep.rounds)
        if a == b:  # self-play: both sides are the same strategy, averaged over the two seats
            acc[0] = acc[1] = (acc[0] + acc[1]) / 2
        totals[(a, b)] = acc
        totals[(b, a)] = [acc[1], acc[0], acc[2]]
        if progress is not None and task is not None:
            progress.advance(task)
    return {
        "game": game_name,
        "rounds": game.num_rounds,
        "pairs": [
            {
                "a": a,
                "b": b,
                "mean_payoff_a": totals[(a, b)][0] / totals[(a, b)][2],
                "mean_payoff_b": totals[(a, b)][1] / totals[(a, b)][2],
            }
            for a in names
            for b in names
        ],
    }


def _table(result: dict[str, Any], names: Sequence[str]) -> Table:
    table = Table(
        title=f"{result['game']}, {result['rounds']} rounds: mean payoff per round of the row strategy"
    )
    table.add_column("row \\ column", style="bold")
    for name in names:
        table.add_column(name, justify="right")
    cell = {(p["a"], p["b"]): p["mean_payoff_a"] for p in result["pairs"]}
    for a in names:
        table.add_row(a, *(f"{cell[(a, b)]:.3f}" for b in names))
    return table


def main(argv: Sequence[str] | None = None) -> int:
    (args,) = parser().parse(argv)
    names = list(strategy_registry(args.game)) if args.strategies is None else args.strategies
    try:
        with Progress(console=Console(stderr=True), transient=True) as progress:
            result = round_robin(args.game, names, args.episodes, args.seed, args.rounds, progress)
    except ValueError as exc:  # game parameters the game rejects (e.g. --rounds)
        raise UsageError(str(exc)) from exc
    # wide enough that no cell is cut (rich falls back to 80 columns when stdout is not a terminal)
    width = max(len(n) for n in names) + 4 + sum(max(len(n), 7) + 3 for n in names)
    Console(width=max(Console().width, width)).print(_table(result, names))
    if args.json is not None:
        write_json_atomic(Path(args.json), result)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
