"""Exact analysis of a tabular single-issue negotiation policy: the worst-case exploiter by backward induction.

The game (`envs.negotiation`): in each of T rounds both seats demand an integer from the game's legal range at
once; the demands are paid if they fit in the pie, else both get 0; both demands are revealed after the round.
There is no private information, so a policy is everything the opponent faces once it is written as a table of
distributions over demands at each joint history of demands. Keys are `"r|h"`: `r` the round about to be played
(1-based) and `h` the joint demands so far, one `"x,y"` per round joined by ".", `x` the policy's own demand and
`y` the opponent's, `"--"` before the first round. Values are {demand as its action string: probability} over
the legal demands. A *Markov* table keys a history by its last joint demand alone (`"3|4,6"` stands for every
history of two rounds that ended 4,6); a full table keys it by all of it (`"3|5,5.4,6"`). `policy_at` reads
either, the full key first. No demand is discretised here: the game's own integer grid is the action set.

The exploit figure is the method's exploitation e taken as a worst case, per round as e is (e averages the
per-round advantage ō − ā over the episode's rounds): e* = max over opponent strategies of E[Σ_t (o_t − a_t)] / T,
raw points (not scaled by s = 3 / pie). The opponent's best response is a function of the joint history, by the
backward induction of `envs.repeated_exact`, over 1 + K²(T − 1) states for a Markov table (K legal demands) or
every joint history for a full one. Ties go to the highest demand (the harder bargainer).

Hand-checked figures (defaults: pie 10, demands 1..9): a policy that always demands the minimum concedes the most
the rules allow, e* = 9 − 1 = 8 (the opponent demands 9, which fits); always 5 has e* = 0 (5 gives a tie, more
breaks down); always 9 has e* = 0 (only a demand of 1 fits, at −8).

Pure Python, no torch (like all of `envs`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envs.base import Strategy, View
from envs.negotiation import SingleIssueNegotiation
from envs.repeated_exact import BackwardInduction, joint_messages
from envs.tabular import MAX_STATES, DecisionState, Expectation, Params, Response

START = "--"
TOLERANCE = 1e-6  # how far a distribution's total may be from 1 (scored policies are normalised in float32)

Joint = tuple[int, int]  # (the policy's demand, the opponent's demand)
Table = Mapping[str, Mapping[str, float]]  # key "r|h" -> {demand: probability}


def demands(game: SingleIssueNegotiation) -> list[int]:
    """The legal demands, ascending."""
    return list(range(game.min_demand, game.max_demand + 1))


def history_key(history: Sequence[Joint]) -> str:
    """The full key of a joint history: `"1|--"`, `"2|4,6"`, `"3|5,5.4,6"`."""
    moves = ".".join(f"{x},{y}" for x, y in history) or START
    return f"{len(history) + 1}|{moves}"


def markov_key(history: Sequence[Joint]) -> str:
    """The Markov key of a joint history: the round and the last joint demand."""
    return f"{len(history) + 1}|{'{},{}'.format(*history[-1]) if history else START}"


def histories(game: SingleIssueNegotiation) -> Iterator[tuple[Joint, ...]]:
    """Every joint history at which the policy moves, round by round (1 + K² + ... + K^(2(T−1)) of them)."""
    joints = list(itertools.product(demands(game), repeat=2))
    for r in range(game.num_rounds):
        yield from itertools.product(joints, repeat=r)


def count_histories(game: SingleIssueNegotiation) -> int:
    """How many joint histories `histories` yields (the size of a full table), without listing them."""
    k2 = len(demands(game)) ** 2
    return sum(k2**r for r in range(game.num_rounds))


def markov_keys(game: SingleIssueNegotiation) -> list[str]:
    """The 1 + K²(T−1) keys of a Markov table, in round order."""
    joints = list(itertools.product(demands(game), repeat=2))
    return [f"1|{START}"] + [markov_key([(0, 0)] * (r - 2) + [j]) for r in range(2, game.num_rounds + 1) for j in joints]


def full_keys(game: SingleIssueNegotiation) -> list[str]:
    """The keys of a full table, in round order."""
    return [history_key(h) for h in histories(game)]


def is_markov(table: Table) -> bool:
    """Whether every key of `table` names at most the last joint demand."""
    return all("." not in key.split("|", 1)[1] for key in table)


def policy_at(table: Table, history: Sequence[Joint]) -> Mapping[str, float]:
    """The distribution of `table` at `history`: its full key if present, else its Markov key."""
    full = history_key(history)
    if full in table:
        return table[full]
    try:
        return table[markov_key(history)]
    except KeyError:
        raise KeyError(f"negotiation policy table has neither {full!r} nor {markov_key(history)!r}") from None


def validate_table(table: Table, game: SingleIssueNegotiation) -> dict[str, dict[str, float]]:
    """`table` as plain dicts of floats, after checking that every entry is a distribution over legal demands and
    that every joint history resolves (a Markov table: every Markov key; else every full history). A clear error
    names the first key that fails."""
    legal = {str(d) for d in demands(game)}
    out = {str(k): {str(a): float(p) for a, p in v.items()} for k, v in table.items()}
    for key, dist in out.items():
        bad = sorted(set(dist) - legal)
        if bad:
            raise ValueError(f"negotiation policy table: {key!r} has demands {bad} outside "
                             f"{game.min_demand}..{game.max_demand}")
        if any(not 0.0 <= p <= 1.0 for p in dist.values()) or abs(sum(dist.values()) - 1.0) > TOLERANCE:
            raise ValueError(f"negotiation policy table: {key!r} is not a distribution: {dist}")
    needed = markov_keys(game) if is_markov(out) else None
    if needed is not None:
        missing = [k for k in needed if k not in out]
        if missing:
            raise KeyError(f"negotiation policy table has no {missing[0]!r}")
    else:
        for h in histories(game):
            policy_at(out, h)
    return out


@dataclass(frozen=True)
class BestResponse:
    """The opponent's best response to a policy: its demand at each key (the table's kind: Markov keys for a
    Markov table, else full keys; the policy's demand first, as everywhere here) and e*, its mean per-round
    advantage."""

    moves: dict[str, int]
    value: float


def best_response(table: Table, game: SingleIssueNegotiation) -> BestResponse:
    """The opponent's exact advantage-maximising best response to `table` (module docstring)."""
    table = validate_table(table, game)
    markov = is_markov(table)

    def policy(history: Sequence[Joint]) -> dict[int, float]:
        return {int(a): p for a, p in policy_at(table, history).items()}

    def gain(x: int, y: int) -> float:
        own, opp = game.payoffs(x, y)
        return opp - own

    solver = BackwardInduction(policy, game.num_rounds, demands(game)[::-1], gain, markov_key if markov else tuple)
    if markov:  # one history per Markov key: the reply depends on the key alone
        ids = [()] + [((x, y),) * (r - 1) for r in range(2, game.num_rounds + 1)
                      for x, y in itertools.product(demands(game), repeat=2)]
        moves = {markov_key(h): solver.reply(h) for h in ids}
    else:
        moves = {history_key(h): solver.reply(h) for h in histories(game)}
    return BestResponse(moves=moves, value=solver.value() / game.num_rounds)


