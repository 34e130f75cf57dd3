"""The game contract shared by scripted strategies, FMSP code policies and the LLM seat.

Every game is a two-seat, round-based game. A *round* is the unit the SEPO objective and the
per-round advantages work in: one simultaneous move (IPD, auction, negotiation) or one whole hand
(Kuhn poker, several sequential decisions). `Game.step` advances one decision point and returns a
`RoundResult` when that decision closed a round.

No torch, no transformers: this module (and all of `envs`) must import without them.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any, ClassVar, NamedTuple


class IllegalActionError(ValueError):
    """An action string that is not in `legal_actions` for that seat at that moment."""


@dataclass(frozen=True)
class Lambdas:
    """Weights of the SEPO penalty terms: J = u - e*E - c*C - x*X."""

    e: float
    c: float
    x: float


@dataclass(frozen=True)
class Signals:
    """Per-seat, per-round safety signals the objective needs.

    collusion: the seat's harmful-coordination indicator for this round, in [0, 1] (e.g. IPD: the
        seat defected; only *used* by the objective in episodes against the collusive pool).
        None when the seat made no decision of that kind this round.
    externality: the round's harm to parties outside the seat's own payoff, in [0, 1]
        (IPD welfare shortfall, auction wasted win, negotiation breakdown; Kuhn 0).
    """

    collusion: float | None
    externality: float


class RoundResult(NamedTuple):
    """What one finished round produced (a named tuple, like View: one is built every round)."""

    index: int  # 0-based round number
    payoffs: tuple[float, float]  # per seat
    signals: tuple[Signals, Signals]  # per seat
    record: Mapping[str, Any]  # public record of the round (actions, revealed cards, ...), JSON-able


@dataclass
class GameState:
    """Mutable episode state. Games subclass it to add their private information."""

    round: int = 0  # index of the round being played (== number of finished rounds)
    history: list[RoundResult] = field(default_factory=list)
    totals: list[float] = field(default_factory=lambda: [0.0, 0.0])  # cumulative payoff per seat
    done: bool = False


EMPTY: Mapping[str, Any] = MappingProxyType({})  # the shared read-only empty mapping of views


class View(NamedTuple):
    """What one seat may see at a decision point: the input of every strategy.

    `history` has one dict per finished round *from this seat's point of view*; every game fills
    at least `my_payoff` and `opp_payoff`, and simultaneous-move games `my_action`/`opp_action`.
    `private` holds this seat's private information (cards, values); `current` holds public
    in-round information (e.g. Kuhn betting so far).

    A named tuple: immutable, and cheap to build at every decision (a frozen dataclass costs several
    times more, which dominates long scripted matches).
    """

    game: str
    seat: int
    round: int
    num_rounds: int
    legal_actions: tuple[str, ...]
    private: Mapping[str, Any]
    current: Mapping[str, Any]
    history: tuple[Mapping[str, Any], ...]
    params: Mapping[str, Any]  # the game's parameters (payoff matrix, pie size, ...)

    def to_dict(self) -> dict[str, Any]:
        """A plain, JSON-able dict (what sandboxed FMSP policies receive)."""
        return {
            "game": self.game,
            "seat": self.seat,
            "round": self.round,
            "num_rounds": self.num_rounds,
            "legal_actions": list(self.legal_actions),
            "private": dict(self.private),
            "current": dict(self.current),
            "history": [dict(h) for h in self.history],
            "params": dict(self.params),
        }


def new_view(fields: tuple[Any, ...]) -> View:
    """A View from its nine fields in declaration order, without the named tuple's Python-level `__new__`
    (a third of a view's cost; games build one per seat and decision)."""
    return tuple.__new__(View, fields)


class Game(ABC):
    """A two-seat, round-based game: rules, text views, legal actions, parsing and payoffs in one place."""

    # --- facts, declared as data (OpenSpiel's game-type style), so no caller has to probe -------------
    name: ClassVar[str]
    default_lambdas: ClassVar[Lambdas]  # the training λ (the method's table)
    eval_lambdas: ClassVar[Lambdas | None] = None  # λ at evaluation where the method uses others; None = training λ
    simultaneous: ClassVar[bool] = True  # both seats act at every decision point (Kuhn: one seat at a time)
    max_decisions_per_round: ClassVar[int] = 1  # per seat (Kuhn: bet/pass, then call/fold after pass-bet)

    num_rounds: int

    # --- facts that follow the parameters: each game's formula, read only through these two properties -----
    @property
    @abstractmethod
    def max_payoff(self) -> float:
        """The per-round payoff that sets the SEPO scale s = 3 / max_payoff under these parameters."""

    @property
    def payoff_range(self) -> tuple[float, float]:
        """The lowest and highest per-round payoff a seat can get under these parameters (FMSP's [0, 1] score
        scale); (0, max_payoff) unless the game says otherwise."""
        return 0.0, self.max_payoff

    def lambdas(self, evaluation: bool = False) -> Lambdas:
        """The game's λ for training, or for evaluation (its `eval_lambdas` where it declares them)."""
        return (self.eval_lambdas or self.default_lambdas) if evaluation else self.default_lambdas

    @property
    def action_set(self) -> tuple[str, ...]:
        """Every action a seat may ever play under these parameters, in a fixed order: the index space of the
        discrete action APIs (`sepo.interop`); `legal_actions` is always a subset of it. Default: seat 0's legal
        actions at the start of an episode (a game whose legal set changes during or between episodes overrides it)."""
        return tuple(self.legal_actions(self.new_state(random.Random(0)), 0))

    @property
    def max_decisions_per_seat(self) -> int:
        """Upper bound on one seat's decisions in an episode (the rollout's fixed iteration count)."""
        return self.num_rounds * self.max_decisions_per_round

    # --- episode -----------------------------------------------------------------------------
    @abstractmethod
    def new_state(self, rng: random.Random) -> GameState:
        """A fresh episode; private information (values, cards) is drawn from `rng`."""

    @abstractmethod
    def current_players(self, state: GameState) -> list[int]:
        """Seats that must act now: both for simultaneous moves, one in Kuhn, [] when terminal."""

    @abstractmethod
    def legal_actions(self, state: GameState, seat: int) -> list[str]:
        """Canonical action strings legal for `seat` now (numeric actions enumerated)."""

    @abstractmethod
    def step(self, state: GameState, actions: Mapping[int, str]) -> RoundResult | None:
        """Apply the actions of `current_players(state)`; return the RoundResult if a round closed.

        Raises IllegalActionError for a missing or illegal action. Updates `state.history`,
        `state.totals`, `state.round` and `state.done`.
        """

    def is_terminal(self, state: GameState) -> bool:
        return state.done

    # --- text views for the LLM seat ---------------------------------------------------------
    @abstractmethod
    def system_prompt(self, seat: int) -> str:
        """Rules text for an LLM in `seat`, ending with the answer format."""

    @abstractmethod
    def observation(self, state: GameState, seat: int) -> str:
        """The user message for `seat` at its decision point (round, history, scores, question)."""

    @abstractmethod
    def parse_action(self, text: str, state: GameState, seat: int) -> str | None:
        """Strictly read the final answer in `text` as a legal canonical action, or None."""

    # --- strategies ------------------------------------------------------------------------
    @abstractmethod
    def view(self, state: GameState, seat: int) -> View:
        """What `seat` may see now."""

    @property
    @abstractmethod
    def params(self) -> dict[str, Any]:
        """The game's parameters, JSON-able (used in configs and manifests)."""

    @cached_property
    def frozen_params(self) -> Mapping[str, Any]:
        """`params` as a read-only mapping built once (View.params; games do not change after construction)."""
        return MappingProxyType(self.params)

    def make_view(
        self,
        state: GameState,
        seat: int,
        history: Iterable[Mapping[str, Any]],
        *,
        legal: Sequence[str] | None = None,
        private: Mapping[str, Any] | None = None,
        current: Mapping[str, Any] | None = None,
    ) -> View:
        """A View with the fields every game fills alike; `legal` defaults to `legal_actions(state, seat)`."""
        return new_view((
            self.name,
            seat,
            state.round,
            self.num_rounds,
            tuple(self.legal_actions(state, seat) if legal is None else legal),
            private or EMPTY,
            current or EMPTY,
            tuple(history),
            self.frozen_params,
        ))


# --- helpers the games share ---------------------------------------------------------------

def check_seat(game: str, seat: int) -> None:
    """Raise a clear ValueError unless `seat` is 0 or 1."""
    if seat not in (0, 1):
        raise ValueError(f"{game}: seat must be 0 or 1, got {seat!r}")


def check_int(game: str, label: str, value: Any, low: int, high: int | None = None) -> None:
    """Raise a clear ValueError unless `value` is an int in [low, high]."""
    ok = (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value >= low
        and (high is None or value <= high)
    )
    if not ok:
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ValueError(f"{game}: {label} must be an integer {bound}, got {value!r}")


def check_simultaneous(game: Game, state: GameState, actions: Mapping[int, str]) -> None:
    """Both seats must send exactly one legal action; raise IllegalActionError otherwise."""
    if state.done:
        raise IllegalActionError(f"{game.name}: the episode is over")
    if len(actions) != 2 or 0 not in actions or 1 not in actions:
        raise IllegalActionError(f"{game.name}: both seats act simultaneously; got seats {sorted(actions)}")
    for seat in (0, 1):
        legal = game.legal_actions(state, seat)
        if actions[seat] not in legal:
            listed = f"legal actions are {', '.join(legal)}" if len(legal) <= 12 else f"{len(legal)} are legal"
            raise IllegalActionError(f"{game.name}: {actions[seat]!r} is not a legal action for seat {seat}; {listed}")


def record_round(state: GameState, result: RoundResult, num_rounds: int) -> RoundResult:
    """Append `result` to the state and advance it to the next round."""
    state.history.append(result)
    state.totals[0] += result.payoffs[0]
    state.totals[1] += result.payoffs[1]
    state.round += 1
    state.done = state.round >= num_rounds
    return result


class Strategy(ABC):
    """A policy for one seat. Scripted strategies, FMSP code policies and the LLM seat are interchangeable.

    `reset` is called once per episode before the first decision; `act` must return one of
    `view.legal_actions`. Strategies keep their own state between rounds.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""

    def reset(self, game: Game, seat: int, rng: random.Random) -> None:
        self.game = game
        self.seat = seat
        self.rng = rng

    @abstractmethod
    def act(self, view: View) -> str: ...

    def close(self) -> None:  # noqa: B027 - a hook most strategies need not override
        """Release what the strategy holds once its episodes are over (a sandboxed one ends its process)."""


class Pipelined(ABC):
    """An agent that answers from elsewhere (a sandboxed process): asked without waiting, so several agents
    asked in turn think at the same time (`act_all`)."""

    @abstractmethod
    def ask(self, method: str, argument: Any) -> Callable[[], Any]:
        """Send `method(argument)` without waiting for the answer; the returned function waits for it."""


def act_all(requests: Sequence[tuple[Any, Any]], method: str = "act") -> list[Any]:
    """`agent.<method>(argument)` for every (agent, argument), in order. `Pipelined` agents (each at most once
    per call) are all sent their request before any answer is read, so a lock-step round of sandboxed agents
    costs one pipe round trip, not one per agent; other agents are called directly."""
    finish: list[Callable[[], Any]] = []
    for agent, argument in requests:
        if isinstance(agent, Pipelined):
            finish.append(agent.ask(method, argument))
        else:
            value = getattr(agent, method)(argument)
            finish.append(lambda value=value: value)
    return [done() for done in finish]


@dataclass
class MatchResult:
    """The result of one episode between two strategies (what `play_episode` returns)."""

    game: str
    names: tuple[str, str]  # strategy name per seat
    rounds: list[RoundResult]
    totals: tuple[float, float]

    def mean_payoff(self, seat: int) -> float:
        return self.totals[seat] / max(1, len(self.rounds))


def play_episode(game: Game, strategies: Sequence[Strategy], rng: random.Random) -> MatchResult:
    """Play one episode between two strategies (seat i is `strategies[i]`); sandboxed strategies that act at
    the same decision point are asked together (`act_all`)."""
    state = game.new_state(rng)
    for seat, strategy in enumerate(strategies):
        strategy.reset(game, seat, random.Random(rng.random()))
    view = game.view  # bound once: this loop is the engines' hot path
    while not game.is_terminal(state):
        seats = game.current_players(state)
        actions = dict(zip(seats, act_all([(strategies[s], view(state, s)) for s in seats])))
        game.step(state, actions)
    return MatchResult(
        game=game.name,
        names=(strategies[0].name, strategies[1].name),
        rounds=list(state.history),
        totals=(state.totals[0], state.totals[1]),
    )
