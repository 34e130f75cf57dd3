import numpy as np


class ProportionalNavigation:
    """Missile-guidance law: turn at N times the rotation rate of the line of sight."""

    name = "proportional_navigation"
    description = (
        "proportional navigation (N=3) on the measured line-of-sight rate; pure pursuit while the "
        "evader is more than 90 degrees off the nose"
    )
    gain = 3.0

    def __call__(self, obs):
        dx, dy = obs["evader_x"] - obs["pursuer_x"], obs["evader_y"] - obs["pursuer_y"]
        los = np.arctan2(dy, dx)
        if obs["step"] == 0:
            self.prev_los = los
        los_rate = ((los - self.prev_los + np.pi) % (2 * np.pi) - np.pi) / obs["dt"]
        self.prev_los = los
        error = (los - obs["pursuer_heading"] + np.pi) % (2 * np.pi) - np.pi
        turn = np.where(np.abs(error) > np.pi / 2, error / obs["dt"], self.gain * los_rate + 0.5 * error)
        return np.clip(turn / obs["max_turn_rate"], -1.0, 1.0)
