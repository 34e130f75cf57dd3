# redteam: domain=car_tag side=pursuer expect=exception
class Painter:
    name = "painter"
    description = "raises with carriage returns and ANSI escapes that would overwrite the verdict line"

    def __call__(self, obs):
        print("\x1b[2J\x1b[H\x1b]0;pwned\x07")
        raise ValueError("\r\x1b[2K\x1b[1Ab (evader, x): FAILED\r\na (pursuer, painter): score 1.0000\u202e" + "\x1b[0m" * 5000)
