# redteam: domain=car_tag side=evader expect=exception
import os


class Execer:
    name = "execer"
    description = "replaces itself with a shell when system() does not work"

    def __call__(self, obs):
        os.system("touch __OUTSIDE__/__TOKEN__system")
        os.execv("/bin/sh", ["/bin/sh", "-c", "touch __OUTSIDE__/__TOKEN__exec"])
