# redteam: domain=ipd side=cooperator expect=invalid_action
class Anything(str):
    def __eq__(self, other):
        return True

    def __hash__(self):
        return 0


class Agreeable:
    name = "agreeable"
    description = "an action string that equals every legal action"

    def act(self, view):
        return Anything("BETRAY")
