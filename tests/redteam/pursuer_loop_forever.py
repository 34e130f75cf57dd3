# redteam: domain=car_tag side=pursuer expect=timeout
class SpinningPursuer:
    name = "spinning_pursuer"
    description = "the first side hangs: the failure must be a's, never b's"

    def __call__(self, obs):
        total = 0
        while True:
            total += 1
