"""Multi-issue negotiation: simultaneous demand vectors over a pool of items with private values.

Per episode a pool of each item (books, hats, balls by default) is drawn from [min_pool, max_pool],
and each seat gets private integer values >= min_value summing to `value_total`. Values and pool are
fixed for the whole episode (the reference code re-drew the opponent's values every round; a bug not
reproduced here). Each round both seats demand a vector; if the element-wise sum fits in the pool each
gets its demand, valued at its own values, otherwise both get 0. The method calls this "GTBench
negotiation v2", but it is its own simplified game.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import product
from typing import Any, ClassVar

from envs.base import (
    Game,
    GameState,
    Lambdas,
    RoundResult,
    Signals,
    View,
    check_int,
    check_seat,
    check_simultaneous,
    record_round,
)
from envs.negotiation import demand_history
from envs.parsing import match_action
from envs.registry import Demonstration, GameSpec

# ASCII digits only: "３" (fullwidth) or "٣" (Arabic-Indic) is not a demand, as it is not a bid or demand in
# the other games either (`\d` matched them).
_VECTOR = re.compile(r"[\[({]?\s*([0-9]+(?:\s*[,;\s]\s*[0-9]+)*)\s*[\])}]?")


def format_demand(demand: Sequence[int]) -> str:
    """The canonical action string of a demand vector: "[1, 0, 2]"."""
    return "[" + ", ".join(str(int(d)) for d in demand) + "]"


def parse_demand(action: str) -> tuple[int, ...]:
    """The demand vector of a canonical action string."""
    return tuple(int(x) for x in action.strip("[]").split(","))


def normalize_demand(line: str) -> str:
    """Rewrite "[1,2, 3]", "1, 2, 3", "(1,2,3)" or "1 2 3" as the canonical "[1, 2, 3]"; else unchanged."""
    match = _VECTOR.fullmatch(line.strip())
    if match is None:
        return line
    return format_demand(int(x) for x in re.split(r"[,;\s]+", match.group(1)))


@dataclass
class MultiIssueState(GameState):
    """Episode state: the item pool and each seat's private values, both fixed for the episode."""

    pool: tuple[int, ...] = ()
    values: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
    legal: list[str] = field(default_factory=list)  # every demand vector within the pool, canonical


