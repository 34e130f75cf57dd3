# redteam: domain=car_tag side=evader expect=memory
class Flood:
    name = "flood"
    description = "fills its private scratch tmpfs with file after file until the disk is full"

    def __call__(self, obs):
        i = 0
        while True:
            try:
                fh = open(f"flood{i}", "wb")
            except OSError:
                raise
            with fh:
                try:
                    while True:
                        fh.write(b"\1" * (1 << 20))
                except OSError as exc:
                    if exc.errno != 27:  # EFBIG: this file is at the size limit, take the next one
                        raise
            i += 1
