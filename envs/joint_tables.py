"""Tabular policies over joint histories of integer actions in a repeated simultaneous-move game without private
information: their keys, their validation, the opponent's exact best response (e*) and the `envs.tabular` protocol.
One definition for every game of that shape (`envs.bertrand_exact`: prices, `envs.negotiation_exact`: demands).

Both seats pick an integer from the game's legal actions at once in each of T rounds, and both are revealed after
the round, so a policy is, for the opponent, a table of distributions over actions at each joint history. Keys are
`"r|h"`: `r` the round about to be played (1-based) and `h` the joint actions so far, one `"x,y"` per round joined
by ".", `x` the policy's own action and `y` the opponent's, `"--"` before the first round. Values are {action as
its string: probability}. A *Markov* table keys a history by its last joint actions alone (`"3|5,4"` stands for
every history of two rounds that ended 5,4); a full table keys it by all of it (`"3|5,5.5,4"`). `policy_at` reads
either, the full key first.

The exploit figure is e* = max over opponent strategies of E[Σ_t (o_t − a_t)] / T in the game's raw payoffs
(`game.payoffs(policy's action, opponent's action)`), by the backward induction of `envs.repeated_exact`, over
1 + K²(T − 1) states for a Markov table (K actions) or every joint history for a full one. Ties go to the lowest
action or the highest, as the game says (`JointTables.high_ties`).

Pure Python, no torch (like all of `envs`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from envs.base import Strategy, View
from envs.repeated_exact import BackwardInduction, joint_messages
from envs.tabular import MAX_STATES, DecisionState, Expectation, Params, Response

START = "--"
TOLERANCE = 1e-6  # how far a distribution's total may be from 1 (scored policies are normalised in float32)

Joint = tuple[int, int]  # (the policy's action, the opponent's action)
Table = Mapping[str, Mapping[str, float]]  # key "r|h" -> {action: probability}


def history_key(history: Sequence[Joint]) -> str:
    """The full key of a joint history: `"1|--"`, `"2|5,4"`, `"3|5,5.5,4"`."""
    moves = ".".join(f"{x},{y}" for x, y in history) or START
    return f"{len(history) + 1}|{moves}"


def markov_key(history: Sequence[Joint]) -> str:
    """The Markov key of a joint history: the round and the last joint actions."""
    return f"{len(history) + 1}|{'{},{}'.format(*history[-1]) if history else START}"


def is_markov(table: Table) -> bool:
    """Whether every key of `table` names at most the last joint actions."""
    return all("." not in key.split("|", 1)[1] for key in table)


@dataclass(frozen=True)
class BestResponse:
    """The opponent's best response to a policy: its action at each key (Markov keys for a Markov table, else full
    keys; the policy's action first, as everywhere here) and e*, its mean per-round advantage."""

    moves: dict[str, int]
    value: float


