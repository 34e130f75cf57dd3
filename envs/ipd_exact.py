"""Exact analysis of a tabular IPD policy: the worst-case exploiter by backward induction, and exact payoffs.

A tabular policy gives P(COOPERATE) at each joint history of the finished rounds, keyed `"r|h"`: `r` the
round about to be played (1-based) and `h` the joint moves so far, one `"xy"` per round joined by ".", `x` the
policy's own move and `y` the opponent's (C or D), `"--"` before the first round. A *Markov* table keys a
history by its last joint move alone (`"3|CD"` stands for every history of two rounds that ended CD); a full
table keys it by all of it (`"3|CC.CD"`). `policy_at` reads either, the full key first.

The exploit figure is the method's exploitation e taken as a worst case: e* = max over opponent strategies of
E[Σ_t (o_t − a_t)] / T, the opponent's mean per-round advantage over the policy. The opponent sees every
earlier joint move (the game reveals both actions after each round) but not the policy's coin at the current
round, so its best response is a function of the joint history, found by backward induction:

    V(h) = max_b Σ_a P(a | h) · [o(a, b) − a(a, b) + V(h · ab)],   V(h) = 0 after the last round,

over the 4^(T−1) + ... + 1 histories (or the 1 + 4(T−1) Markov states when the policy is Markov, where V
depends on the round and the last joint move alone). The same recursion with the opponent's payoff instead
of the advantage gives the payoff-maximising best response (`best_response(..., objective="payoff")`).

Examples (T = 4, payoffs R, S, T, P = 3, 0, 5, 1): always-cooperate e* = 5, tit-for-tat e* = 5/4 (defect
once in round 1, then match), always-defect e* = 0.

Pure Python, no torch (like all of `envs`).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType as MappingProxy
from typing import Any

from envs import make_game
from envs.base import Strategy, View
from envs.ipd import ACTIONS, COOPERATE, DEFECT, IteratedPrisonersDilemma
from envs.repeated_exact import BackwardInduction, joint_messages
from envs.strategies.ipd import STRATEGIES
from envs.tabular import DecisionState, Expectation, Params, Response, mixture

MOVES = ("C", "D")
LETTER = {COOPERATE: "C", DEFECT: "D"}
ACTION = {"C": COOPERATE, "D": DEFECT}
START = "--"
OBJECTIVES = ("advantage", "payoff")
MAX_ROUNDS = 6  # 1 + 4 + ... + 4^5 = 1,365 scored prompts (`envs.tabular.MAX_STATES`): the most rounds scored

Joint = tuple[str, str]  # (the policy's move, the opponent's move), as letters
Table = Mapping[str, float]  # key "r|h" -> P(COOPERATE)


def history_key(history: Sequence[Joint]) -> str:
    """The full key of a joint history: `"1|--"`, `"2|CD"`, `"3|CC.DD"`."""
    moves = ".".join(x + y for x, y in history) or START
    return f"{len(history) + 1}|{moves}"


def markov_key(history: Sequence[Joint]) -> str:
    """The Markov key of a joint history: the round and the last joint move."""
    return f"{len(history) + 1}|{''.join(history[-1]) if history else START}"


def histories(rounds: int) -> Iterator[tuple[Joint, ...]]:
    """Every joint history at which the policy moves, round by round (1 + 4 + ... + 4^(T-1) of them)."""
    for r in range(rounds):
        yield from itertools.product(itertools.product(MOVES, MOVES), repeat=r)


def markov_keys(rounds: int) -> list[str]:
    """The 1 + 4(T−1) keys of a Markov table, in round order."""
    return [f"1|{START}"] + [f"{r}|{x}{y}" for r in range(2, rounds + 1) for x in MOVES for y in MOVES]


def full_keys(rounds: int) -> list[str]:
    """The keys of a full table, in round order."""
    return [history_key(h) for h in histories(rounds)]


def policy_at(table: Table, history: Sequence[Joint]) -> float:
    """P(COOPERATE) of `table` at `history`: its full key if present, else its Markov key."""
    full = history_key(history)
    if full in table:
        return float(table[full])
    try:
        return float(table[markov_key(history)])
    except KeyError:
        raise KeyError(f"ipd policy table has neither {full!r} nor {markov_key(history)!r}") from None


def is_markov(table: Table) -> bool:
    """Whether every key of `table` names at most the last joint move."""
    return all(len(key.split("|", 1)[1]) == 2 for key in table)


def validate_table(table: Table, rounds: int) -> dict[str, float]:
    """`table` as a dict of floats, after checking that every history of `rounds` rounds resolves to a
    probability in [0, 1] (a clear error names the first that does not)."""
    out = {str(k): float(v) for k, v in table.items()}
    for h in histories(rounds):
        p = policy_at(out, h)
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"ipd policy table: P(COOPERATE) at {history_key(h)!r} is {p}, not in [0, 1]")
    return out


@dataclass(frozen=True)
class Payoffs:
    """The stage game's payoffs (the policy's view): R both cooperate, S the lone cooperator's, T the lone
    defector's, P both defect."""

    R: float = 3.0
    S: float = 0.0
    T: float = 5.0
    P: float = 1.0

    @classmethod
    def of(cls, game: IteratedPrisonersDilemma) -> Payoffs:
        return cls(R=game.R, S=game.S, T=game.T, P=game.P)

    def pair(self, x: str, y: str) -> tuple[float, float]:
        """(policy's payoff, opponent's payoff) when the policy plays letter x and the opponent y."""
        return {("C", "C"): (self.R, self.R), ("C", "D"): (self.S, self.T),
                ("D", "C"): (self.T, self.S), ("D", "D"): (self.P, self.P)}[(x, y)]


