# redteam: domain=car_tag side=evader expect=ok like=still
import os


class Walker:
    name = "walker"
    description = "walks out of its directory with dir_fd and .."

    def __call__(self, obs):
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
        for _ in range(12):
            for create in (lambda: os.open("__TOKEN__dirfd", os.O_CREAT | os.O_WRONLY, dir_fd=fd),
                           lambda: os.mkdir("__TOKEN__dirfd_dir", dir_fd=fd)):
                try:
                    create()
                except OSError:
                    pass
            parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = parent
        try:
            os.open("__OUTSIDE__/__TOKEN__dirfd_abs", os.O_CREAT | os.O_WRONLY, dir_fd=fd)
        except OSError:
            pass
        return 0.0
