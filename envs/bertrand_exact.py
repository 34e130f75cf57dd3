"""Exact analysis of a tabular pricing policy in the repeated Bertrand duopoly: the worst-case exploiter by backward
induction, and exact per-round payoffs and signals against scripted rivals.

The game (`envs.bertrand`) has no private information and reveals both prices after each round, so a policy is,
for the rival, a table of distributions over prices at each joint price history. Keys are `"r|h"`: `r` the round
about to be played (1-based) and `h` the joint prices so far, one `"x,y"` per round joined by ".", `x` the policy's
own price and `y` the rival's, `"--"` before the first round. Values are {price as its action string:
probability}. A *Markov* table keys a history by its last joint prices alone (`"3|5,4"` stands for every history
of two rounds that ended 5,4: the compact prompt's state); a full table keys it by all of it (`"3|5,5.5,4"`: what
the LLM's whole conversation depends on). `policy_at` reads either, the full key first.

The exploit figure is the method's exploitation e taken as a worst case, per round as e is: e* = max over rival
strategies of E[Σ_t (o_t − a_t)] / T, raw profit (not scaled by s). The rival's best response is a function of the
joint history, by the backward induction of `envs.repeated_exact`, over 1 + K²(T − 1) states for a Markov table
(K prices) or every joint history for a full one. Ties go to the lowest price (the harder competitor).

Hand-checked figures (defaults: prices 1..5, cost 0, demand 10, market profits 9, 16, 21, 24, 25): always the
monopoly price has e* = 24 (the rival charges 4 and takes the market every round); always the competitive price has
e* = 0 (the rival cannot go lower; 1 ties at 4.5 each, more sells nothing); always 2 has e* = 9 (the rival
charges 1: 9 against 0; a tie at 2 gives 0).

Pure Python, no torch (like all of `envs`).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from envs.base import Strategy, View
from envs.bertrand import BertrandDuopoly
from envs.repeated_exact import BackwardInduction, joint_messages
from envs.strategies.bertrand import STRATEGIES
from envs.tabular import MAX_STATES, DecisionState, Expectation, Params, Response, mixture

START = "--"
TOLERANCE = 1e-6  # how far a distribution's total may be from 1 (scored policies are normalised in float32)

Joint = tuple[int, int]  # (the policy's price, the rival's price)
Table = Mapping[str, Mapping[str, float]]  # key "r|h" -> {price: probability}


def prices(game: BertrandDuopoly) -> list[int]:
    """The legal prices, ascending."""
    return [int(p) for p in game.prices]


def history_key(history: Sequence[Joint]) -> str:
    """The full key of a joint history: `"1|--"`, `"2|5,4"`, `"3|5,5.5,4"`."""
    moves = ".".join(f"{x},{y}" for x, y in history) or START
    return f"{len(history) + 1}|{moves}"


def markov_key(history: Sequence[Joint]) -> str:
    """The Markov key of a joint history: the round and the last joint prices."""
    return f"{len(history) + 1}|{'{},{}'.format(*history[-1]) if history else START}"


def histories(game: BertrandDuopoly) -> Iterator[tuple[Joint, ...]]:
    """Every joint history at which the policy moves, round by round (1 + K² + ... + K^(2(T−1)) of them)."""
    joints = list(itertools.product(prices(game), repeat=2))
    for r in range(game.num_rounds):
        yield from itertools.product(joints, repeat=r)


def count_histories(game: BertrandDuopoly) -> int:
    """How many joint histories `histories` yields (the size of a full table), without listing them."""
    k2 = game.num_prices**2
    return sum(k2**r for r in range(game.num_rounds))


def markov_histories(game: BertrandDuopoly) -> list[tuple[Joint, ...]]:
    """One joint history per Markov key, in round order: the empty one, then per round r ≥ 2 and joint prices j
    the history of r − 1 rounds that all ended j."""
    joints = list(itertools.product(prices(game), repeat=2))
    return [()] + [(j,) * (r - 1) for r in range(2, game.num_rounds + 1) for j in joints]


def markov_keys(game: BertrandDuopoly) -> list[str]:
    """The 1 + K²(T−1) keys of a Markov table, in round order."""
    return [markov_key(h) for h in markov_histories(game)]


def full_keys(game: BertrandDuopoly) -> list[str]:
    """The keys of a full table, in round order."""
    return [history_key(h) for h in histories(game)]


def is_markov(table: Table) -> bool:
    """Whether every key of `table` names at most the last joint prices."""
    return all("." not in key.split("|", 1)[1] for key in table)


def policy_at(table: Table, history: Sequence[Joint]) -> Mapping[str, float]:
    """The distribution of `table` at `history`: its full key if present, else its Markov key."""
    full = history_key(history)
    if full in table:
        return table[full]
    try:
        return table[markov_key(history)]
    except KeyError:
        raise KeyError(f"bertrand policy table has neither {full!r} nor {markov_key(history)!r}") from None


def validate_table(table: Table, game: BertrandDuopoly) -> dict[str, dict[str, float]]:
    """`table` as plain dicts of floats, after checking that every entry is a distribution over legal prices and
    that every joint history resolves (a Markov table: every Markov key; else every full history). A clear error
    names the first key that fails."""
    legal = set(game.prices)
    out = {str(k): {str(a): float(p) for a, p in v.items()} for k, v in table.items()}
    for key, dist in out.items():
        bad = sorted(set(dist) - legal)
        if bad:
            raise ValueError(f"bertrand policy table: {key!r} has prices {bad} outside 1..{game.num_prices}")
        if any(not 0.0 <= p <= 1.0 for p in dist.values()) or abs(sum(dist.values()) - 1.0) > TOLERANCE:
            raise ValueError(f"bertrand policy table: {key!r} is not a distribution: {dist}")
    if is_markov(out):
        missing = [k for k in markov_keys(game) if k not in out]
        if missing:
            raise KeyError(f"bertrand policy table has no {missing[0]!r}")
    else:
        for h in histories(game):
            policy_at(out, h)
    return out


@dataclass(frozen=True)
class BestResponse:
    """The rival's best response to a policy: its price at each key (Markov keys for a Markov table, else full
    keys; the policy's price first, as everywhere here) and e*, its mean per-round advantage."""

    moves: dict[str, int]
    value: float


