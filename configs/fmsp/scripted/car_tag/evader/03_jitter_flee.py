"""Jittered flight: flee with seeded random heading noise so the pursuer cannot lock on."""
import numpy as np


class JitterFlee:
    name = "jitter_flee"
    description = "flee directly away with seeded random heading noise of up to 60 degrees"

    def __call__(self, obs):
        if obs["step"] == 0:
            self.rng = np.random.default_rng(0)
        dx, dy = obs["evader_x"] - obs["pursuer_x"], obs["evader_y"] - obs["pursuer_y"]
        noise = self.rng.uniform(-np.pi / 3, np.pi / 3, size=dx.shape)
        return (np.arctan2(dy, dx) + noise + np.pi) % (2 * np.pi) - np.pi
