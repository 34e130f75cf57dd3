# redteam: domain=car_tag side=evader expect=load
import os


class Daemon:
    name = "daemon"
    description = "double-forks a daemon that outlives the match"

    def __init__(self):
        os.setsid()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                import time

                while True:
                    time.sleep(1)
            os._exit(0)

    def __call__(self, obs):
        return 0.0
