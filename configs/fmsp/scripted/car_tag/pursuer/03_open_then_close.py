"""Open the distance when the evader sits inside the turning circle, then turn in hard."""
import numpy as np


class OpenThenClose:
    name = "open_then_close"
    description = "drive straight when the evader is inside the turning circle, else turn hard toward it"

    def __call__(self, obs):
        dx, dy = obs["evader_x"] - obs["pursuer_x"], obs["evader_y"] - obs["pursuer_y"]
        bearing = np.arctan2(dy, dx)
        error = (bearing - obs["pursuer_heading"] + np.pi) % (2 * np.pi) - np.pi
        inside = np.hypot(dx, dy) < 2.0 * obs["turn_radius"] * np.abs(np.sin(error)) + 1e-9
        turn = np.sign(error)
        return np.where(inside, 0.0, turn)
