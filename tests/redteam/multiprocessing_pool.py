# redteam: domain=car_tag side=evader expect=exception
import multiprocessing


def _plan(_):
    import socket

    socket.create_connection(("127.0.0.1", __PORT__), timeout=2).sendall(b"multiprocessing_pool")
    return 0.0


class Planner:
    name = "planner"
    description = "plans in a process pool"

    def __call__(self, obs):
        with multiprocessing.Pool(4) as pool:
            return sum(pool.map(_plan, range(4)))
