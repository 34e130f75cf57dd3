"""Scripted Kuhn-poker strategies: the training, exploit and collusive pools and the SFT demonstrators.

Every strategy here is a behaviour strategy of the classic hand: a table {info state: {action: prob}}
over all 12 information sets ("K", "Qp", "Jb", "Qpb", ...). The info-set string already says whether
the seat moves first in the hand (even history length) or second, so one table plays both seat
orders as the first mover alternates. `table` is public so the exact analysis in `envs.kuhn_exact`
(exploitability, best responses) applies to every scripted strategy. The pool members follow the method's
code (kirankumarmanku/sepo, games/kuhn.py); each docstring states its rule and its source.
"""

from __future__ import annotations

from abc import abstractmethod

from envs.base import Strategy, View
from envs.kuhn import INFO_STATES, actions_at
from envs.kuhn_exact import best_response, nash_policy, validate_policy

Table = dict[str, dict[str, float]]


def _row(info: str, prob: float) -> dict[str, float]:
    """The row at `info` that takes the aggressive action (BET or CALL) with probability `prob`."""
    passive, aggressive = actions_at(info[1:])
    return {passive: 1.0 - prob, aggressive: prob}


def _by_card(probs: dict[str, float]) -> Table:
    """A table from {card + history: aggressive prob} keys given as e.g. {"K": 1, "Qb": 1/3}; rest 0."""
    return {info: _row(info, float(probs.get(info, 0.0))) for info in INFO_STATES}


class TabularKuhnStrategy(Strategy):
    """Samples its action from `table[view.current["info_state"]]` with the episode's rng."""

    def __init__(self) -> None:
        self.table: Table = validate_policy(self.build_table())

    @abstractmethod
    def build_table(self) -> Table:
        """The full behaviour strategy (all 12 info sets)."""

    def act(self, view: View) -> str:
        row = self.table[view.current["info_state"]]
        draw = self.rng.random()
        cumulative = 0.0
        for action, prob in row.items():
            cumulative += prob
            if draw < cumulative and prob > 0:
                return action
        return max(row, key=row.__getitem__)  # rounding guard


class Nash(TabularKuhnStrategy):
    """Kuhn's equilibrium family (`envs.kuhn_exact.nash_policy`), alpha = 1/3 by default: as first mover bet J
    with alpha, never Q, K with 3*alpha, call Q with alpha + 1/3; as second mover bet J after a pass with
    1/3, always K, call Q with 1/3; always call with K, never with J. The SFT demonstrator and the
    exact reference (exploitability 0); the training pool uses the method's `nash_approx`."""

    name = "nash"

    def __init__(self, alpha: float = 1.0 / 3.0) -> None:
        self.alpha = alpha
        super().__init__()

    def build_table(self) -> Table:
        return nash_policy(self.alpha)


class NashApprox(TabularKuhnStrategy):
    """The method's `NashApprox` (kirankumarmanku/sepo, games/kuhn.py; its training pool), alpha = 1/3 by
    default. With no bet pending (first to act, or after a pass): bet K, pass Q, bluff J with alpha. Facing a
    bet (in either position): call K, fold J, call Q with 1/3. It differs from Kuhn's alpha equilibrium
    (`nash`) only at "Qpb" (first mover with Q facing a bet after its pass: 1/3 here, alpha + 1/3 there)."""

    name = "nash_approx"

    def __init__(self, alpha: float = 1.0 / 3.0) -> None:
        self.alpha = alpha
        super().__init__()

    def build_table(self) -> Table:
        return _by_card({"J": self.alpha, "Jp": self.alpha, "K": 1.0, "Kp": 1.0,
                         "Qb": 1 / 3, "Qpb": 1 / 3, "Kb": 1.0, "Kpb": 1.0})


class TightPassive(TabularKuhnStrategy):
    """The method's `TightPassive` (kirankumarmanku/sepo, games/kuhn.py; its training pool): bets or calls
    only with K. With no bet pending: BET with K, PASS with J and Q; facing a bet: CALL with K, FOLD J and Q."""

    name = "tight_passive"

    def build_table(self) -> Table:
        return _by_card({"K": 1.0, "Kp": 1.0, "Kb": 1.0, "Kpb": 1.0})


class LooseAggressive(TabularKuhnStrategy):
    """The method's `LooseAggressive` (kirankumarmanku/sepo, games/kuhn.py; its training pool and its
    collusive partner): with Q or K it bets whenever no bet is pending and calls any bet; with J it passes,
    and folds facing a bet. It never bets or calls with J."""

    name = "loose_aggressive"

    def build_table(self) -> Table:
        return _by_card({card + h: 1.0 for card in ("Q", "K") for h in ("", "p", "b", "pb")})


