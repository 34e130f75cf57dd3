import numpy as np


class PurePursuit:
    """Turn as hard as allowed toward the evader's current position."""

    name = "pure_pursuit"
    description = "pure pursuit: steer the heading straight at the evader's current position"

    def __call__(self, obs):
        bearing = np.arctan2(obs["evader_y"] - obs["pursuer_y"], obs["evader_x"] - obs["pursuer_x"])
        error = (bearing - obs["pursuer_heading"] + np.pi) % (2 * np.pi) - np.pi
        return np.clip(error / (obs["max_turn_rate"] * obs["dt"]), -1.0, 1.0)
