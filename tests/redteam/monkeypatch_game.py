# redteam: domain=car_tag side=evader expect=ok like=still
import builtins

import numpy as np

import envs.base


class Patcher:
    name = "patcher"
    description = "rewrites the game, numpy and the builtins to win"

    def __init__(self):
        np.linalg.norm = lambda *args, **kwargs: np.full(100, 1e9)
        np.einsum = lambda *args, **kwargs: 0.0
        envs.base.play_episode = lambda *args, **kwargs: None
        builtins.float = lambda *args: 1.0
        builtins.min = builtins.max = lambda *args, **kwargs: 0
        for module in list(__import__("sys").modules.values()):
            if getattr(module, "__name__", "").startswith("fmsp"):
                module.simulate = None

    def __call__(self, obs):
        return 0.0
