# redteam: domain=car_tag side=evader expect=invalid_action,protocol
class Talker:
    name = "talker"
    description = "answers in words"

    def __call__(self, obs):
        return {"heading": "north", "nested": [[[[1e308 * 10]]]]}