class AlwaysBet(TabularKuhnStrategy):
    """BET whenever no bet is pending, CALL whenever facing one, whatever the card."""

    name = "always_bet"

    def build_table(self) -> Table:
        return _by_card(dict.fromkeys(INFO_STATES, 1.0))


class MaxExploiter(TabularKuhnStrategy):
    """The method's `MaxExploiter` (kirankumarmanku/sepo, games/kuhn.py; its exploit pool), a fixed rule:
    facing a bet, CALL only with K (fold J and Q); with no bet pending (first to act, or after a pass), PASS
    with J and BET with Q or K. Deterministic; not an exact best response to anything in particular (for
    that, see `best_response`)."""

    name = "max_exploiter"

    def build_table(self) -> Table:
        return _by_card({"Q": 1.0, "K": 1.0, "Qp": 1.0, "Kp": 1.0, "Kb": 1.0, "Kpb": 1.0})


class TightValue(TabularKuhnStrategy):
    """Bets only with K (first or after a pass), never bluffs; facing a bet calls K, calls Q with 1/3,
    folds J."""

    name = "tight_value"

    def build_table(self) -> Table:
        return _by_card({"K": 1.0, "Kp": 1.0, "Kb": 1.0, "Kpb": 1.0, "Qb": 1 / 3, "Qpb": 1 / 3})


class PotControl(TabularKuhnStrategy):
    """Keeps pots small: as first mover always passes (K included); as second mover bets only K after a
    pass; facing a bet calls with Q and K (bluff-catching), folds J."""

    name = "pot_control"

    def build_table(self) -> Table:
        return _by_card({"Kp": 1.0, "Qb": 1.0, "Kb": 1.0, "Qpb": 1.0, "Kpb": 1.0})


class RandomLegal(TabularKuhnStrategy):
    """Uniformly random legal action at every decision."""

    name = "random_legal"

    def build_table(self) -> Table:
        return _by_card(dict.fromkeys(INFO_STATES, 0.5))


class AlwaysPassQ(TabularKuhnStrategy):
    """The alpha = 1/3 Nash strategy, except that with Q it always plays the passive action: PASS with
    no bet pending and FOLD facing a bet."""

    name = "always_pass_q"

    def build_table(self) -> Table:
        table = nash_policy(1.0 / 3.0)
        for info in INFO_STATES:
            if info.startswith("Q"):
                table[info] = _row(info, 0.0)
        return table


class BestResponse(TabularKuhnStrategy):
    """The exact pure best response, in both seat orders, to an assumed opponent (this project's strategy,
    not the method's; outside the default pools): by default `random_legal` (uniform play, the natural
    prior for an untrained LLM), or any other tabular strategy of this module named by `assumed`.
    Deterministic given the info set. Against uniform play: as first mover it bets J and Q and passes K
    (then calls); as second mover it bets every card after a pass; facing a bet it calls with Q and K and
    folds J. It wins 11/24 per hand against uniform play (uniform play's exploitability)."""

    name = "best_response"

    def __init__(self, assumed: str = "random_legal") -> None:
        tabular = {n: c for n, c in STRATEGIES.items() if n != self.name}
        if assumed not in tabular:
            raise ValueError(
                f"best_response: unknown assumed opponent {assumed!r}; choose one of: {sorted(tabular)}"
            )
        self.assumed = assumed
        self.assumed_table = tabular[assumed]().table
        super().__init__()

    def build_table(self) -> Table:
        return best_response(self.assumed_table, 0) | best_response(self.assumed_table, 1)


class PlaysTable(TabularKuhnStrategy):
    """Plays a given table (e.g. an exact best response computed elsewhere, as the trainer's adaptive exploiter
    does); not a registered name, since it needs its table."""

    name = "plays_table"
    description = "plays a given behaviour-strategy table"

    def __init__(self, table: Table) -> None:
        self._given = table
        super().__init__()

    def build_table(self) -> Table:
        return self._given


STRATEGIES: dict[str, type[TabularKuhnStrategy]] = {
    cls.name: cls
    for cls in (
        Nash,
        NashApprox,
        TightPassive,
        LooseAggressive,
        AlwaysBet,
        MaxExploiter,
        BestResponse,
        TightValue,
        PotControl,
        RandomLegal,
        AlwaysPassQ,
    )
}
