"""What a game declares once, as data beside its rules: its registration (`GameSpec`).

OpenSpiel's model: a game registers once and states its facts as data, and analysis lives apart from rules.
Each game module in `envs/` ends with `SPEC = GameSpec(...)`; `envs.GAMES` names the registered modules. The
pipeline (`sepo`, `fmsp`) reads a game's default pools, its SFT demonstrator and rationale, its prompt styles and
its exact analysis from here, so nothing outside `envs/` names a game.

Kept light: no game module is imported until its spec is asked for (`envs.game_spec`), and strings name the
strategy and exact-analysis modules, which import the game module themselves.

A new game provides, all inside `envs/`:

1. `envs/<name>.py`: the rules (a `Game` subclass whose `name` is the registry name), its rationale function
   `(view, action) -> one line`, and at the end `SPEC = GameSpec(...)` (every field below; `exact` only where an
   exact analysis exists);
2. `envs/strategies/<name>.py`: `STRATEGIES`, strategy name -> class, naming every strategy its pools and its
   demonstrator use;
3. one line in `envs/__init__.py`'s `GAMES`: `"<name>": "envs.<name>"`.

`envs.game_spec(name)` checks the registration when it is first asked for (`GameSpec.__post_init__`, then
`check_strategies`): every error is one line that begins with the game's name.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envs.base import Game, View

# the pools a game declares, by role (the revised paper's "Opponent pools"; sepo.pools samples them)
POOL_ROLES: tuple[str, ...] = ("training", "exploit", "collusive")


@dataclass(frozen=True)
class Demonstration:
    """Who demonstrates a game for SFT: a mixture over its scripted strategies (name -> weight, summing to 1),
    the opponents they play, and the episodes played against each opponent."""

    mixture: Mapping[str, float]
    opponents: tuple[str, ...]
    episodes_per_opponent: int


@dataclass(frozen=True)
class GameSpec:
    """One game's registration.

    name: the game's registry name (as recipes and the CLI write it).
    game: the rules (a `Game` subclass).
    strategies: the module whose `STRATEGIES` maps a strategy's name to its class (`envs.strategies.<name>`).
    pools: the default opponent pools by role (`POOL_ROLES`), as scripted strategy names.
    demonstration: the SFT demonstrator.
    rationale: the one-line reasoning for an action at a view, written into SFT transcripts.
    prompt_styles: the prompt styles the game renders ("chat": the method's prompt; "compact": a small Markov
        state, where the scored policy is a table).
    exact: the module holding the game's exact analysis of a tabular policy (None: the game has none).
    title: the game's name in CamelCase, for identifiers other libraries register (TextArena's
        `SEPO-<title>-v0`); default the name's words capitalised (`first_price` -> `FirstPrice`).
    """

    name: str
    game: type[Game]
    strategies: str
    pools: Mapping[str, tuple[str, ...]]
    demonstration: Demonstration
    rationale: Callable[[View, str], str]
    prompt_styles: tuple[str, ...] = ("chat",)
    exact: str | None = None
    title: str = ""

    def __post_init__(self) -> None:
        if not self.title:
            object.__setattr__(self, "title", "".join(word.capitalize() for word in self.name.split("_")))
        if set(self.pools) != set(POOL_ROLES):
            raise ValueError(f"{self.name}: pools must name the roles {', '.join(POOL_ROLES)}, got {sorted(self.pools)}")
        total = sum(self.demonstration.mixture.values())
        if abs(total - 1.0) > 1e-9:
            raise ValueError(f"{self.name}: the demonstrator's mixture must sum to 1, got {total}")


def check_strategies(spec: GameSpec, strategies: Collection[str]) -> None:
    """Raise ValueError, one line naming the game, if `spec`'s pools or demonstrator name a strategy that is not
    among `strategies` (the names of its strategies module's `STRATEGIES`)."""
    named = [(f"the {role!r} pool", name) for role in POOL_ROLES for name in spec.pools[role]]
    named += [("the demonstrator's mixture", name) for name in spec.demonstration.mixture]
    named += [("the demonstrator's opponents", name) for name in spec.demonstration.opponents]
    for where, name in named:
        if name not in strategies:
            raise ValueError(f"{spec.name}: {where} names the unknown strategy {name!r}; {spec.strategies} has: "
                             f"{', '.join(sorted(strategies))}")
