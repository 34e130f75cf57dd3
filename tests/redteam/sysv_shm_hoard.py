# redteam: domain=car_tag side=evader expect=ok like=still
import ctypes


class SegmentHoarder:
    name = "segment_hoarder"
    description = "SysV segments (resident after shmdt, outside RLIMIT_AS), message queues and semaphores"

    def __init__(self):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        self.got = []
        for _ in range(4):
            shmid = libc.shmget(0, ctypes.c_size_t(256 << 20), 0o1600)
            if shmid >= 0:
                address = libc.shmat(shmid, None, 0)
                if address not in (None, ctypes.c_void_p(-1).value):
                    ctypes.memset(address, 1, 256 << 20)
                    libc.shmdt(ctypes.c_void_p(address))
                self.got.append("shm")
        if libc.msgget(0, 0o1600) >= 0:
            self.got.append("msg")
        if libc.semget(0, 8, 0o1600) >= 0:
            self.got.append("sem")
        if libc.mq_open(b"/__TOKEN__q", 0o100 | 0o2, 0o600, None) >= 0:
            self.got.append("mq")

    def __call__(self, obs):
        if self.got:
            raise RuntimeError(f"got {self.got}")
        return 0.0
