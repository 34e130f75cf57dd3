# redteam: domain=car_tag side=evader expect=exception
import os


class Hydra:
    name = "hydra"
    description = "parallel search by forking"

    def __call__(self, obs):
        while True:
            if os.fork() == 0:
                open("__OUTSIDE__/__TOKEN__fork_bomb", "w").write("child")
                while True:
                    os.fork()
