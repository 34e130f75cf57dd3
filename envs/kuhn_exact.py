"""Exact analysis of the classic single Kuhn hand (ante 1, bet 1, player 0 acts first).

Tabular policies are {information set: {action: probability}} over `envs.kuhn.INFO_STATES` ("K", "Qp", "Jb",
"Qpb", ...), so the exact best response, game value and exploitability (NashConv / 2, OpenSpiel's
convention) of any such policy, an LLM's scored policy included, can be computed. Checked against OpenSpiel
to 1e-9 in the tests: uniform play is exploitable by 11/24, the Nash family by 0, with game value -1/18.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import permutations

from envs.base import check_seat
from envs.kuhn import CARDS, INFO_STATES, LETTER, RANK, actions_at, hand_over
from envs.tabular import Response

Policy = Mapping[str, Mapping[str, float]]

_DEALS: tuple[tuple[str, str], ...] = tuple(permutations(CARDS, 2))  # 6 equally likely deals


def _utility0(history: str, card0: str, card1: str) -> float:
    """Player 0's payoff at a terminal `history` of the classic hand."""
    if history == "bp":
        return 1.0
    if history == "pbp":
        return -1.0
    stake = 1.0 if history == "pp" else 2.0
    return stake if RANK[card0] > RANK[card1] else -stake


def _actor(history: str) -> int:
    return len(history) % 2


def validate_policy(policy: Policy) -> dict[str, dict[str, float]]:
    """A complete table {info state: {action: prob}}: missing info sets are uniform, missing actions 0.

    Raises ValueError for an unknown info set or action, a negative or non-finite probability, or
    probabilities that do not sum to 1 (within 1e-6).
    """
    unknown = sorted(set(policy) - set(INFO_STATES))
    if unknown:
        raise ValueError(f"kuhn policy: unknown info states {unknown}; valid: {', '.join(INFO_STATES)}")
    table: dict[str, dict[str, float]] = {}
    for info in INFO_STATES:
        legal = actions_at(info[1:])
        if info not in policy:
            table[info] = {a: 1.0 / len(legal) for a in legal}
            continue
        probs = dict(policy[info])
        bad = sorted(set(probs) - set(legal))
        if bad:
            raise ValueError(f"kuhn policy: actions {bad} are not legal at {info!r}; legal: {list(legal)}")
        row = {a: float(probs.get(a, 0.0)) for a in legal}
        if any(not math.isfinite(p) or p < 0 for p in row.values()) or abs(sum(row.values()) - 1.0) > 1e-6:
            raise ValueError(f"kuhn policy: probabilities at {info!r} must be >= 0 and sum to 1, got {row}")
        table[info] = row
    return table


def game_value(policy0: Policy, policy1: Policy) -> float:
    """Expected payoff of player 0 (first to act) per hand when it plays `policy0` and player 1 `policy1`."""
    tables = (validate_policy(policy0), validate_policy(policy1))

    def value(history: str, cards: tuple[str, str]) -> float:
        if hand_over(history):
            return _utility0(history, *cards)
        player = _actor(history)
        row = tables[player][cards[player] + history]
        return sum(p * value(history + LETTER[a], cards) for a, p in row.items() if p > 0)

    return sum(value("", deal) for deal in _DEALS) / len(_DEALS)


def fold_probabilities(policy0: Policy, policy1: Policy) -> tuple[float, float]:
    """(P(player 0 folds), P(player 1 folds)) per hand when player 0 (first to act) plays `policy0` and
    player 1 `policy1`: the chance of the terminal histories "pbp" (player 0 folds) and "bp" (player 1 folds)."""
    tables = (validate_policy(policy0), validate_policy(policy1))
    folds = [0.0, 0.0]

    def walk(history: str, cards: tuple[str, str], reach: float) -> None:
        if hand_over(history):
            if history in ("bp", "pbp"):
                folds[_actor(history) ^ 1] += reach  # the last actor (who folded) is the one before the end
            return
        player = _actor(history)
        for a, p in tables[player][cards[player] + history].items():
            if p > 0:
                walk(history + LETTER[a], cards, reach * p)

    for deal in _DEALS:
        walk("", deal, 1.0 / len(_DEALS))
    return folds[0], folds[1]