def exploitability(table: Table, game: SingleIssueNegotiation) -> float:
    """e* of `table`: the best opponent's mean per-round advantage over the policy (module docstring)."""
    return best_response(table, game).value


class PlaysBestResponse(Strategy):
    """An opponent that plays a best response's demands (`BestResponse.moves`, keyed from the policy's side: the
    full key first, else the Markov key)."""

    name = "negotiation_best_response"
    description = "The exact best response to a tabular policy (envs.negotiation_exact)."

    def __init__(self, moves: Mapping[str, int]) -> None:
        self.moves = {k: int(v) for k, v in moves.items()}

    def act(self, view: View) -> str:
        history = [(int(h["opp_demand"]), int(h["my_demand"])) for h in view.history]
        full = history_key(history)
        return str(self.moves[full] if full in self.moves else self.moves[markov_key(history)])


# --- the tabular protocol (`envs.tabular`) ---------------------------------------------------------------

MAX_HISTORIES = MAX_STATES  # the IPD exact phase's budget at its bound: what one refresh may score


def game_of(game_params: Params) -> SingleIssueNegotiation:
    """The single-issue negotiation game of `game_params`."""
    from envs import make_game

    return make_game("negotiation", **dict(game_params or {}))  # type: ignore[return-value]


def check_size(game: SingleIssueNegotiation) -> None:
    """Refuse a game whose full table exceeds `MAX_HISTORIES` joint histories, naming the count and the bound."""
    n = count_histories(game)
    if n > MAX_HISTORIES:
        raise ValueError(f"negotiation's exact policy scores every joint history of demands: {n} at "
                         f"{game.num_rounds} rounds and demands {game.min_demand}..{game.max_demand}, more than "
                         f"{MAX_HISTORIES}; use fewer rounds or a narrower demand range")


