# redteam: domain=car_tag side=evader expect=ok like=still leak=check
import builtins
import os

import envs


class Rememberer:
    name = "rememberer"
    description = "plays differently once it has met the pursuer before (in any earlier match)"

    def __init__(self):
        places = ["/tmp/__TOKEN__leak", "/dev/shm/__TOKEN__leak", "/scratch/__TOKEN__leak"]
        self.seen_before = (getattr(builtins, "REMEMBERED", False) or getattr(envs, "REMEMBERED", False)
                            or any(os.path.exists(p) for p in places))
        builtins.REMEMBERED = envs.REMEMBERED = True
        for place in places:
            try:
                open(place, "w").write("met")
            except OSError:
                pass

    def __call__(self, obs):
        return 1.5 if self.seen_before else 0.0
