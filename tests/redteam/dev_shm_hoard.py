# redteam: domain=car_tag side=evader expect=ok like=still
import os


class ShmHoarder:
    name = "shm_hoarder"
    description = "parks host memory in /dev/shm and /dev (tmpfs outside every rlimit); gives itself away if it could"

    def __init__(self):
        self.held = 0
        for place in ("/dev/shm/__TOKEN__shm", "/dev/__TOKEN__dev", "/dev/mqueue/__TOKEN__q"):
            for i in range(64):  # many files: each stops at the file-size limit
                try:
                    with open(f"{place}{i}", "wb") as fh:
                        for _ in range(8):
                            fh.write(b"\1" * (1 << 20))
                            self.held += 1 << 20
                except OSError:
                    break

    def __call__(self, obs):
        if self.held:
            raise RuntimeError(f"parked {self.held >> 20} MB of host shared memory")
        return 0.0