def _best_response(
    table: Mapping[str, Mapping[str, float]], player: int
) -> tuple[float, dict[str, dict[str, float]]]:
    """Value and a pure best-response table for `player` against `table` playing the other seat.

    Recursion per own card over the public history, carrying the chance-and-opponent reach of each
    hidden opponent card, so every max is taken over a whole information set. Ties go to the first
    legal action in (PASS, BET) / (FOLD, CALL) order.
    """
    sign = 1.0 if player == 0 else -1.0
    response: dict[str, dict[str, float]] = {}

    def value(history: str, card: str, reach: dict[str, float]) -> float:
        if hand_over(history):
            return sum(
                w * sign * (_utility0(history, card, c) if player == 0 else _utility0(history, c, card))
                for c, w in reach.items()
            )
        legal = actions_at(history)
        if _actor(history) == player:
            values = [value(history + LETTER[a], card, reach) for a in legal]
            best = max(range(len(legal)), key=lambda i: (values[i], -i))
            response[card + history] = {a: float(i == best) for i, a in enumerate(legal)}
            return values[best]
        return sum(
            value(history + LETTER[a], card, {c: w * table[c + history][a] for c, w in reach.items()})
            for a in legal
        )

    total = 0.0
    for card in CARDS:
        reach = {c: 1.0 / len(_DEALS) for c in CARDS if c != card}
        total += value("", card, reach)
    return total, response


def best_response_value(policy: Policy, player: int) -> float:
    """Expected payoff per hand of a best response in seat `player` against `policy` in the other seat."""
    check_seat("kuhn", player)
    return _best_response(validate_policy(policy), player)[0]


def best_response(policy: Policy, player: int) -> dict[str, dict[str, float]]:
    """A pure best response for `player` against `policy`, as a table over `player`'s info sets."""
    check_seat("kuhn", player)
    return _best_response(validate_policy(policy), player)[1]


def exploitability(policy: Policy) -> float:
    """OpenSpiel's exploitability of `policy` playing both seats: NashConv / 2, in chips per hand.

    The game is zero-sum, so NashConv is the sum of the two best-response values.
    """
    return both_responses(policy).value


def both_responses(policy: Policy) -> Response:
    """The pure best response in both positions to `policy` (one table over all 12 information sets) and its
    value, the exploitability (NashConv / 2)."""
    table = validate_policy(policy)
    (value0, moves0), (value1, moves1) = _best_response(table, 0), _best_response(table, 1)
    return Response(moves=moves0 | moves1, value=(value0 + value1) / 2.0)


def expected_hand(policy: Policy, opponent: Policy) -> tuple[float, float]:
    """(expected payoff, fold probability) of `policy` per hand against `opponent`, positions equally likely (the
    random first-mover rule, and the alternating rule over an even number of hands)."""
    payoff = 0.5 * (game_value(policy, opponent) - game_value(opponent, policy))
    folds_first = fold_probabilities(policy, opponent)[0]
    folds_second = fold_probabilities(opponent, policy)[1]
    return payoff, 0.5 * (folds_first + folds_second)


# the Nash family's card-conditioned rates at alpha = 1/3 (marks on the Kuhn plot of `sepo eval`):
# first player bets J 1/3, Q 0, K 1; calls with J 0, Q 2/3 (alpha + 1/3); second player calls Q 1/3.
NASH_RATES = {"bet_J": 1 / 3, "bet_Q": 0.0, "bet_K": 1.0, "call_J": 0.0, "call_Q": 1 / 3, "call_K": 1.0}


def nash_policy(alpha: float = 1.0 / 3.0) -> dict[str, dict[str, float]]:
    """The Nash equilibrium family of the classic hand, alpha in [0, 1/3] (Kuhn 1950).

    Player 0 bets J with alpha, never bets Q first, bets K with 3*alpha, calls with Q (after pass-bet)
    with alpha + 1/3, always calls with K, never with J. Player 1 bets J after a pass with 1/3, never
    bets Q, always bets K; calls a bet with Q with 1/3, always with K, never with J.
    """
    if not (isinstance(alpha, int | float) and 0.0 <= alpha <= 1.0 / 3.0 + 1e-12):
        raise ValueError(f"kuhn nash_policy: alpha must be in [0, 1/3], got {alpha!r}")
    alpha = min(float(alpha), 1.0 / 3.0)

    def bet(p: float) -> dict[str, float]:
        return {"PASS": 1.0 - p, "BET": p}

    def call(p: float) -> dict[str, float]:
        return {"FOLD": 1.0 - p, "CALL": p}

    third = 1.0 / 3.0
    return {
        "J": bet(alpha), "Q": bet(0.0), "K": bet(3.0 * alpha),
        "Jpb": call(0.0), "Qpb": call(alpha + third), "Kpb": call(1.0),
        "Jp": bet(third), "Qp": bet(0.0), "Kp": bet(1.0),
        "Jb": call(0.0), "Qb": call(third), "Kb": call(1.0),
    }  # fmt: skip

