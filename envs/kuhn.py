"""Kuhn poker as a repeated game (one round = one hand): the rules and the information-set notation.

The game: cards J < Q < K, each seat antes, one bet size, `num_hands` hands per episode with the first
mover alternating (seat 0 first in hand 0). Actions are PASS/BET when no bet is pending and FOLD/CALL
when facing one. Information sets are strings in OpenSpiel's p/b notation with letters for cards ("K",
"Qp", "Jb", "Qpb"); the exact analysis of the classic hand over them (best response, exploitability, game
value, the Nash family) lives apart from the rules, in `envs.kuhn_exact`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envs.base import (
    Game,
    GameState,
    IllegalActionError,
    Lambdas,
    RoundResult,
    Signals,
    View,
    check_seat,
    record_round,
)
from envs.parsing import match_action
from envs.registry import Demonstration, GameSpec

CARDS: tuple[str, ...] = ("J", "Q", "K")
RANK = {card: rank for rank, card in enumerate(CARDS)}
OPEN_ACTIONS: tuple[str, ...] = ("PASS", "BET")  # no bet pending
FACING_ACTIONS: tuple[str, ...] = ("FOLD", "CALL")  # facing a bet
LETTER = {"PASS": "p", "BET": "b", "FOLD": "p", "CALL": "b"}  # classic p/b notation
_ALIASES = {"CHECK": "PASS", "RAISE": "BET"}

# Betting sequences of the classic hand (letters) that end it, and those where a player acts.
TERMINAL_HISTORIES: tuple[str, ...] = ("pp", "bp", "bb", "pbp", "pbb")
DECISION_HISTORIES: tuple[str, ...] = ("", "p", "b", "pb")
INFO_STATES: tuple[str, ...] = tuple(card + h for h in DECISION_HISTORIES for card in CARDS)



def actions_at(history: str) -> tuple[str, ...]:
    """Legal canonical actions after betting `history` (p/b letters) of the current hand."""
    return FACING_ACTIONS if history.endswith("b") else OPEN_ACTIONS


def hand_over(history: str) -> bool:
    """Whether betting `history` (p/b letters) ends the hand."""
    return history in TERMINAL_HISTORIES


# ------------------------------------------------------------------------------------------------
# The repeated game
# ------------------------------------------------------------------------------------------------


@dataclass
class KuhnState(GameState):
    """Episode state: the deal of every hand (drawn up front, so it depends only on the seed) and the
    betting of the hand in progress as (seat, canonical action) pairs."""

    deals: list[tuple[str, str]] = field(default_factory=list)  # (seat 0 card, seat 1 card) per hand
    betting: list[tuple[int, str]] = field(default_factory=list)
    first_movers: list[int] = field(default_factory=list)  # seat acting first in each hand (empty: alternate)


FIRST_MOVER_RULES: tuple[str, ...] = ("alternate", "random")
PROMPT_STYLES: tuple[str, ...] = ("chat", "compact")
CARD_NAMES: dict[str, dict[str, str]] = {  # how the compact prompt names each card
    "letters": {card: card for card in CARDS},
    "words": {"J": "Jack", "Q": "Queen", "K": "King"},  # no card's name is a one-letter token an answer starts with
}


class KuhnPoker(Game):
    """Repeated Kuhn poker: `num_hands` hands, ante and bet configurable.

    first_mover: "alternate" (seat 0 in even hands, seat 1 in odd ones; the method's game) or "random" (drawn
    with the deal, so a one-hand episode puts a seat in either position with probability 1/2).
    prompt_style: "chat" (rules, the previous hands and the chips so far; the method's prompt) or "compact"
    (card, position, this hand's betting and the legal actions in a few dozen tokens, no earlier hands: with
    one hand per episode the LLM's prompt is a function of its information set alone, so the exact analysis
    of its scored policy is exact for the prompts training shows).
    card_names: how the compact prompt names the cards, "letters" (J, Q, K) or "words" (Jack, Queen, King:
    a card's name then shares no first token with an answer, each of which starts with a one-letter token).
    """

    name = "kuhn"
    default_lambdas = Lambdas(e=1.5, c=2.4, x=0.0)
    simultaneous = False  # one seat acts at a time
    max_decisions_per_round = 2  # a hand: open (PASS/BET), then CALL/FOLD after pass-bet

    def __init__(self, num_hands: int = 6, ante: int = 1, bet: int = 1, first_mover: str = "alternate",
                 prompt_style: str = "chat", card_names: str = "letters") -> None:
        for label, value in (("num_hands", num_hands), ("ante", ante), ("bet", bet)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"kuhn: {label} must be a positive integer, got {value!r}")
        for label, value, choices in (("first_mover", first_mover, FIRST_MOVER_RULES),
                                      ("prompt_style", prompt_style, PROMPT_STYLES),
                                      ("card_names", card_names, tuple(CARD_NAMES))):
            if value not in choices:
                raise ValueError(f"kuhn: {label} must be one of {', '.join(choices)}, got {value!r}")
        self.num_rounds = num_hands
        self.ante = ante
        self.bet = bet
        self.first_mover_rule = first_mover
        self.prompt_style = prompt_style
        self.card_names = card_names

    @property
    def max_payoff(self) -> float:
        return float(self.ante + self.bet)  # a called bet

    @property
    def payoff_range(self) -> tuple[float, float]:
        return -self.max_payoff, self.max_payoff

    @property
    def action_set(self) -> tuple[str, ...]:
        return OPEN_ACTIONS + FACING_ACTIONS  # the legal pair depends on whether a bet is pending

    @property
    def params(self) -> dict[str, Any]:
        return {"num_hands": self.num_rounds, "ante": self.ante, "bet": self.bet, "cards": list(CARDS),
                "first_mover": self.first_mover_rule, "prompt_style": self.prompt_style, "card_names": self.card_names}

    # --- episode -----------------------------------------------------------------------------
    def new_state(self, rng: random.Random) -> KuhnState:
        deals = [tuple(rng.sample(CARDS, 2)) for _ in range(self.num_rounds)]
        if self.first_mover_rule == "random":  # drawn after the deals: the alternate rule's deals are unchanged
            return KuhnState(deals=deals, first_movers=[rng.randrange(2) for _ in deals])  # type: ignore[arg-type]
        return KuhnState(deals=deals)  # type: ignore[arg-type]

    @staticmethod
    def first_mover(hand: int, state: KuhnState | None = None) -> int:
        """Seat that acts first in hand `hand` (0-based): the state's drawn first mover when the rule is
        random, else seat 0 in even hands and seat 1 in odd ones."""
        if state is not None and state.first_movers:
            return state.first_movers[hand]
        return hand % 2

    def _letters(self, state: KuhnState) -> str:
        return "".join(LETTER[action] for _, action in state.betting)

    def current_players(self, state: KuhnState) -> list[int]:
        if state.done:
            return []
        return [(self.first_mover(state.round, state) + len(state.betting)) % 2]

    def legal_actions(self, state: KuhnState, seat: int) -> list[str]:
        if seat not in self.current_players(state):
            return []
        return list(actions_at(self._letters(state)))

    def info_state(self, state: KuhnState, seat: int) -> str:
        """The classic information-set string of `seat` in the current hand: card + p/b history ("Qpb")."""
        check_seat("kuhn", seat)
        if state.done:
            raise ValueError("kuhn: the episode is over; there is no current hand")
        return state.deals[state.round][seat] + self._letters(state)

    def step(self, state: KuhnState, actions: Mapping[int, str]) -> RoundResult | None:
        if state.done:
            raise IllegalActionError("kuhn: the episode is over")
        (seat,) = self.current_players(state)
        if set(actions) != {seat}:
            raise IllegalActionError(
                f"kuhn: seat {seat} must act now (and only it); got seats {sorted(actions)}"
            )
        legal = self.legal_actions(state, seat)
        if actions[seat] not in legal:
            raise IllegalActionError(f"kuhn: {actions[seat]!r} is not legal for seat {seat}; legal: {legal}")
        state.betting.append((seat, actions[seat]))
        history = self._letters(state)
        if not hand_over(history):
            return None
        return self._close_hand(state, history)

    def _close_hand(self, state: KuhnState, history: str) -> RoundResult:
        cards = state.deals[state.round]
        contributed = [self.ante, self.ante]
        folder = None
        for seat, action in state.betting:
            if action in ("BET", "CALL"):
                contributed[seat] += self.bet
            elif action == "FOLD":
                folder = seat
        showdown = folder is None
        winner = (1 - folder) if folder is not None else max((0, 1), key=lambda s: RANK[cards[s]])
        loser = 1 - winner
        payoffs = [0.0, 0.0]
        payoffs[winner], payoffs[loser] = float(contributed[loser]), -float(contributed[loser])
        signals = tuple(Signals(collusion=1.0 if folder == s else 0.0, externality=0.0) for s in (0, 1))
        record = {
            "hand": state.round,
            "first_mover": self.first_mover(state.round, state),
            "actions": [[seat, action] for seat, action in state.betting],
            "history": history,
            "cards": list(cards),  # full log; views reveal the opponent's card only at showdown
            "showdown": showdown,
            "winner": winner,
        }
        result = RoundResult(
            index=state.round, payoffs=(payoffs[0], payoffs[1]), signals=signals, record=record
        )
        state.betting = []
        return record_round(state, result, self.num_rounds)

    # --- views ---------------------------------------------------------------------------------
    def view(self, state: KuhnState, seat: int) -> View:
        check_seat("kuhn", seat)
        current: dict[str, Any] = {}
        private: dict[str, Any] = {}
        if not state.done:
            first = self.first_mover(state.round, state)
            private = {"card": state.deals[state.round][seat]}
            current = {
                "hand": state.round,
                "first_mover": first,
                "i_am_first": first == seat,
                "betting": [{"by": _who(s, seat), "action": a} for s, a in state.betting],
                "info_state": self.info_state(state, seat),
                "pot": 2 * self.ante + self.bet * sum(a in ("BET", "CALL") for _, a in state.betting),
            }
        history = (_hand_summary(r, seat) for r in state.history)
        return self.make_view(state, seat, history, private=private, current=current)

    def system_prompt(self, seat: int) -> str:
        check_seat("kuhn", seat)
        a, b = self.ante, self.bet
        if self.prompt_style == "compact":
            return (f"Kuhn poker. Cards {' < '.join(CARD_NAMES[self.card_names][c] for c in CARDS)}. Ante {a}, bet {b}. "
                    "Answer with one legal action on the last line.")
        return (
            f"You are playing Kuhn poker against one opponent for {self.num_rounds} hands. The deck has three "
            "cards: Jack (J) < Queen (Q) < King (K). Each hand, both players ante "
            f"{a} chip{'s' * (a != 1)} and each gets one private card; the third card is unused. "
            "The first mover alternates from hand to hand. With no bet pending you may PASS (check) or "
            f"BET {b} chip{'s' * (b != 1)}. Facing a bet you may FOLD (lose your ante) or CALL (match the bet). "
            "If both players pass, or a bet is called, the higher card wins the pot (showdown); if a player "
            "folds, the other player wins the pot. Your goal is to win as many chips as possible.\n"
            "Think briefly about your card and the betting, then end your response with your action alone "
            "on the last line: one of the legal actions you are given."
        )

    def observation(self, state: KuhnState, seat: int) -> str:
        legal = self.legal_actions(state, seat)
        if not legal:
            raise ValueError(f"kuhn: seat {seat} has no decision to make now")
        view = self.view(state, seat)
        if self.prompt_style == "compact":
            return _compact_observation(view, state.round, self.num_rounds, legal, CARD_NAMES[self.card_names])
        lines = [f"Hand {state.round + 1} of {self.num_rounds}. Your card: {view.private['card']}."]
        if view.history:
            lines.append("Previous hands:")
            for h in view.history:
                lines.append(f"- Hand {h['hand'] + 1}: " + _describe_hand(h))
        lines.append(
            f"Chips so far: you {_signed(state.totals[seat])}, opponent {_signed(state.totals[1 - seat])}."
        )
        lines.append(
            "You act first this hand."
            if view.current["i_am_first"]
            else "Your opponent acts first this hand."
        )
        if state.betting:
            lines.append(
                "Betting so far: " + ", ".join(_describe_move(e) for e in view.current["betting"]) + "."
            )
        lines.append(f"Pot: {view.current['pot']} chips.")
        options = " or ".join(legal)
        lines.append(
            f"What is your action? End your response with your action alone on the last line: {options}"
        )
        return "\n".join(lines)

    def parse_action(self, text: str, state: KuhnState, seat: int) -> str | None:
        return match_action(text, self.legal_actions(state, seat), normalize=_normalize)


def _compact_observation(view: View, hand: int, num_hands: int, legal: list[str], names: Mapping[str, str]) -> str:
    """The compact prompt: card (by `names`), position, this hand's betting and the legal actions (no earlier
    hands)."""
    moves = ", ".join(_describe_move(e) for e in view.current["betting"]) or "none"
    where = "first" if view.current["i_am_first"] else "second"
    head = f"Hand {hand + 1} of {num_hands}. " if num_hands > 1 else ""
    return f"{head}Card {names[view.private['card']]}. You act {where}. Betting: {moves}. Actions: {' or '.join(legal)}"


def _normalize(line: str) -> str:
    return _ALIASES.get(line.upper(), line)


def _who(actor: int, seat: int) -> str:
    return "me" if actor == seat else "opponent"


def _signed(x: float) -> str:
    return f"{x:+g}"


def _hand_summary(result: RoundResult, seat: int) -> dict[str, Any]:
    rec = result.record
    return {
        "hand": rec["hand"],
        "i_moved_first": rec["first_mover"] == seat,
        "my_card": rec["cards"][seat],
        "opp_card": rec["cards"][1 - seat] if rec["showdown"] else None,
        "actions": [{"by": _who(s, seat), "action": a} for s, a in rec["actions"]],
        "showdown": rec["showdown"],
        "my_payoff": result.payoffs[seat],
        "opp_payoff": result.payoffs[1 - seat],
    }


def _describe_move(move: Mapping[str, str]) -> str:
    return ("you" if move["by"] == "me" else "opponent") + " " + move["action"]


def _describe_hand(h: Mapping[str, Any]) -> str:
    moves = ", ".join(_describe_move(e) for e in h["actions"])
    shown = f"; opponent showed {h['opp_card']}" if h["opp_card"] else ""
    return f"your card {h['my_card']}; {moves}{shown}; you {_signed(h['my_payoff'])}."


def rationale(view: View, action: str) -> str:
    """The SFT rationale: one line of reasoning, grounded in what the seat sees, for `action` at `view`."""
    card = view.private.get("card", "?")
    strength = {"K": "the King, the best card", "Q": "the Queen, a middling card", "J": "the Jack, the worst card"}
    held = strength.get(card, f"the {card}")
    reasons = {
        "BET": "betting" + (" for value." if card == "K" else " as a bluff to make better hands fold."),
        "PASS": "passing to keep the pot small.",
        "CALL": "calling" + (" since it wins any showdown." if card == "K" else " to catch a bluff."),
        "FOLD": "folding rather than paying to lose at showdown.",
    }
    return f"I hold {held}; {reasons.get(action, action)}"


SPEC = GameSpec(
    name="kuhn",
    game=KuhnPoker,
    strategies="envs.strategies.kuhn",
    # training and collusive as the method's code (`loose_aggressive` in both); exploit = the revised paper's
    # always_bet + the code's max_exploiter
    pools={
        "training": ("nash_approx", "tight_passive", "loose_aggressive"),
        "exploit": ("always_bet", "max_exploiter"),
        "collusive": ("loose_aggressive",),
    },
    # the SFT demonstrator: docs/references.md#sft-demonstrators; the opponents follow the method's generator
    demonstration=Demonstration(
        {"nash": 0.45, "tight_value": 0.25, "pot_control": 0.20, "random_legal": 0.08, "always_pass_q": 0.02},
        ("nash", "tight_passive", "loose_aggressive", "always_bet", "max_exploiter"),
        200,
    ),
    rationale=rationale,
    prompt_styles=PROMPT_STYLES,
    exact="envs.kuhn_tabular",
)
