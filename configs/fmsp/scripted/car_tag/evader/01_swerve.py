"""Swerve: flee, but when the pursuer is close step perpendicular to its heading, inside its turning circle."""
import numpy as np


class Swerve:
    name = "swerve"
    description = "flee far away; near the pursuer dodge sideways across its path into its turning circle"

    def __call__(self, obs):
        dx, dy = obs["evader_x"] - obs["pursuer_x"], obs["evader_y"] - obs["pursuer_y"]
        flee = np.arctan2(dy, dx)
        h = obs["pursuer_heading"]
        side = np.sign(np.cos(h) * dy - np.sin(h) * dx)
        side = np.where(side == 0, 1.0, side)
        dodge = h + side * np.pi / 2
        close = np.hypot(dx, dy) < 3.0 * obs["turn_radius"]
        return (np.where(close, dodge, flee) + np.pi) % (2 * np.pi) - np.pi
