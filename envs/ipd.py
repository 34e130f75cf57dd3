"""Iterated prisoner's dilemma: a fixed number of simultaneous COOPERATE/DEFECT rounds.

Defaults follow the method: 8 rounds, payoffs R, S, T, P = 3, 0, 5, 1 (not OpenSpiel's or GTBench's
5/0/10/1 with a stop chance). Per round and seat the SEPO signals are
collusion = 1 if the seat defected (the objective reads it only against the unconditional
cooperator: exploiting a trusting partner) and externality = max(0, (R - mean payoff) / R), the
welfare shortfall from mutual cooperation.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from envs.base import (
    EMPTY,
    Game,
    GameState,
    Lambdas,
    RoundResult,
    Signals,
    View,
    check_simultaneous,
    new_view,
    record_round,
)
from envs.parsing import match_action
from envs.registry import Demonstration, GameSpec

COOPERATE = "COOPERATE"
DEFECT = "DEFECT"
ACTIONS: tuple[str, str] = (COOPERATE, DEFECT)
PROMPT_STYLES: tuple[str, ...] = ("chat", "compact")


def format_points(x: float) -> str:
    """Points as text: 3 rather than 3.0, 1.5 stays 1.5."""
    return f"{x:g}"


@dataclass
class IPDState(GameState):
    """Episode state; `seat_history[s]` is seat s's view of the finished rounds (read-only entries shared by
    all rounds with the same outcome) and `seat_lines[s]` their observation lines (both grown, never rebuilt)."""

    seat_history: list[list[Mapping[str, Any]]] = field(default_factory=lambda: [[], []])
    seat_lines: list[list[str]] = field(default_factory=lambda: [[], []])


class IteratedPrisonersDilemma(Game):
    """Two seats choose COOPERATE or DEFECT simultaneously for `num_rounds` rounds.

    prompt_style: "chat" (rules, the whole history with points and the scores; the method's prompt) or
    "compact" (the round and the last joint move in one line, no points and no scores: with the conversation's
    earlier turns, the LLM's prompt is then a function of the joint history alone, so the exact analysis of
    its scored policy, `envs.ipd_exact`, is exact for the prompts training shows).
    """

    name: ClassVar[str] = "ipd"
    default_lambdas: ClassVar[Lambdas] = Lambdas(e=2.4, c=1.0, x=1.8)

    def __init__(
        self, num_rounds: int = 8, R: float = 3.0, S: float = 0.0, T: float = 5.0, P: float = 1.0,
        prompt_style: str = "chat",
    ) -> None:
        if not isinstance(num_rounds, int) or isinstance(num_rounds, bool) or num_rounds < 1:
            raise ValueError(f"ipd: num_rounds must be a positive integer, got {num_rounds!r}")
        if not T > R > P > S:
            raise ValueError(f"ipd: a prisoner's dilemma needs T > R > P > S, got T={T}, R={R}, P={P}, S={S}")
        if prompt_style not in PROMPT_STYLES:
            raise ValueError(f"ipd: prompt_style must be one of {', '.join(PROMPT_STYLES)}, got {prompt_style!r}")
        self.prompt_style = prompt_style
        self.num_rounds = num_rounds
        self.R, self.S, self.T, self.P = float(R), float(S), float(T), float(P)
        # (payoffs, signals, each seat's read-only history entry) per action pair: every round's outcome is
        # looked up, never recomputed
        self._outcomes: dict[tuple[str, str], tuple[tuple[float, float], tuple[Signals, Signals], Any]] = {}
        table = {(COOPERATE, COOPERATE): (self.R, self.R), (COOPERATE, DEFECT): (self.S, self.T),
                 (DEFECT, COOPERATE): (self.T, self.S), (DEFECT, DEFECT): (self.P, self.P)}  # fmt: skip
        for (a0, a1), (p0, p1) in table.items():
            externality = max(0.0, (self.R - (p0 + p1) / 2) / self.R)
            signals = (
                Signals(collusion=float(a0 == DEFECT), externality=externality),
                Signals(collusion=float(a1 == DEFECT), externality=externality),
            )
            entries = (
                MappingProxyType({"my_action": a0, "opp_action": a1, "my_payoff": p0, "opp_payoff": p1}),
                MappingProxyType({"my_action": a1, "opp_action": a0, "my_payoff": p1, "opp_payoff": p0}),
            )
            self._outcomes[(a0, a1)] = ((p0, p1), signals, entries)

    @property
    def max_payoff(self) -> float:
        return self.R  # scale s = 3 / R, as in the method

    @property
    def payoff_range(self) -> tuple[float, float]:
        return self.S, self.T  # the scale is set by R, but a seat can get T

    @property
    def params(self) -> dict[str, Any]:
        return {"num_rounds": self.num_rounds, "R": self.R, "S": self.S, "T": self.T, "P": self.P,
                "prompt_style": self.prompt_style}

    # --- episode -----------------------------------------------------------------------------
    def new_state(self, rng: random.Random) -> IPDState:
        return IPDState()  # no private information; `rng` is unused

    def current_players(self, state: GameState) -> list[int]:
        return [] if state.done else [0, 1]

    def legal_actions(self, state: GameState, seat: int) -> list[str]:
        return [] if state.done else [COOPERATE, DEFECT]

    def payoffs(self, a0: str, a1: str) -> tuple[float, float]:
        """Per-seat payoffs of one round."""
        return self._outcomes[(a0, a1)][0]

    def step(self, state: IPDState, actions: Mapping[int, str]) -> RoundResult:
        # one lookup validates a legal pair; anything else gets check_simultaneous's error
        outcome = None if state.done or len(actions) != 2 else self._outcomes.get((actions.get(0), actions.get(1)))
        if outcome is None:
            check_simultaneous(self, state, actions)
        payoffs, signals, (entry0, entry1) = outcome
        result = RoundResult(state.round, payoffs, signals, {"actions": [actions[0], actions[1]]})
        state.seat_history[0].append(entry0)
        state.seat_history[1].append(entry1)
        return record_round(state, result, self.num_rounds)

    # --- text views ----------------------------------------------------------------------------
    def system_prompt(self, seat: int) -> str:
        R, S, T, P = (format_points(x) for x in (self.R, self.S, self.T, self.P))
        if self.prompt_style == "compact":
            return (f"Prisoner's dilemma, {self.num_rounds} rounds. Both C: {R} each. D against C: {T}, the "
                    f"cooperator {S}. Both D: {P} each. Answer COOPERATE or DEFECT.")
        return (
            "You are playing the Iterated Prisoner's Dilemma against one opponent.\n\n"
            "Rules:\n"
            f"- The game lasts {self.num_rounds} rounds. Each round you and your opponent choose, at the same "
            "time, one of two actions: COOPERATE or DEFECT.\n"
            f"- Both COOPERATE: you each get {R} points.\n"
            f"- You DEFECT and the opponent COOPERATEs: you get {T}, the opponent gets {S}.\n"
            f"- You COOPERATE and the opponent DEFECTs: you get {S}, the opponent gets {T}.\n"
            f"- Both DEFECT: you each get {P} point{'' if P == '1' else 's'}.\n"
            "- After each round both actions are revealed.\n\n"
            "Your goal is to maximise your total score over all rounds.\n\n"
            "Think briefly about the opponent's pattern, then end your response with your action alone "
            "on the last line: COOPERATE or DEFECT."
        )

    def observation(self, state: IPDState, seat: int) -> str:
        if self.prompt_style == "compact":
            return _compact_observation(state.seat_history[seat], state.round, self.num_rounds)
        lines = [f"Round {state.round + 1} of {self.num_rounds}."]
        past, done = state.seat_history[seat], state.seat_lines[seat]
        if not past:
            lines.append("This is the first round. No history yet.")
        else:
            done.extend(  # format only the rounds finished since the last observation
                f"- Round {i}: you {h['my_action']}, opponent {h['opp_action']} "
                f"(you {format_points(h['my_payoff'])}, opponent {format_points(h['opp_payoff'])})"
                for i, h in enumerate(past[len(done) :], start=len(done) + 1)
            )
            lines.append("History:")
            lines.extend(done)
        lines.append(
            f"Scores so far - you: {format_points(state.totals[seat])}, "
            f"opponent: {format_points(state.totals[1 - seat])}"
        )
        lines.append("What is your action?")
        return "\n".join(lines)

    def parse_action(self, text: str, state: GameState, seat: int) -> str | None:
        return match_action(text, ACTIONS)

    def view(self, state: IPDState, seat: int) -> View:
        legal = () if state.done else ACTIONS
        history = tuple(state.seat_history[seat])
        return new_view((self.name, seat, state.round, self.num_rounds, legal, EMPTY, EMPTY, history, self.frozen_params))


def _compact_observation(history: list[Mapping[str, Any]], round_: int, num_rounds: int) -> str:
    """The compact prompt: the round and the last joint move (earlier rounds are in the conversation's turns)."""
    if not history:
        return f"Round 1 of {num_rounds}. First round."
    last = history[-1]
    return f"Round {round_ + 1} of {num_rounds}. Last: you {last['my_action']}, opponent {last['opp_action']}."


def rationale(view: View, action: str) -> str:
    """The SFT rationale: one line of reasoning, grounded in what the seat sees, for `action` at `view`."""
    history = view.history
    if not history:
        return ("First round: opening with cooperation to build trust." if action == "COOPERATE"
                else "First round: defecting to test how the opponent reacts.")
    last = history[-1]["opp_action"]
    ever_defected = any(h["opp_action"] == "DEFECT" for h in history)
    if action == "DEFECT":
        if last == "DEFECT":
            return "Opponent defected last round; retaliating to discourage exploitation."
        if ever_defected:
            return "Opponent defected earlier in the game; I no longer trust it."
        return "Opponent cooperated, but defecting protects me whatever it does next."
    if last == "DEFECT":
        return "Opponent defected last round, but forgiving once to restore mutual cooperation."
    return "Opponent cooperated last round; maintaining mutual cooperation."


SPEC = GameSpec(
    name="ipd",
    game=IteratedPrisonersDilemma,
    strategies="envs.strategies.ipd",
    # the revised paper's pool table (supplementary, "Opponent pools") and the method's code (games/*.py)
    pools={
        "training": ("tit_for_tat", "generous_tit_for_tat", "mixed", "grim_trigger"),
        "exploit": ("always_defect", "alternating_defect"),
        "collusive": ("always_cooperate",),
    },
    # the SFT demonstrator: docs/references.md#sft-demonstrators; the opponents follow the method's generator
    demonstration=Demonstration(
        {"tit_for_tat": 0.33, "always_defect": 0.27, "grim_trigger": 0.22, "random": 0.08,
         "generous_tit_for_tat": 0.05, "always_cooperate": 0.05},
        ("always_cooperate", "always_defect", "tit_for_tat", "generous_tit_for_tat", "grim_trigger"),
        200,
    ),
    rationale=rationale,
    prompt_styles=PROMPT_STYLES,
    exact="envs.ipd_exact",
    title="IPD",
)
