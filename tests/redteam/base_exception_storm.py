# redteam: domain=car_tag side=evader expect=exception
class Unprintable(BaseException):
    def __str__(self):
        raise Unprintable()

    def __repr__(self):
        raise KeyboardInterrupt()


class Storm:
    name = "storm"
    description = "raises what no except Exception catches, and cannot even be printed"

    def __del__(self):
        raise SystemExit(0)

    def __call__(self, obs):
        error = Unprintable()
        error.__context__ = error
        try:
            raise KeyboardInterrupt()
        finally:
            raise error
