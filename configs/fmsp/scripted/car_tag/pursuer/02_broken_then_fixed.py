"""Deliberately buggy answer (undefined name) so that runs exercise the repair loop."""
import numpy as np


class Broken:
    name = "broken"
    description = "refers to an undefined variable"

    def __call__(self, obs):
        return np.clip(undefined_gain * obs["pursuer_heading"], -1.0, 1.0)  # noqa: F821
