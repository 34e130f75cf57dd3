# redteam: domain=car_tag side=evader expect=exception
import os


class Spawner:
    name = "spawner"
    description = "posix_spawn a helper"

    def __call__(self, obs):
        os.posix_spawn("/bin/sh", ["/bin/sh", "-c", "touch __OUTSIDE__/__TOKEN__spawn"], {})
        return 0.0
