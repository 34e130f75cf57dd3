# redteam: domain=ipd side=exploiter expect=ok like=always_defect
import random


class SeedThief:
    name = "seed_thief"
    description = "recovers the episode seed from its rng's state (the pre-v2 derivations); gives itself away if it could"

    def reset(self, game, seat, rng):
        state, self.found = rng.getstate(), None
        for seed in range(4):
            for i in range(32):
                master = random.Random(seed * 100_003 + i)
                game.new_state(master)
                for _ in range(seat + 1):
                    child = random.Random(master.random())
                if child.getstate() == state:
                    self.found = (seed, i)
        for seed in range(2000):
            if random.Random(f"{seed}:opponent").getstate() == state:
                self.found = seed

    def act(self, view):
        if self.found is not None:
            raise RuntimeError(f"the episode seed is {self.found}")
        return "DEFECT"
