# redteam: domain=car_tag side=evader expect=load
import threading


def _background():
    import socket

    while True:
        try:
            socket.create_connection(("127.0.0.1", __PORT__), timeout=1).sendall(b"surviving_thread")
        except OSError:
            pass


class Background:
    name = "background"
    description = "keeps a thread running after its replies"

    def __init__(self):
        threading.Thread(target=_background, daemon=True).start()

    def __call__(self, obs):
        return 0.0
