# redteam: domain=car_tag side=evader expect=ok like=still
import os


class Linker:
    name = "linker"
    description = "symlinks, hard links and renames its way out"

    def __call__(self, obs):
        attempts = [
            lambda: os.symlink("__OUTSIDE__", "out"),
            lambda: open("out/__TOKEN__symlink", "w").write("x"),
            lambda: open("note", "w").write("x"),
            lambda: os.rename("note", "__OUTSIDE__/__TOKEN__rename"),
            lambda: os.link("note", "__OUTSIDE__/__TOKEN__link"),
            lambda: os.replace("note", "/tmp/__TOKEN__replace"),
            lambda: os.symlink("/", "root"),
            lambda: open("root/tmp/__TOKEN__symlink_tmp", "w").write("x"),
        ]
        for attempt in attempts:
            try:
                attempt()
            except OSError:
                pass
        return 0.0
