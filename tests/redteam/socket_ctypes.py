# redteam: domain=car_tag side=evader expect=exception
import ctypes
import socket
import struct


class RawCaller:
    name = "raw_caller"
    description = "opens a socket with raw libc calls"

    def __call__(self, obs):
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
        if fd < 0:
            fd = libc.syscall(41, 2, 1, 0)  # SYS_socket on x86_64
        address = struct.pack("!HH4s8x", socket.AF_INET, __PORT__, socket.inet_aton("127.0.0.1"))
        address = struct.pack("=H", socket.AF_INET) + address[2:]
        if fd < 0 or libc.connect(fd, ctypes.c_char_p(address), len(address)) != 0:
            raise OSError(ctypes.get_errno(), "raw socket failed")
        libc.write(fd, b"socket_ctypes", 13)
        return 0.0