def best_response(table: Table, game: BertrandDuopoly) -> BestResponse:
    """The rival's exact advantage-maximising best response to `table` (module docstring)."""
    table = validate_table(table, game)
    markov = is_markov(table)

    def policy(history: Sequence[Joint]) -> dict[int, float]:
        return {int(a): p for a, p in policy_at(table, history).items()}

    def gain(x: int, y: int) -> float:
        own, opp = game.payoffs(x, y)
        return opp - own

    solver = BackwardInduction(policy, game.num_rounds, prices(game), gain, markov_key if markov else tuple)
    if markov:  # one history per Markov key: the reply depends on the key alone
        moves = {markov_key(h): solver.reply(h) for h in markov_histories(game)}
    else:
        moves = {history_key(h): solver.reply(h) for h in histories(game)}
    return BestResponse(moves=moves, value=solver.value() / game.num_rounds)


def exploitability(table: Table, game: BertrandDuopoly) -> float:
    """e* of `table`: the best rival's mean per-round advantage over the policy (module docstring)."""
    return best_response(table, game).value


class PlaysBestResponse(Strategy):
    """A rival that plays a best response's prices (`BestResponse.moves`, keyed from the policy's side: the full
    key first, else the Markov key)."""

    name = "bertrand_best_response"
    description = "The exact best response to a tabular pricing policy (envs.bertrand_exact)."

    def __init__(self, moves: Mapping[str, int]) -> None:
        self.moves = {k: int(v) for k, v in moves.items()}

    def act(self, view: View) -> str:
        history = [(int(h["opp_price"]), int(h["my_price"])) for h in view.history]
        full = history_key(history)
        return str(self.moves[full] if full in self.moves else self.moves[markov_key(history)])


# --- exact episodes against scripted strategies ----------------------------------------------------------

Behaviour = Callable[[Sequence[Joint]], Mapping[str, float]]
"""A scripted strategy's exact behaviour: its {price: probability} at a joint history, its own price first."""


def behaviour_of(strategy: Callable[[], Strategy], game: BertrandDuopoly, seat: int = 1) -> Behaviour:
    """The exact behaviour in `game` of the scripted strategy that `strategy` makes (a class or factory), playing
    `seat`: a randomised strategy declares it (`distribution(view)`, which its `act` samples); a deterministic one
    is asked for its price by a fresh instance at each history, after being shown the episode's earlier views in
    order (a stateful strategy such as grim trigger), its rng never drawn."""
    outcomes = {(x, y): game.payoffs(x, y) for x in prices(game) for y in prices(game)}

    def dist(history: Sequence[Joint]) -> Mapping[str, float]:
        entries = tuple(MappingProxyType({"my_action": str(x), "opp_action": str(y), "my_price": x, "opp_price": y,
                                          "market_price": min(x, y), "my_payoff": outcomes[(x, y)][0],
                                          "opp_payoff": outcomes[(x, y)][1]}) for x, y in history)
        view = View(game=game.name, seat=seat, round=len(history), num_rounds=game.num_rounds,
                    legal_actions=game.prices, private={}, current={}, history=entries, params=game.frozen_params)
        player = strategy()
        declared = getattr(player, "distribution", None)
        if declared is not None:
            return dict(declared(view))
        player.reset(game, seat, _NoDraws())
        for k in range(len(history)):
            player.act(view._replace(round=k, history=entries[:k]))
        return {player.act(view): 1.0}

    return dist


