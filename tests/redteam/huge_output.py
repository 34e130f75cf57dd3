# redteam: domain=car_tag side=evader expect=protocol,invalid_action,timeout
import numpy as np


class Verbose:
    name = "verbose"
    description = "explains itself at length and returns a very detailed action"

    def __call__(self, obs):
        print("A" * 10_000_000)
        return np.zeros(1_500_000)