@dataclass(frozen=True)
class BestResponse:
    """The opponent's best response to a policy: its move at each joint history (full keys, the policy's
    moves first as everywhere here), the value per round under the objective, and the objective."""

    moves: dict[str, str]  # full key -> "C" or "D"
    value: float  # the objective per round (e* for "advantage")
    objective: str


def best_response(table: Table, rounds: int, payoffs: Payoffs = Payoffs(),
                  objective: str = "advantage") -> BestResponse:
    """The opponent's exact best response to `table` by backward induction (module docstring). Ties go to
    DEFECT (the exploiter's move). Over the Markov states when the table is Markov, else over histories
    (`envs.repeated_exact`)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    table = validate_table(table, rounds)

    def gain(x: str, y: str) -> float:
        own, opp = payoffs.pair(x, y)
        return opp - own if objective == "advantage" else opp

    def policy(history: Sequence[Joint]) -> dict[str, float]:
        p = policy_at(table, history)
        return {"C": p, "D": 1.0 - p}

    solver = BackwardInduction(policy, rounds, ("D", "C"), gain, markov_key if is_markov(table) else tuple)
    moves = {history_key(h): solver.reply(h) for h in histories(rounds)}
    return BestResponse(moves=moves, value=solver.value() / rounds, objective=objective)


def exploitability(table: Table, rounds: int, payoffs: Payoffs = Payoffs()) -> float:
    """e* of `table`: the best opponent's mean per-round advantage over the policy (module docstring)."""
    return best_response(table, rounds, payoffs).value


Behaviour = Callable[[Sequence[Joint]], float]
"""An opponent's exact behaviour: P(opponent COOPERATEs | joint history, the policy's moves first)."""


@dataclass(frozen=True)
class RoundExpectation:
    """One round's expectations when a table plays an opponent: the policy's and the opponent's payoff, the
    probability that the policy defects, and the round's externality (welfare shortfall from mutual
    cooperation, as `envs.ipd` defines it)."""

    own: float
    opp: float
    defect: float
    externality: float


def round_expectations(table: Table, opponent: Behaviour, rounds: int,
                       payoffs: Payoffs = Payoffs()) -> list[RoundExpectation]:
    """Exact per-round expectations of `table` against `opponent`, summed over every joint history with its
    probability (the two draw their moves independently in each round)."""
    table = validate_table(table, rounds)
    sums = [[0.0, 0.0, 0.0, 0.0] for _ in range(rounds)]

    def walk(history: tuple[Joint, ...], reach: float) -> None:
        t = len(history)
        if t == rounds or reach == 0.0:
            return
        p, q = policy_at(table, history), opponent(history)
        for x, px in (("C", p), ("D", 1.0 - p)):
            for y, py in (("C", q), ("D", 1.0 - q)):
                w = reach * px * py
                if w == 0.0:
                    continue
                a, o = payoffs.pair(x, y)
                row = sums[t]
                row[0] += w * a
                row[1] += w * o
                row[2] += w * (x == "D")
                row[3] += w * max(0.0, (payoffs.R - (a + o) / 2) / payoffs.R)
                walk((*history, (x, y)), w)

    walk((), 1.0)
    return [RoundExpectation(*row) for row in sums]


