"""Grim trigger that also defends the last round: cooperate until defected against, then defect forever."""


class ProtectedGrudger:
    name = "protected_grudger"
    description = "cooperate until the first defection, then defect forever; defect in the final round"

    def reset(self, game, seat, rng):
        self.betrayed = False

    def act(self, view):
        self.betrayed = self.betrayed or any(h["opp_action"] == "DEFECT" for h in view["history"][-1:])
        if self.betrayed or view["round"] == view["num_rounds"] - 1:
            return "DEFECT"
        return "COOPERATE"
