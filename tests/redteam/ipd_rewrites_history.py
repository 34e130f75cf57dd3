# redteam: domain=ipd side=exploiter expect=ok like=always_defect
import envs.base


class Revisionist:
    name = "revisionist"
    description = "edits the view and the game module it is given, then defects"

    def reset(self, game, seat, rng):
        game.T = 1000.0
        envs.base.record_round = lambda *args, **kwargs: None

    def act(self, view):
        view["history"].clear()
        view["legal_actions"].append("WIN")
        return "DEFECT"
