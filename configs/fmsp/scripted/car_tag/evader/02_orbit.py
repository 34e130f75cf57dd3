"""Orbit: move tangentially around the pursuer, which cannot turn tightly enough to follow."""
import numpy as np


class Orbit:
    name = "orbit"
    description = "circle the pursuer at a tangent, mixing in a little flight when close"

    def __call__(self, obs):
        dx, dy = obs["evader_x"] - obs["pursuer_x"], obs["evader_y"] - obs["pursuer_y"]
        away = np.arctan2(dy, dx)
        dist = np.hypot(dx, dy)
        mix = np.clip(2.0 / np.maximum(dist, 1e-6), 0.0, 1.0) * 0.5
        heading = away + np.pi / 2 - mix * np.pi / 2
        return (heading + np.pi) % (2 * np.pi) - np.pi
