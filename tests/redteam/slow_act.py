# redteam: domain=car_tag side=evader expect=timeout
import time


class Deliberate:
    name = "deliberate"
    description = "each step is within the call limit, the whole match is not"

    def __call__(self, obs):
        time.sleep(2.5)
        return 0.0
