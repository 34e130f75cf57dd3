# redteam: domain=car_tag side=evader expect=load
import os

open("__OUTSIDE__/__TOKEN__load_time", "w").write("imported")
os.fork()


class Innocent:
    name = "innocent"
    description = "does its damage when the file is loaded"

    def __call__(self, obs):
        return 0.0
