"""Pavlov (win-stay, lose-shift): repeat the last move after a payoff of R or T, else switch."""


class Pavlov:
    name = "pavlov"
    description = "win-stay lose-shift: keep the last move after a good payoff (>= R), switch otherwise"

    def reset(self, game, seat, rng):
        pass

    def act(self, view):
        if not view["history"]:
            return "COOPERATE"
        last = view["history"][-1]
        if last["my_payoff"] >= view["params"]["R"]:
            return last["my_action"]
        return "DEFECT" if last["my_action"] == "COOPERATE" else "COOPERATE"
