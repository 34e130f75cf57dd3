"""Charge the competitive price: nothing below it to undercut, so no rival can take the market from it."""


class CompetitiveFloor:
    name = "competitive_floor"
    description = "always the lowest price that covers the cost"

    def act(self, view):
        return str(max(1, int(view["params"]["cost"])))
