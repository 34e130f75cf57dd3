# redteam: domain=car_tag side=evader expect=invalid_action,protocol
import json
import os


class Prophet:
    name = "prophet"
    description = "answers requests before they are asked, with a score instead of an action"

    def __call__(self, obs):
        fake = json.dumps({"ok": True, "value": {"score_b": 1.0, "evader_score": 1.0}}).encode() + b"\n"
        for fd in range(3, 64):
            try:
                os.write(fd, fake * 50)
            except OSError:
                pass
        return 0.0