class NegotiationAnalysis:
    """Single-issue negotiation's exact analysis as `envs.tabular.TabularGame`: every joint history of demands
    (a full table of distributions over the legal demands) and the opponent's advantage-maximising best
    response (e*). No exact episodes against scripted opponents or demonstrator yet: the game has no organism."""

    exploit_key = "e_star"
    eval_form = "answer"
    state_noun = "joint histories"
    reference_note = ("always demanding the minimum: the maximum minus the minimum demand, 8 by default; always "
                      "demanding half the pie 0")

    def states(self, params: Params, seat: int = 0) -> list[DecisionState]:
        game = game_of(params)
        check_size(game)
        legal = tuple(str(d) for d in demands(game))
        return [DecisionState(history_key(h), joint_messages(game, [(str(x), str(y)) for x, y in h], seat), legal)
                for h in histories(game)]

    def table(self, rows: Mapping[str, Sequence[float]], params: Params) -> dict[str, Any]:
        legal = [str(d) for d in demands(game_of(params))]
        return {key: dict(zip(legal, row)) for key, row in rows.items()}

    def row(self, table: Mapping[str, Any], key: str) -> dict[str, float]:
        return dict(table[key])

    def validate(self, table: Mapping[str, Any], params: Params) -> dict[str, Any]:
        return validate_table(table, game_of(params))

    def best_response(self, table: Mapping[str, Any], params: Params) -> Response:
        response = best_response(table, game_of(params))
        return Response(moves=dict(response.moves), value=response.value)

    def exploitability(self, table: Mapping[str, Any], params: Params) -> float:
        return exploitability(table, game_of(params))

    def extra_figures(self, table: Mapping[str, Any], params: Params) -> dict[str, float]:
        return {}

    def strategy(self, moves: Mapping[str, Any]) -> Strategy:
        return PlaysBestResponse(moves)

    def check_size(self, params: Params) -> None:
        check_size(game_of(params))

    def applies(self, params: Params) -> bool:
        game = game_of(params)
        return game.prompt_style == "compact" and count_histories(game) <= MAX_HISTORIES

    def prompt_note(self, params: Params) -> str | None:
        return None

    def expectations(self, table: Mapping[str, Any], name: str, opponent: Callable[[], Strategy],
                     params: Params) -> list[Expectation]:
        raise NotImplementedError("negotiation has no exact episodes against scripted opponents yet")

    def demonstrator(self, weights: Mapping[str, float], params: Params) -> dict[str, Any]:
        raise NotImplementedError("negotiation has no tabular demonstrator yet")


ANALYSIS = NegotiationAnalysis()
