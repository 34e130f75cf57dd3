"""Generous tit-for-tat: copy the opponent, but forgive a defection with probability 1/3."""


class GenerousTitForTat:
    name = "generous_tit_for_tat"
    description = "tit-for-tat that forgives a defection with probability 1/3 (seeded rng)"

    def reset(self, game, seat, rng):
        self.rng = rng

    def act(self, view):
        if not view["history"] or view["history"][-1]["opp_action"] == "COOPERATE":
            return "COOPERATE"
        return "COOPERATE" if self.rng.random() < 1 / 3 else "DEFECT"
