# redteam: domain=car_tag side=evader expect=ok like=still
import gc
import sys

import numpy as np


class Tamperer:
    name = "tamperer"
    description = "edits the game state it finds through frames and the garbage collector"

    def __call__(self, obs):
        frame = sys._getframe()
        while frame is not None:
            for key in ("state", "survived", "active", "result"):
                value = frame.f_locals.get(key)
                if isinstance(value, np.ndarray) and value.flags.writeable:
                    value[...] = 10**6
            frame = frame.f_back
        for obj in gc.get_objects():
            if isinstance(obj, np.ndarray) and obj.flags.writeable and obj.dtype.kind in "fi":
                obj[...] = 10**6
            elif isinstance(obj, dict) and "score_b" in obj:
                obj["score_b"] = 1.0
        return 0.0
