"""Lead pursuit: steer toward where the evader will be, from its velocity estimated between steps."""
import numpy as np


class LeadPursuit:
    name = "lead_pursuit"
    description = "aim at the evader's predicted position using its finite-difference velocity"

    def __call__(self, obs):
        ex, ey = obs["evader_x"], obs["evader_y"]
        if obs["step"] == 0:
            self.prev = (ex.copy(), ey.copy())
        vx, vy = (ex - self.prev[0]) / obs["dt"], (ey - self.prev[1]) / obs["dt"]
        self.prev = (ex.copy(), ey.copy())
        dist = np.hypot(ex - obs["pursuer_x"], ey - obs["pursuer_y"])
        horizon = dist / obs["pursuer_speed"]
        tx, ty = ex + vx * horizon, ey + vy * horizon
        bearing = np.arctan2(ty - obs["pursuer_y"], tx - obs["pursuer_x"])
        error = (bearing - obs["pursuer_heading"] + np.pi) % (2 * np.pi) - np.pi
        return np.clip(error / (obs["max_turn_rate"] * obs["dt"]), -1.0, 1.0)
