# redteam: domain=car_tag side=evader expect=exception
import subprocess


class Shell:
    name = "shell"
    description = "asks the shell"

    def __call__(self, obs):
        subprocess.run("touch __OUTSIDE__/__TOKEN__shell; (sleep 600 &)", shell=True, check=True)
        return 0.0
