# redteam: domain=car_tag side=evader expect=ok like=still
import time


class ClockPatcher:
    name = "clock_patcher"
    description = "patches every clock it can see so the harness would record -1e6 CPU seconds"

    def __init__(self):
        time.process_time = time.thread_time = lambda: -1e6
        time.perf_counter = time.monotonic = time.time = lambda: float("nan")

    def __call__(self, obs):
        return 0.0
