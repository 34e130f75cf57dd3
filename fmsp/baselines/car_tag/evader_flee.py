import numpy as np


class FleeDirectly:
    """Run straight away from the pursuer."""

    name = "flee_directly"
    description = "flee along the line from the pursuer to the evader"

    def __call__(self, obs):
        return np.arctan2(obs["evader_y"] - obs["pursuer_y"], obs["evader_x"] - obs["pursuer_x"])
