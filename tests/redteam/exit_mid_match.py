# redteam: domain=car_tag side=evader expect=crash
import os


class Quitter:
    name = "quitter"
    description = "leaves in the middle of the match without a word"

    def __call__(self, obs):
        if obs["step"] == 3:
            os._exit(0)
        return 0.0