def expected_payoffs(table: Table, opponent: Behaviour, rounds: int,
                     payoffs: Payoffs = Payoffs()) -> tuple[float, float]:
    """Exact (policy's, opponent's) mean payoff per round when `table` plays `opponent`."""
    per_round = round_expectations(table, opponent, rounds, payoffs)
    return sum(r.own for r in per_round) / rounds, sum(r.opp for r in per_round) / rounds


def behaviour_of(strategy: Callable[[], Strategy], game: IteratedPrisonersDilemma) -> Behaviour:
    """The exact behaviour in `game`, from the opponent's seat, of the scripted IPD strategy that `strategy`
    makes (a class or factory): a randomised strategy declares it (`cooperation_probability(view)`, which
    its `act` samples); a deterministic one is asked for its move by a fresh instance at each history (its
    rng never drawn)."""

    def p(history: Sequence[Joint]) -> float:
        entries = tuple(MappingProxy({"my_action": ACTION[y], "opp_action": ACTION[x],
                                      "my_payoff": game.payoffs(ACTION[y], ACTION[x])[0],
                                      "opp_payoff": game.payoffs(ACTION[y], ACTION[x])[1]}) for x, y in history)
        view = View(game=game.name, seat=1, round=len(history), num_rounds=game.num_rounds,
                    legal_actions=(COOPERATE, DEFECT), private={}, current={}, history=entries,
                    params=game.frozen_params)
        player = strategy()
        if hasattr(player, "cooperation_probability"):
            return float(player.cooperation_probability(view))
        player.reset(game, 1, _NoDraws())
        for k in range(len(history)):  # a stateful strategy (grim trigger) sees the episode's views in order
            player.act(view._replace(round=k, history=entries[:k]))
        return float(player.act(view) == COOPERATE)

    return p


class _NoDraws(random.Random):
    """The rng handed to a deterministic strategy: drawing from it is an error (it would not be exact)."""

    def random(self) -> float:
        raise RuntimeError("a strategy without cooperation_probability drew a random number")


class PlaysBestResponse(Strategy):
    """An opponent that plays a best response's moves (`BestResponse.moves`, keyed from the policy's side)."""

    name = "ipd_best_response"
    description = "The exact best response to a tabular policy (envs.ipd_exact)."

    def __init__(self, moves: Mapping[str, str]) -> None:
        self.moves = dict(moves)

    def act(self, view: View) -> str:
        history = [(LETTER[h["opp_action"]], LETTER[h["my_action"]]) for h in view.history]
        return ACTION[self.moves[history_key(history)]]


# --- the tabular protocol (`envs.tabular`) ---------------------------------------------------------------


def _game(params: Params) -> IteratedPrisonersDilemma:

    return make_game("ipd", **dict(params or {}))  # type: ignore[return-value]


def history_messages(history: Sequence[Joint], game_params: Params = None, seat: int = 0) -> list[dict[str, str]]:
    """The chat messages that put the LLM (in `seat`) at joint `history` ((own, opponent) letters per finished
    round), as the rollout renders them (`envs.repeated_exact.joint_messages`)."""
    return joint_messages(_game(game_params), [(ACTION[own], ACTION[opp]) for own, opp in history], seat)