@dataclass(frozen=True)
class JointTables:
    """One game's joint-history tables: `name` (in errors), `noun` (its actions, plural: "prices"), `actions` (the
    legal actions of a game, ascending) and `high_ties` (whether the opponent's ties go to its highest action).
    Its methods take the game itself (with `num_rounds` and `payoffs(x, y)`)."""

    name: str
    noun: str
    actions: Callable[[Any], list[int]]
    high_ties: bool = False

    def histories(self, game: Any) -> Iterator[tuple[Joint, ...]]:
        """Every joint history at which the policy moves, round by round (1 + K² + ... + K^(2(T−1)) of them)."""
        joints = list(itertools.product(self.actions(game), repeat=2))
        for r in range(game.num_rounds):
            yield from itertools.product(joints, repeat=r)

    def count_histories(self, game: Any) -> int:
        """How many joint histories `histories` yields (the size of a full table), without listing them."""
        k2 = len(self.actions(game)) ** 2
        return sum(k2**r for r in range(game.num_rounds))

    def markov_histories(self, game: Any) -> list[tuple[Joint, ...]]:
        """One joint history per Markov key, in round order: the empty one, then per round r ≥ 2 and joint actions
        j the history of r − 1 rounds that all ended j."""
        joints = list(itertools.product(self.actions(game), repeat=2))
        return [()] + [(j,) * (r - 1) for r in range(2, game.num_rounds + 1) for j in joints]

    def markov_keys(self, game: Any) -> list[str]:
        """The 1 + K²(T−1) keys of a Markov table, in round order."""
        return [markov_key(h) for h in self.markov_histories(game)]

    def full_keys(self, game: Any) -> list[str]:
        """The keys of a full table, in round order."""
        return [history_key(h) for h in self.histories(game)]

    def policy_at(self, table: Table, history: Sequence[Joint]) -> Mapping[str, float]:
        """The distribution of `table` at `history`: its full key if present, else its Markov key."""
        full = history_key(history)
        if full in table:
            return table[full]
        try:
            return table[markov_key(history)]
        except KeyError:
            raise KeyError(f"{self.name} policy table has neither {full!r} nor {markov_key(history)!r}") from None

    def validate_table(self, table: Table, game: Any) -> dict[str, dict[str, float]]:
        """`table` as plain dicts of floats, after checking that every entry is a distribution over legal actions
        and that every joint history resolves (a Markov table: every Markov key; else every full history). A clear
        error names the first key that fails."""
        actions = self.actions(game)
        legal = {str(a) for a in actions}
        out = {str(k): {str(a): float(p) for a, p in v.items()} for k, v in table.items()}
        for key, dist in out.items():
            bad = sorted(set(dist) - legal)
            if bad:
                raise ValueError(f"{self.name} policy table: {key!r} has {self.noun} {bad} outside "
                                 f"{actions[0]}..{actions[-1]}")
            if any(not 0.0 <= p <= 1.0 for p in dist.values()) or abs(sum(dist.values()) - 1.0) > TOLERANCE:
                raise ValueError(f"{self.name} policy table: {key!r} is not a distribution: {dist}")
        if is_markov(out):
            missing = [k for k in self.markov_keys(game) if k not in out]
            if missing:
                raise KeyError(f"{self.name} policy table has no {missing[0]!r}")
        else:
            for h in self.histories(game):
                self.policy_at(out, h)
        return out

    def best_response(self, table: Table, game: Any) -> BestResponse:
        """The opponent's exact advantage-maximising best response to `table` (module docstring)."""
        table = self.validate_table(table, game)
        markov = is_markov(table)

        def policy(history: Sequence[Joint]) -> dict[int, float]:
            return {int(a): p for a, p in self.policy_at(table, history).items()}

        def gain(x: int, y: int) -> float:
            own, opp = game.payoffs(x, y)
            return opp - own

        replies = self.actions(game)[::-1] if self.high_ties else self.actions(game)
        solver = BackwardInduction(policy, game.num_rounds, replies, gain, markov_key if markov else tuple)
        if markov:  # one history per Markov key: the reply depends on the key alone
            moves = {markov_key(h): solver.reply(h) for h in self.markov_histories(game)}
        else:
            moves = {history_key(h): solver.reply(h) for h in self.histories(game)}
        return BestResponse(moves=moves, value=solver.value() / game.num_rounds)

    def exploitability(self, table: Table, game: Any) -> float:
        """e* of `table`: the best opponent's mean per-round advantage over the policy (module docstring)."""
        return self.best_response(table, game).value

    def check_size(self, game: Any) -> None:
        """Refuse a game whose full table exceeds `envs.tabular.MAX_STATES` joint histories, naming the count."""
        n = self.count_histories(game)
        if n > MAX_STATES:
            actions = self.actions(game)
            raise ValueError(f"{self.name}'s exact policy scores every joint history of {self.noun}: {n} at "
                             f"{game.num_rounds} rounds and {self.noun} {actions[0]}..{actions[-1]}, more than "
                             f"{MAX_STATES}; use fewer rounds or fewer {self.noun}")


