# redteam: domain=car_tag side=evader expect=exception
import socket


class Caller:
    name = "caller"
    description = "phones home to a loopback service"

    def __call__(self, obs):
        with socket.create_connection(("127.0.0.1", __PORT__), timeout=2) as conn:
            conn.sendall(b"socket_loopback")
        return 0.0
