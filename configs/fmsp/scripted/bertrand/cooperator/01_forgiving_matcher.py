"""Price matching that forgives: match the rival's last price, but return to the top price after two rounds in
which both charged the same."""


class ForgivingMatcher:
    name = "forgiving_matcher"
    description = "match the rival's last price; after two matched rounds, try the top price again"

    def act(self, view):
        history = view["history"]
        top = str(view["params"]["num_prices"])
        if not history:
            return top
        matched = len(history) >= 2 and all(h["my_action"] == h["opp_action"] for h in history[-2:])
        return top if matched else history[-1]["opp_action"]
