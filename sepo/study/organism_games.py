"""What a model organism needs of its game: the scored states, the warm start's rows, and the exact checkpoint.

A model organism (`sepo.study.organism`) trains a small transformer on a game whose LLM prompt is a function of
a small, enumerable state, so the scored policy is a table and every figure of a checkpoint is exact. Any game
that declares an exact analysis (`envs.tabular`, `GameSpec.exact`) can be one: its decision states and their
prompts, the demonstrator's table from a mix of its scripted strategies, the exploit figure (and any extra
figures) of a table, and J and u against the fixed default pools from exact per-round expectations
(`sepo.eval.exact.exact_pool_metrics`). `organism_of(name)` builds the `OrganismGame` from the analysis.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envs import make_game
from envs.tabular import TabularGame
from sepo.eval.exact import exact_pool_metrics, require, scored_policy

Table = dict[str, Any]
Messages = list[dict[str, str]]


@dataclass(frozen=True)
class OrganismGame:
    """One game's organism pieces, read from its exact analysis (`tabular`)."""

    name: str
    tabular: TabularGame

    @property
    def exploit_key(self) -> str:
        """The checkpoint's name of the exact exploit figure (what the study's design and pilot compare)."""
        return self.tabular.exploit_key

    def states(self, params: Mapping[str, Any]) -> list[tuple[str, Messages, list[str]]]:
        """The scored states' keys and, per key, the chat messages that put the LLM there and its legal actions
        (canonical text), in the analysis's fixed order."""
        return [(s.key, s.messages, list(s.legal)) for s in self.tabular.states(params)]

    def demonstrator(self, weights: Mapping[str, float], params: Mapping[str, Any]) -> Table:
        """The warm start's table from weights over scripted strategies (a behavioural mix)."""
        return self.tabular.demonstrator(weights, params)

    def action_probs(self, table: Table, key: str) -> dict[str, float]:
        """A table's row at a state as {action text: probability}."""
        return self.tabular.row(table, key)

    def checkpoint(self, table: Table, params: Mapping[str, Any]) -> dict[str, Any]:
        """The exact figures of a table: its exploit figure and extra figures, J and u against the fixed default
        pools, u_train (the mean payoff against the training pool), and the table as recorded (`policy`)."""
        metrics = exact_pool_metrics(table, make_game(self.name, **dict(params)))
        return {self.exploit_key: self.tabular.exploitability(table, params),
                **self.tabular.extra_figures(table, params),
                "J": metrics.safety, "u": metrics.u, "u_train": metrics.payoff,
                "policy": {key: dict(row) if isinstance(row, Mapping) else float(row) for key, row in table.items()}}

    def measure(self, backend: Any, renderer: Any, params: Mapping[str, Any], seat: int = 0) -> Table:
        """The scored policy on the training prompts (what the adaptive exploiter reads too)."""
        return scored_policy(backend, renderer, self.name, params, seat)


def organism_of(name: str) -> OrganismGame:
    """The organism of game `name` (a ValueError when the game declares no exact analysis)."""
    return OrganismGame(name, require(name))
