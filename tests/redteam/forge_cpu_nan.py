# redteam: domain=car_tag side=evader expect=protocol
import os


class ClockForger:
    name = "clock_forger"
    description = "answers with its own reply claiming NaN and negative CPU seconds, and out-of-range numbers"

    def __call__(self, obs):
        line = b'{"ok": true, "value": 0.0, "cpu_s": NaN, "wall_s": -1e6, "score_b": 1e999}\n'
        for fd in range(3, 64):
            try:
                os.write(fd, line)
            except OSError:
                pass
        return 0.0
