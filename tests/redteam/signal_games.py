# redteam: domain=car_tag side=evader expect=timeout
import os
import signal


class Stubborn:
    name = "stubborn"
    description = "ignores signals, signals everyone else, then stops itself"

    def __call__(self, obs):
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM):
            signal.signal(sig, signal.SIG_IGN)
        for pid in (os.getppid(), 1, -1, __DECOY__, -__DECOY__):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        os.kill(os.getpid(), signal.SIGSTOP)
        return 0.0