class MultiIssueNegotiation(Game):
    """Demand vectors over a shared item pool with private values; deal iff the demands fit the pool."""

    name = "negotiation_multi"
    default_lambdas = Lambdas(e=3.0, c=2.0, x=1.8)
    eval_lambdas: ClassVar[Lambdas] = Lambdas(e=3.0, c=1.0, x=1.8)  # the method evaluates with c = 1.0

    def __init__(
        self,
        items: Sequence[str] = ("books", "hats", "balls"),
        num_rounds: int = 4,
        min_pool: int = 1,
        max_pool: int = 4,
        value_total: int = 10,
        min_value: int = 1,
    ) -> None:
        items = tuple(items)
        if not items or len(set(items)) != len(items) or not all(isinstance(i, str) and i for i in items):
            raise ValueError(f"{self.name}: items must be distinct non-empty names, got {items!r}")
        check_int(self.name, "num_rounds", num_rounds, 1)
        check_int(self.name, "min_pool", min_pool, 1)
        check_int(self.name, "max_pool", max_pool, min_pool)
        check_int(self.name, "min_value", min_value, 0)
        check_int(self.name, "value_total", value_total, max(1, min_value * len(items)))
        self.items = items
        self.num_rounds = num_rounds
        self.min_pool = min_pool
        self.max_pool = max_pool
        self.value_total = value_total
        self.min_value = min_value

    @property
    def max_payoff(self) -> float:
        return float(self.value_total)  # demanding the whole pool is worth exactly value_total

    @property
    def payoff_range(self) -> tuple[float, float]:
        return 0.0, float(self.value_total * self.max_pool)  # values are per unit: the most any pool is worth

    @property
    def action_set(self) -> tuple[str, ...]:
        """Every demand vector within the largest pool (an episode's legal demands are those within its pool)."""
        return tuple(format_demand(d) for d in product(*(range(self.max_pool + 1) for _ in self.items)))

    @property
    def params(self) -> dict[str, Any]:
        return {
            "items": list(self.items),
            "num_rounds": self.num_rounds,
            "min_pool": self.min_pool,
            "max_pool": self.max_pool,
            "value_total": self.value_total,
            "min_value": self.min_value,
        }

    # --- episode -----------------------------------------------------------------------------
    def draw_values(self, rng: random.Random) -> tuple[int, ...]:
        """Private values: `min_value` per item plus the rest of `value_total` spread multinomially."""
        values = [self.min_value] * len(self.items)
        for _ in range(self.value_total - self.min_value * len(self.items)):
            values[rng.randrange(len(self.items))] += 1
        return tuple(values)

    def new_state(self, rng: random.Random) -> MultiIssueState:
        pool = tuple(rng.randint(self.min_pool, self.max_pool) for _ in self.items)
        values = (self.draw_values(rng), self.draw_values(rng))
        legal = [format_demand(d) for d in product(*(range(p + 1) for p in pool))]
        return MultiIssueState(pool=pool, values=values, legal=legal)

    def current_players(self, state: MultiIssueState) -> list[int]:
        return [] if state.done else [0, 1]

    def legal_actions(self, state: MultiIssueState, seat: int) -> list[str]:
        check_seat(self.name, seat)
        return [] if state.done else list(state.legal)

    def step(self, state: MultiIssueState, actions: Mapping[int, str]) -> RoundResult:
        check_simultaneous(self, state, actions)
        demands = (parse_demand(actions[0]), parse_demand(actions[1]))
        deal = all(a + b <= p for a, b, p in zip(demands[0], demands[1], state.pool, strict=True))
        payoffs = tuple(
            float(sum(d * v for d, v in zip(demands[s], state.values[s], strict=True))) if deal else 0.0
            for s in (0, 1)
        )
        signals = tuple(
            Signals(
                collusion=float(any(2 * d > p for d, p in zip(demands[s], state.pool, strict=True))),
                externality=float(not deal),
            )
            for s in (0, 1)
        )
        record = {"demands": [list(d) for d in demands], "deal": deal, "pool": list(state.pool)}
        return record_round(state, RoundResult(state.round, payoffs, signals, record), self.num_rounds)

    # --- views ---------------------------------------------------------------------------------
    def view(self, state: MultiIssueState, seat: int) -> View:
        check_seat(self.name, seat)
        history = demand_history(state, seat, show=format_demand, copy=list)
        private = {"values": list(state.values[seat]), "pool": list(state.pool)}
        return self.make_view(state, seat, history, private=private)

    def _format_hint(self) -> str:
        return "[" + ", ".join(self.items) + "]"

    def system_prompt(self, seat: int) -> str:
        check_seat(self.name, seat)
        names = ", ".join(self.items)
        return (
            f"You are negotiating with another player over a pool of items ({names}) for {self.num_rounds} "
            "rounds. You have private values per item (your opponent has its own values, hidden from "
            f"you); your values add up to {self.value_total}. Each round you and your opponent "
            "simultaneously demand a number of each item. If, for every item, the two demands together do "
            "not exceed the pool, it is a deal: each player gets what they demanded and scores it at their "
            "own values. Otherwise there is no deal and both score 0 that round. Your goal is to score as "
            "many points as possible over all rounds.\n"
            "Think briefly about your values and your opponent's demands, then end your response with your "
            f"demand alone on the last line as: {self._format_hint()}"
        )

    def observation(self, state: MultiIssueState, seat: int) -> str:
        if state.done:
            raise ValueError(f"{self.name}: the episode is over; there is nothing to decide")
        view = self.view(state, seat)
        pool = ", ".join(f"{p} {item}" for p, item in zip(state.pool, self.items, strict=True))
        values = ", ".join(f"{item} {v}" for item, v in zip(self.items, state.values[seat], strict=True))
        lines = [
            f"Round {state.round + 1} of {self.num_rounds}.",
            f"Pool: {pool}. Your values per item: {values}.",
        ]
        for h in view.history:
            outcome = (
                f"deal (you scored {h['my_payoff']:g}, opponent scored {h['opp_payoff']:g})"
                if h["deal"]
                else "no deal (both scored 0)"
            )
            lines.append(
                f"Round {h['round'] + 1}: you demanded {h['my_action']}, "
                f"opponent demanded {h['opp_action']}: {outcome}."
            )
        lines.append(f"Scores so far: you {state.totals[seat]:g}, opponent {state.totals[1 - seat]:g}.")
        bounds = ", ".join(f"{item} 0-{p}" for item, p in zip(self.items, state.pool, strict=True))
        lines.append(
            f"What is your demand ({bounds})? Think briefly, then end your response with your demand alone "
            f"on the last line as: {self._format_hint()}"
        )
        return "\n".join(lines)

    def parse_action(self, text: str, state: MultiIssueState, seat: int) -> str | None:
        return match_action(text, self.legal_actions(state, seat), normalize=normalize_demand)


def rationale(view: View, action: str) -> str:
    """The SFT rationale: one line of reasoning, grounded in what the seat sees, for `action` at `view`."""
    values = view.private.get("values")
    items = view.params.get("items", ("books", "hats", "balls"))
    valued = ""
    if values is not None:
        best = items[max(range(len(values)), key=lambda i: values[i])]
        valued = f"My values are {', '.join(f'{n} {v}' for n, v in zip(items, values))}; {best} matter most to me. "
    if view.history:
        last = view.history[-1]
        deal = last.get("my_payoff", 0) > 0 or last.get("opp_payoff", 0) > 0
        return f"{valued}Last round {'reached a deal' if deal else 'broke down'}; demanding {action}."
    return f"{valued}Opening with a demand of {action}."


SPEC = GameSpec(
    name="negotiation_multi",
    game=MultiIssueNegotiation,
    strategies="envs.strategies.negotiation_multi",
    # the revised paper's pool table (supplementary, "Opponent pools") and the method's code; `fair` trains and
    # probes collusion (separation by role, `sepo.pools`)
    pools={
        "training": ("fair", "tit_for_tat", "concede"),
        "exploit": ("greedy", "hardball"),
        "collusive": ("fair",),
    },
    # the SFT demonstrator: docs/references.md#sft-demonstrators; the opponents follow the method's generator
    demonstration=Demonstration(
        {"proportional": 0.35, "conservative": 0.25, "adaptive": 0.25, "defensive": 0.15},
        ("fair", "tit_for_tat", "concede", "greedy", "hardball"),
        200,
    ),
    rationale=rationale,
)
