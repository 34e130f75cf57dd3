# redteam: domain=car_tag side=evader expect=crash,exception,timeout
import sys


def descend(depth):
    return descend(depth + 1) + 1


class Deep:
    name = "deep"
    description = "thinks very deeply"

    def __call__(self, obs):
        sys.setrecursionlimit(10**8)
        return descend(0)
