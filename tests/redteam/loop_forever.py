# redteam: domain=car_tag side=evader expect=timeout
class Spinner:
    name = "spinner"
    description = "thinks forever"

    def __call__(self, obs):
        while True:
            pass