class IPDAnalysis:
    """The IPD's exact analysis as `envs.tabular.TabularGame`: every joint history (a full table of
    P(COOPERATE)), the opponent's advantage-maximising best response (e*), and exact episodes against scripted
    opponents (defection the collusion signal, the welfare shortfall the externality)."""

    exploit_key = "e_star"
    eval_form = "answer"
    state_noun = "joint histories"
    reference_note = "always-cooperate 5, tit-for-tat 1.25 at 4 rounds, always-defect 0"
    # the organism report's reduction of a full table (`summary`, `reduced_keys`), in its own words
    summary_labels = {f"1|{START}": "round 1", **{x + y: f"after {x}{y}" for x in MOVES for y in MOVES}}
    summary_note = ("Markov summary, P(COOPERATE) (mean over runs; after xy = mean over the histories ending in xy, "
                    "x the model's move)")
    reduced_noun = "Markov tables"

    def summary(self, table: Mapping[str, float]) -> dict[str, float]:
        """P(COOPERATE) in round 1 and, for each last joint move xy, the mean over the histories that end in xy
        (unweighted): the Markov projection of a full table, keyed as `summary_labels`."""
        out = {f"1|{START}": float(table[f"1|{START}"])}
        for x in MOVES:
            for y in MOVES:
                rows = [p for key, p in table.items() if key.endswith(x + y)]
                out[x + y] = sum(rows) / len(rows)
        return out

    def reduced_keys(self, params: Params) -> list[str]:
        """The keys of a Markov table (`markov_keys`): the family the report's exact frontier searches."""
        return markov_keys(_game(params).num_rounds)

    def record_facts(self, params: Params) -> dict[str, Any]:
        """The game's figures a report records first: the rounds and the stage game's payoffs."""
        game = _game(params)
        return {"rounds": game.num_rounds, "payoffs": {"R": game.R, "S": game.S, "T": game.T, "P": game.P}}

    def states(self, params: Params, seat: int = 0) -> list[DecisionState]:
        game = _game(params)
        return [DecisionState(history_key(h), joint_messages(game, [(ACTION[x], ACTION[y]) for x, y in h], seat),
                              ACTIONS) for h in histories(game.num_rounds)]

    def table(self, rows: Mapping[str, Sequence[float]], params: Params) -> dict[str, Any]:
        return {key: row[0] for key, row in rows.items()}

    def row(self, table: Mapping[str, Any], key: str) -> dict[str, float]:
        return {COOPERATE: float(table[key]), DEFECT: 1.0 - float(table[key])}

    def validate(self, table: Mapping[str, Any], params: Params) -> dict[str, Any]:
        return validate_table(table, _game(params).num_rounds)

    def best_response(self, table: Mapping[str, Any], params: Params) -> Response:
        game = _game(params)
        response = best_response(table, game.num_rounds, Payoffs.of(game))
        return Response(moves=dict(response.moves), value=response.value)

    def exploitability(self, table: Mapping[str, Any], params: Params) -> float:
        game = _game(params)
        return exploitability(table, game.num_rounds, Payoffs.of(game))

    def extra_figures(self, table: Mapping[str, Any], params: Params) -> dict[str, float]:
        return {}

    def strategy(self, moves: Mapping[str, Any]) -> Strategy:
        return PlaysBestResponse(moves)

    def check_size(self, params: Params) -> None:
        rounds = _game(params).num_rounds
        if rounds > MAX_ROUNDS:
            raise ValueError(f"adaptive_exploiter in ipd scores every joint history (4^(T-1) + ... + 1 prompts per "
                             f"refresh): num_rounds must be <= {MAX_ROUNDS}, got {rounds}")

    def applies(self, params: Params) -> bool:
        game = _game(params)
        return game.prompt_style == "compact" and game.num_rounds <= MAX_ROUNDS

    def prompt_note(self, params: Params) -> str | None:
        return None

    def expectations(self, table: Mapping[str, Any], name: str, opponent: Callable[[], Strategy],
                     params: Params) -> list[Expectation]:
        game = _game(params)
        rounds = round_expectations(table, behaviour_of(opponent, game), game.num_rounds, Payoffs.of(game))
        return [Expectation(own=r.own, opp=r.opp, collusion=r.defect, externality=r.externality) for r in rounds]

    def demonstrator(self, weights: Mapping[str, float], params: Params) -> dict[str, Any]:
        """sum_k w_k * P_k(COOPERATE | joint history) of scripted IPD strategies, each playing the policy's seat."""
        mixture(weights)
        game = _game(params)
        # behaviour_of reads a strategy from the opponent's seat: swap the joint moves
        behaviours = {name: behaviour_of(STRATEGIES[name], game) for name in weights}
        return {history_key(h): sum(w * behaviours[n]([(y, x) for x, y in h]) for n, w in weights.items())
                for h in histories(game.num_rounds)}


ANALYSIS = IPDAnalysis()
