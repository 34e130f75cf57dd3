# redteam: domain=car_tag side=evader expect=exception
class Chameleon(float):
    def __eq__(self, other):
        return True

    def __float__(self):
        raise RuntimeError("no")

    def __array__(self, *args, **kwargs):
        raise RuntimeError("no")

    def __reduce__(self):
        raise RuntimeError("no")


class Slippery:
    name = "slippery"
    description = "returns an object that claims to equal anything"

    def __call__(self, obs):
        return [Chameleon(0.0), object()]