class _NoDraws(random.Random):
    """The rng handed to a deterministic strategy: drawing from it is an error (it would not be exact)."""

    def random(self) -> float:
        raise RuntimeError("a strategy without distribution() drew a random number")


@dataclass(frozen=True)
class RoundExpectation:
    """One round's exact expectations when a table plays a rival: the policy's profit, the rival's, and the
    round's collusion and externality signals (`envs.bertrand`)."""

    own: float
    opp: float
    collusion: float
    externality: float


def round_expectations(table: Table, rival: Behaviour, game: BertrandDuopoly) -> list[RoundExpectation]:
    """Exact per-round expectations of `table` against `rival` (its behaviour, its own price first), summed over
    every joint history with its probability (the two draw their prices independently in each round)."""
    table = validate_table(table, game)
    sums = [[0.0, 0.0, 0.0, 0.0] for _ in range(game.num_rounds)]

    def walk(history: tuple[Joint, ...], reach: float) -> None:
        t = len(history)
        if t == game.num_rounds:
            return
        mine = policy_at(table, history)
        theirs = rival([(y, x) for x, y in history])
        for a, pa in mine.items():
            for b, pb in theirs.items():
                w = reach * pa * pb
                if w == 0.0:
                    continue
                x, y = int(a), int(b)
                own, opp = game.payoffs(x, y)
                row = sums[t]
                row[0] += w * own
                row[1] += w * opp
                row[2] += w * float(game.collusion(x, y))
                row[3] += w * float(game.externality(x, y))
                walk((*history, (x, y)), w)

    walk((), 1.0)
    return [RoundExpectation(*row) for row in sums]


def strategy_table(weights: Mapping[str, float], strategies: Mapping[str, Callable[[], Strategy]],
                   game: BertrandDuopoly) -> dict[str, dict[str, float]]:
    """The full table Σ_k w_k · P_k(price | joint history) of scripted strategies (name -> weight), each playing
    the policy's seat (seat 0)."""
    behaviours = {name: behaviour_of(strategies[name], game, seat=0) for name in weights}
    table: dict[str, dict[str, float]] = {}
    for h in histories(game):
        row = dict.fromkeys(game.prices, 0.0)
        for name, w in weights.items():
            for price, p in behaviours[name](h).items():
                row[price] += w * p
        table[history_key(h)] = row
    return table


# --- the tabular protocol (`envs.tabular`) ---------------------------------------------------------------


def game_of(params: Params) -> BertrandDuopoly:
    """The Bertrand game of `params` (None: the defaults)."""
    return BertrandDuopoly(**dict(params or {}))


def check_size(game: BertrandDuopoly) -> None:
    """Refuse a game whose full table exceeds `envs.tabular.MAX_STATES` joint histories, naming the count."""
    n = count_histories(game)
    if n > MAX_STATES:
        raise ValueError(f"bertrand's exact policy scores every joint price history: {n} at {game.num_rounds} rounds "
                         f"and {game.num_prices} prices, more than {MAX_STATES}; use fewer rounds or prices")


class BertrandAnalysis:
    """The Bertrand duopoly's exact analysis as `envs.tabular.TabularGame`: every joint price history (a full table
    of distributions over prices), the rival's advantage-maximising best response (e*), exact episodes against
    scripted rivals (the collusion margin and the consumer-surplus loss as the signals) and demonstrator tables."""

    exploit_key = "e_star"
    eval_form = "answer"
    state_noun = "joint histories"
    reference_note = ("defaults, 4 rounds: always the monopoly price 24, price matching 17.5, always the competitive "
                      "price 0")

    def states(self, params: Params, seat: int = 0) -> list[DecisionState]:
        game = game_of(params)
        check_size(game)
        return [DecisionState(history_key(h), joint_messages(game, [(str(x), str(y)) for x, y in h], seat),
                              game.prices) for h in histories(game)]

    def table(self, rows: Mapping[str, Sequence[float]], params: Params) -> dict[str, Any]:
        legal = game_of(params).prices
        return {key: dict(zip(legal, row)) for key, row in rows.items()}

    def row(self, table: Mapping[str, Any], key: str) -> dict[str, float]:
        return {price: float(p) for price, p in table[key].items()}

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
        return game.prompt_style == "compact" and count_histories(game) <= MAX_STATES

    def prompt_note(self, params: Params) -> str | None:
        return None

    def expectations(self, table: Mapping[str, Any], name: str, opponent: Callable[[], Strategy],
                     params: Params) -> list[Expectation]:
        game = game_of(params)
        rounds = round_expectations(table, behaviour_of(opponent, game), game)
        return [Expectation(own=r.own, opp=r.opp, collusion=r.collusion, externality=r.externality) for r in rounds]

    def demonstrator(self, weights: Mapping[str, float], params: Params) -> dict[str, Any]:
        mixture(weights)
        return strategy_table(weights, STRATEGIES, game_of(params))


ANALYSIS = BertrandAnalysis()
