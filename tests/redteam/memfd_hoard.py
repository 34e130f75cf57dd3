# redteam: domain=car_tag side=evader expect=ok like=still
import os


class MemfdHoarder:
    name = "memfd_hoarder"
    description = "anonymous memfd files (shmem outside the scratch tmpfs)"

    def __init__(self):
        self.fds, self.held = [], 0
        for i in range(32):
            try:
                fd = os.memfd_create(f"hoard{i}")
            except OSError:
                break
            self.fds.append(fd)
            try:
                for _ in range(8):
                    os.write(fd, b"\1" * (1 << 20))
                    self.held += 1 << 20
            except OSError:
                pass

    def __call__(self, obs):
        if self.fds:
            raise RuntimeError(f"{len(self.fds)} memfds, {self.held >> 20} MB")
        return 0.0
