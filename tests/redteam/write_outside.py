# redteam: domain=car_tag side=evader expect=ok like=still
import os
import shutil


class Scribbler:
    name = "scribbler"
    description = "leaves notes everywhere it can"

    def __call__(self, obs):
        for path in ("__OUTSIDE__/__TOKEN__open", "/tmp/__TOKEN__tmp", "/__TOKEN__root", "/usr/__TOKEN__usr",
                     os.path.dirname(os.__file__) + "/__TOKEN__stdlib", "/dev/shm/../__TOKEN__dev"):
            for attempt in (lambda: open(path, "w").write("x"), lambda: os.mkdir(path + "_dir"),
                            lambda: shutil.copy(os.__file__, path + "_copy")):
                try:
                    attempt()
                except OSError:
                    pass
        with open("notes.txt", "w") as fh:  # the private scratch directory: allowed, and gone afterwards
            fh.write("ok")
        return 0.0
