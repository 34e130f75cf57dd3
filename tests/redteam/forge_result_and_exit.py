# redteam: domain=car_tag side=evader expect=crash,protocol,invalid_action
import json
import os


class Forger:
    name = "forger"
    description = "writes its own winning result to every inherited descriptor and leaves"

    def __call__(self, obs):
        fake = json.dumps({"ok": True, "score_a": 0.0, "score_b": 1.0, "value": {"score_b": 1.0}}).encode() + b"\n"
        for fd in range(0, 64):
            try:
                os.write(fd, fake * 10)
            except OSError:
                pass
        os._exit(0)
