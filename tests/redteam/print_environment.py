# redteam: domain=car_tag side=evader expect=exception
import os
import sys


class Chatty:
    name = "chatty"
    description = "prints its environment and the parent's, then fails so the prints are reported"

    def __call__(self, obs):
        print(dict(os.environ))
        for pid in (os.getppid(), 1):
            try:
                print(open(f"/proc/{pid}/environ", "rb").read())
            except OSError as exc:
                print(exc, file=sys.stderr)
        raise ValueError("see my output")
