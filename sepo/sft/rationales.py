"""One short line of reasoning, grounded in what the seat can see, for each demonstrated action.

The SFT completions are "<rationale>\\n<ACTION>": the rationale teaches the model to read the state (the
opponent's last move, its private value or card) and the last line teaches the answer format. Rationales
depend only on the view and the chosen action, so they never contradict the action.
"""

from __future__ import annotations

from collections.abc import Callable

from envs.base import View


def _ipd(view: View, action: str) -> str:
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


def _auction(view: View, action: str) -> str:
    value, bid = view.private.get("value"), int(action)
    opp_bids = [int(h["opp_action"]) for h in view.history if "opp_action" in h]
    pattern = f" The opponent has bid {sum(opp_bids) / len(opp_bids):.1f} on average." if opp_bids else ""
    if value is None:
        return f"Bidding {bid}.{pattern}"
    surplus = max(0, value - bid)
    if surplus == 0:
        return f"My value is {value}; bidding {bid} would leave no surplus, but it may keep the opponent honest.{pattern}"
    return f"My value is {value}; a bid of {bid} leaves a surplus of {surplus} if I win.{pattern}"


def _negotiation(view: View, action: str) -> str:
    pie = view.params.get("pie", 10)
    demand = int(action)
    if not view.history:
        return f"Opening with a demand of {demand}, leaving {pie - demand} for the opponent."
    last = view.history[-1]
    opp = int(last["opp_action"])
    if int(last["my_action"]) + opp > pie:
        return f"Last round broke down ({last['my_action']} + {opp} > {pie}); demanding {demand} to reach a deal."
    if demand + opp <= pie:
        return f"Opponent demanded {opp} last round; {demand} keeps the total within {pie}, so a deal is likely."
    return f"Opponent demanded {opp} last round; pushing for {demand} to claim a larger share."


def _negotiation_multi(view: View, action: str) -> str:
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


def _kuhn(view: View, action: str) -> str:
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


RATIONALES: dict[str, Callable[[View, str], str]] = {
    "ipd": _ipd,
    "auction": _auction,
    "negotiation": _negotiation,
    "negotiation_multi": _negotiation_multi,
    "kuhn": _kuhn,
}


def rationale(game: str, view: View, action: str) -> str:
    """The one-line reasoning for `action` in `game` given the seat's `view`."""
    return RATIONALES[game](view, action)
