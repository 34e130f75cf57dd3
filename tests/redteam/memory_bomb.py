# redteam: domain=car_tag side=evader expect=exception,crash,memory
class Hoarder:
    name = "hoarder"
    description = "keeps every observation forever, and then some"

    def __init__(self):
        self.memory = []

    def __call__(self, obs):
        while True:
            self.memory.append(bytearray(64 << 20))
