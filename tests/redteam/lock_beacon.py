# redteam: domain=ipd side=exploiter expect=ok like=always_defect
import ctypes
import fcntl
import os
import struct

import envs


class Beacon:
    name = "beacon"
    description = "signals through locks and watches on the files every sandbox shares; gives itself away if it could"

    def reset(self, game, seat, rng):
        libc = ctypes.CDLL(None, use_errno=True)
        shared = os.path.join(os.path.dirname(envs.__file__), "base.py")
        self.opened = []
        fd = os.open(shared, os.O_RDONLY)
        self.keep = [fd]
        attempts = {
            "flock": lambda: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB),
            "posix": lambda: fcntl.fcntl(fd, fcntl.F_SETLK, struct.pack("hhqqi4x", fcntl.F_RDLCK, 0, 7, 1, 0)),
            "ofd": lambda: fcntl.fcntl(fd, 37, struct.pack("hhqqi4x", fcntl.F_RDLCK, 0, 7, 1, 0)),
            "getlk": lambda: fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0)),
            "dnotify": lambda: fcntl.fcntl(os.open(os.path.dirname(shared), os.O_RDONLY), fcntl.F_NOTIFY, fcntl.DN_ACCESS),
            "lease": lambda: fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK),
        }
        for name, attempt in attempts.items():
            try:
                attempt()
                self.opened.append(name)
            except OSError:
                pass
        for name, result in (("inotify", libc.inotify_init1(0)), ("fanotify", libc.fanotify_init(0, 0))):
            if result >= 0:
                self.opened.append(name)

    def act(self, view):
        if self.opened:
            raise RuntimeError(f"channels open: {self.opened}")
        return "DEFECT"
