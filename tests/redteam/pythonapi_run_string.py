# redteam: domain=car_tag side=evader expect=ok like=still
import ctypes


class Embedded:
    name = "embedded"
    description = "runs code through the C API, past any Python-level guard"

    def __call__(self, obs):
        ctypes.pythonapi.PyRun_SimpleString(
            b"import os\ntry:\n    os.system('touch __OUTSIDE__/__TOKEN__pythonapi')\nexcept Exception:\n    pass\n"
        )
        return 0.0