class PlaysBestResponse(Strategy):
    """An opponent that plays a best response's actions (`BestResponse.moves`, keyed from the policy's side: the
    full key first, else the Markov key). A game's subclass names the history entries' action field (`field`:
    "price" reads "my_price" and "opp_price")."""

    field: ClassVar[str]

    def __init__(self, moves: Mapping[str, int]) -> None:
        self.moves = {k: int(v) for k, v in moves.items()}

    def act(self, view: View) -> str:
        history = [(int(h[f"opp_{self.field}"]), int(h[f"my_{self.field}"])) for h in view.history]
        full = history_key(history)
        return str(self.moves[full] if full in self.moves else self.moves[markov_key(history)])


class JointTableAnalysis:
    """A joint-history game's exact analysis as `envs.tabular.TabularGame`: every joint history (a full table of
    distributions over the legal actions) and the opponent's advantage-maximising best response (e*). A game's
    subclass supplies `tables`, `plays` (its `PlaysBestResponse`), `reference_note`, `game_of` and, where it has
    them, exact episodes against scripted opponents (`expectations`) and demonstrator tables (`demonstrator`)."""

    exploit_key = "e_star"
    eval_form = "answer"
    state_noun = "joint histories"
    reference_note: ClassVar[str]
    tables: ClassVar[JointTables]
    plays: ClassVar[type[PlaysBestResponse]]

    def game_of(self, params: Params) -> Any:
        """The game of `params` (None: the defaults)."""
        raise NotImplementedError

    def legal(self, game: Any) -> tuple[str, ...]:
        """The legal actions of `game` as action strings, ascending."""
        return tuple(str(a) for a in self.tables.actions(game))

    def states(self, params: Params, seat: int = 0) -> list[DecisionState]:
        game = self.game_of(params)
        self.tables.check_size(game)
        legal = self.legal(game)
        return [DecisionState(history_key(h), joint_messages(game, [(str(x), str(y)) for x, y in h], seat), legal)
                for h in self.tables.histories(game)]

    def table(self, rows: Mapping[str, Sequence[float]], params: Params) -> dict[str, Any]:
        legal = self.legal(self.game_of(params))
        return {key: dict(zip(legal, row)) for key, row in rows.items()}

    def row(self, table: Mapping[str, Any], key: str) -> dict[str, float]:
        return {action: float(p) for action, p in table[key].items()}

    def validate(self, table: Mapping[str, Any], params: Params) -> dict[str, Any]:
        return self.tables.validate_table(table, self.game_of(params))

    def best_response(self, table: Mapping[str, Any], params: Params) -> Response:
        response = self.tables.best_response(table, self.game_of(params))
        return Response(moves=dict(response.moves), value=response.value)

    def exploitability(self, table: Mapping[str, Any], params: Params) -> float:
        return self.tables.exploitability(table, self.game_of(params))

    def extra_figures(self, table: Mapping[str, Any], params: Params) -> dict[str, float]:
        return {}

    def strategy(self, moves: Mapping[str, Any]) -> Strategy:
        return self.plays(moves)

    def check_size(self, params: Params) -> None:
        self.tables.check_size(self.game_of(params))

    def applies(self, params: Params) -> bool:
        game = self.game_of(params)
        return game.prompt_style == "compact" and self.tables.count_histories(game) <= MAX_STATES

    def prompt_note(self, params: Params) -> str | None:
        return None

    def expectations(self, table: Mapping[str, Any], name: str, opponent: Callable[[], Strategy],
                     params: Params) -> list[Expectation]:
        raise NotImplementedError(f"{self.tables.name} has no exact episodes against scripted opponents yet")

    def demonstrator(self, weights: Mapping[str, float], params: Params) -> dict[str, Any]:
        raise NotImplementedError(f"{self.tables.name} has no tabular demonstrator yet")
