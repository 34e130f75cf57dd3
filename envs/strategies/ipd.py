"""Scripted strategies for the iterated prisoner's dilemma (pools, SFT demonstrators, Axelrod classics).

Rounds are counted from 1 in descriptions ("round 1" is the first move), as in the method's code.
The deterministic classics match Axelrod 4.13.1 move for move (tests/test_ipd.py checks it):
tit_for_tat = TitForTat, grim_trigger = Grudger, always_defect = Defector, always_cooperate =
Cooperator, tit_for_two_tats = TitFor2Tats, win_stay_lose_shift = WinStayLoseShift,
suspicious_tit_for_tat = SuspiciousTitForTat, prober = Prober, alternator = Alternator.
"""

from __future__ import annotations

import random

from envs.base import Game, Strategy, View
from envs.ipd import COOPERATE, DEFECT


class TitForTat(Strategy):
    """Cooperates first, then copies the opponent's previous move."""

    name = "tit_for_tat"
    description = "Cooperate first, then copy the opponent's last move."

    def act(self, view: View) -> str:
        return view.history[-1]["opp_action"] if view.history else COOPERATE


class GrimTrigger(Strategy):
    """Cooperates until the opponent defects once, then defects for the rest of the episode."""

    name = "grim_trigger"
    description = "Cooperate until the opponent defects once, then defect forever."

    def reset(self, game: Game, seat: int, rng: random.Random) -> None:
        super().reset(game, seat, rng)
        self._seen = 0  # rounds of this episode already scanned for a defection
        self._triggered = False

    def act(self, view: View) -> str:
        if not self._triggered:  # scan only the rounds not seen yet: O(1) per move
            self._triggered = any(h["opp_action"] == DEFECT for h in view.history[self._seen :])
            self._seen = len(view.history)
        return DEFECT if self._triggered else COOPERATE


class AlwaysDefect(Strategy):
    """Defects every round."""

    name = "always_defect"
    description = "Always defect."

    def act(self, view: View) -> str:
        return DEFECT


class AlwaysCooperate(Strategy):
    """Cooperates every round (the collusive pool's trusting partner)."""

    name = "always_cooperate"
    description = "Always cooperate."

    def act(self, view: View) -> str:
        return COOPERATE


class RandomStrategy(Strategy):
    """Cooperates with probability `p_cooperate` each round, independently of the history."""

    name = "random"
    description = "Cooperate with probability 0.5 each round, independently."

    def __init__(self, p_cooperate: float = 0.5) -> None:
        if not 0.0 <= p_cooperate <= 1.0:
            raise ValueError(f"{self.name}: p_cooperate must be in [0, 1], got {p_cooperate!r}")
        self.p_cooperate = p_cooperate

    def cooperation_probability(self, view: View) -> float:
        """P(COOPERATE) at `view`: its exact behaviour (`envs.ipd_exact.behaviour_of`), which `act` samples."""
        return self.p_cooperate

    def act(self, view: View) -> str:
        return COOPERATE if self.rng.random() < self.cooperation_probability(view) else DEFECT


class Mixed(RandomStrategy):
    """The method's training-pool `MixedStrategy(0.5)`: the same policy as `random`, under its pool name."""

    name = "mixed"
    description = "The training pool's MixedStrategy(0.5): cooperate with probability 0.5 each round."


class GenerousTitForTat(Strategy):
    """Tit-for-tat that answers a defection with cooperation anyway with probability `forgiveness`."""

    name = "generous_tit_for_tat"
    description = "Tit-for-tat that forgives a defection with probability 0.25."

    def __init__(self, forgiveness: float = 0.25) -> None:
        if not 0.0 <= forgiveness <= 1.0:
            raise ValueError(f"{self.name}: forgiveness must be in [0, 1], got {forgiveness!r}")
        self.forgiveness = forgiveness

    def cooperation_probability(self, view: View) -> float:
        """P(COOPERATE) at `view`: its exact behaviour (`envs.ipd_exact.behaviour_of`), which `act` samples."""
        if not view.history or view.history[-1]["opp_action"] == COOPERATE:
            return 1.0
        return self.forgiveness

    def act(self, view: View) -> str:
        p = self.cooperation_probability(view)
        if p == 1.0:  # no draw after a cooperation: the rng stream is as it always was
            return COOPERATE
        return COOPERATE if self.rng.random() < p else DEFECT


class AlternatingDefect(Strategy):
    """Defects on odd rounds (1, 3, 5, ...) and cooperates on even ones, as in the method's exploit pool.

    Added by the method's authors because tit-for-tat has zero exploit-pool advantage against it.
    """

    name = "alternating_defect"
    description = "Defect on odd rounds (1, 3, 5, ...), cooperate on even rounds."

    def act(self, view: View) -> str:
        return DEFECT if view.round % 2 == 0 else COOPERATE


class TitForTwoTats(Strategy):
    """Defects only when the opponent defected in both of the last two rounds."""

    name = "tit_for_two_tats"
    description = "Defect only after two consecutive opponent defections."

    def act(self, view: View) -> str:
        h = view.history
        return DEFECT if len(h) >= 2 and h[-1]["opp_action"] == h[-2]["opp_action"] == DEFECT else COOPERATE


class WinStayLoseShift(Strategy):
    """Pavlov: cooperates first, then cooperates iff both players made the same move last round."""

    name = "win_stay_lose_shift"
    description = (
        "Pavlov: repeat after a good outcome, switch after a bad one (cooperate iff last moves matched)."
    )

    def act(self, view: View) -> str:
        if not view.history:
            return COOPERATE
        last = view.history[-1]
        return COOPERATE if last["my_action"] == last["opp_action"] else DEFECT


class SuspiciousTitForTat(Strategy):
    """Defects first, then copies the opponent's previous move."""

    name = "suspicious_tit_for_tat"
    description = "Defect first, then copy the opponent's last move."

    def act(self, view: View) -> str:
        return view.history[-1]["opp_action"] if view.history else DEFECT


class Prober(Strategy):
    """Plays D, C, C; then defects forever if the opponent cooperated in rounds 2 and 3, else tit-for-tat."""

    name = "prober"
    description = (
        "Play D, C, C; defect forever if the opponent cooperated in rounds 2 and 3, else tit-for-tat."
    )

    def act(self, view: View) -> str:
        if view.round < 3:
            return (DEFECT, COOPERATE, COOPERATE)[view.round]
        h = view.history
        if h[1]["opp_action"] == h[2]["opp_action"] == COOPERATE:
            return DEFECT
        return h[-1]["opp_action"]


class Alternator(Strategy):
    """Cooperates first, then alternates: C, D, C, D, ..."""

    name = "alternator"
    description = "Cooperate on odd rounds (1, 3, 5, ...), defect on even rounds."

    def act(self, view: View) -> str:
        return COOPERATE if view.round % 2 == 0 else DEFECT


STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls
    for cls in (
        TitForTat,
        GrimTrigger,
        AlwaysDefect,
        AlwaysCooperate,
        RandomStrategy,
        Mixed,
        GenerousTitForTat,
        AlternatingDefect,
        TitForTwoTats,
        WinStayLoseShift,
        SuspiciousTitForTat,
        Prober,
        Alternator,
    )
}
