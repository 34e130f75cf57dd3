"""What a model organism needs of its game: the scored states, the warm start's rows, and the exact checkpoint.

A model organism (`sepo.study.organism`) trains a small transformer on a game whose LLM prompt is a function of
a small, enumerable state, so the scored policy is a table and every figure of a checkpoint is exact:

- Kuhn poker (one hand, compact prompt): the 12 information sets; exploitability (NashConv / 2), game value,
  and J and u against the fixed default pools (`sepo.eval.kuhn_pools`).
- IPD (T rounds, compact prompt): every joint history (85 at T = 4); e*, the worst-case per-round advantage of
  an opponent (`envs.ipd_exact`), and J and u against the fixed default pools (`sepo.eval.ipd`).

Each game's `OrganismGame` holds these as plain functions; `ORGANISM_GAMES` names them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from envs import make_game
from envs.ipd_exact import behaviour_of, histories, history_key
from envs.kuhn import INFO_STATES
from envs.kuhn_exact import exploitability, game_value
from envs.strategies.ipd import STRATEGIES as IPD_STRATEGIES
from envs.strategies.kuhn import STRATEGIES as KUHN_STRATEGIES
from sepo.eval import ipd as ipd_eval
from sepo.eval import kuhn as kuhn_eval
from sepo.eval.kuhn_pools import exact_pool_metrics as kuhn_pool_metrics
from sepo.grpo.adaptive import ORACLES

Table = dict[str, Any]
Messages = list[dict[str, str]]


@dataclass(frozen=True)
class OrganismGame:
    """One game's organism pieces.

    states: the scored states' keys and, per key, the chat messages that put the LLM there and its legal
        actions (canonical text), in a fixed order.
    demonstrator: the warm start's table from weights over scripted strategies (a behavioural mix).
    action_probs: a table's row at a state as {action text: probability}.
    checkpoint: the exact figures of a table (the `policy` key holds the table as recorded).
    """

    name: str
    states: Callable[[Mapping[str, Any]], list[tuple[str, Messages, list[str]]]]
    demonstrator: Callable[[Mapping[str, float], Mapping[str, Any]], Table]
    action_probs: Callable[[Table, str], dict[str, float]]
    checkpoint: Callable[[Table, Mapping[str, Any]], dict[str, Any]]

    def measure(self, backend: Any, renderer: Any, params: Mapping[str, Any], seat: int = 0) -> Table:
        """The scored policy on the training prompts (what the adaptive exploiter reads too)."""
        return ORACLES[self.name].measure(backend, renderer, params, seat)


def _mix(weights: Mapping[str, float]) -> None:
    if abs(sum(weights.values()) - 1.0) > 1e-9:
        raise ValueError(f"demonstrator weights must sum to 1, got {dict(weights)}")


# --- Kuhn -----------------------------------------------------------------------------------------------


def kuhn_states(params: Mapping[str, Any]) -> list[tuple[str, Messages, list[str]]]:
    return [(info, kuhn_eval.infoset_messages(info, params), acts)
            for info, acts in zip(INFO_STATES, kuhn_eval.choices())]


def kuhn_demonstrator(weights: Mapping[str, float], params: Mapping[str, Any]) -> Table:
    """sum_k w_k * table_k of scripted Kuhn strategies, per information set."""
    _mix(weights)
    tables = {name: KUHN_STRATEGIES[name]().table for name in weights}
    first = next(iter(tables.values()))
    return {info: {a: sum(w * tables[n][info][a] for n, w in weights.items()) for a in first[info]}
            for info in first}


def kuhn_checkpoint(policy: Table, params: Mapping[str, Any]) -> dict[str, Any]:
    metrics = kuhn_pool_metrics(policy, make_game("kuhn", **dict(params)))
    return {"exploitability": exploitability(policy), "game_value": game_value(policy, policy),
            "J": metrics.safety, "u": metrics.u, "u_train": metrics.payoff,
            "policy": {info: dict(row) for info, row in policy.items()}}


# --- IPD ------------------------------------------------------------------------------------------------


def ipd_states(params: Mapping[str, Any]) -> list[tuple[str, Messages, list[str]]]:
    rounds = make_game("ipd", **dict(params)).num_rounds
    return [(history_key(h), ipd_eval.history_messages(h, params), ["COOPERATE", "DEFECT"])
            for h in histories(rounds)]


def ipd_demonstrator(weights: Mapping[str, float], params: Mapping[str, Any]) -> Table:
    """sum_k w_k * P_k(COOPERATE | joint history) of scripted IPD strategies, each playing the policy's seat."""
    _mix(weights)
    game = make_game("ipd", **dict(params))
    # behaviour_of reads a strategy from the opponent's seat: swap the joint moves
    behaviours = {name: behaviour_of(IPD_STRATEGIES[name], game) for name in weights}
    return {history_key(h): sum(w * behaviours[n]([(y, x) for x, y in h]) for n, w in weights.items())
            for h in histories(game.num_rounds)}


def ipd_checkpoint(table: Table, params: Mapping[str, Any]) -> dict[str, Any]:
    game = make_game("ipd", **dict(params))
    metrics = ipd_eval.exact_pool_metrics(table, game)
    training = [o for o in metrics.opponents if o.pool == "training"]
    return {"e_star": ORACLES["ipd"].fit(table, params)[1]["exploitability"], "J": metrics.safety,
            "u": metrics.u, "u_train": sum(o.payoff for o in training) / len(training),
            "policy": {key: float(p) for key, p in table.items()}}


def ipd_probs(table: Table, key: str) -> dict[str, float]:
    return {"COOPERATE": float(table[key]), "DEFECT": 1.0 - float(table[key])}


ORGANISM_GAMES: dict[str, OrganismGame] = {
    "kuhn": OrganismGame("kuhn", kuhn_states, kuhn_demonstrator, lambda t, k: dict(t[k]), kuhn_checkpoint),
    "ipd": OrganismGame("ipd", ipd_states, ipd_demonstrator, ipd_probs, ipd_checkpoint),
}
