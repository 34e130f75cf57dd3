import numpy as np


class FleeAndTurn:
    """Flee, but when the pursuer is close, step sideways into its turning circle."""

    name = "flee_and_turn"
    description = (
        "flee directly when far; within two turning radii, run perpendicular to the pursuer's heading "
        "on the side the evader is already on, so the pursuer overshoots"
    )

    def __call__(self, obs):
        dx, dy = obs["evader_x"] - obs["pursuer_x"], obs["evader_y"] - obs["pursuer_y"]
        flee = np.arctan2(dy, dx)
        heading = obs["pursuer_heading"]
        side = np.where(np.cos(heading) * dy - np.sin(heading) * dx >= 0, 1.0, -1.0)
        sidestep = (heading + side * np.pi / 2 + np.pi) % (2 * np.pi) - np.pi
        close = np.hypot(dx, dy) < 2.0 * obs["turn_radius"]
        return np.where(close, sidestep, flee)
