# redteam: domain=car_tag side=evader expect=ok like=still
import numpy as np


class NotANumber:
    name = "not_a_number"
    description = "returns NaN and infinities (the harness counts them and plays 0)"

    def __call__(self, obs):
        out = np.full(len(obs["active"]), np.nan)
        out[::2] = np.inf
        return out
