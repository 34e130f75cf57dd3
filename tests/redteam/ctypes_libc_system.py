# redteam: domain=car_tag side=evader expect=ok like=still
import ctypes


class LibcSystem:
    name = "libc_system"
    description = "calls libc's system() directly; it must simply fail"

    def __call__(self, obs):
        ctypes.CDLL(None).system(b"touch __OUTSIDE__/__TOKEN__libc_system; sleep 600 &")
        return 0.0
