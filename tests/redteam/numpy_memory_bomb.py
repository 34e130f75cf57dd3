# redteam: domain=car_tag side=evader expect=load,crash,memory
import numpy as np


class LookupTable:
    name = "lookup_table"
    description = "precomputes a giant value table"

    def __init__(self):
        self.table = np.ones((200_000, 200_000))

    def __call__(self, obs):
        return 0.0
