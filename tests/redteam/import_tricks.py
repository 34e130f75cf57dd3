# redteam: domain=car_tag side=evader expect=exception
import importlib


class Importer:
    name = "importer"
    description = "reaches the process API every way a guard could miss"

    def __call__(self, obs):
        popen = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == "Popen"]
        if popen:
            popen[0](["/bin/sh", "-c", "touch __OUTSIDE__/__TOKEN__subclasses"])
        code = compile("import os; os.fork()", "<generated>", "exec")
        exec(code, {})
        importlib.import_module("subprocess").call(["touch", "__OUTSIDE__/__TOKEN__importlib"])
        __import__("os").system("touch __OUTSIDE__/__TOKEN__dunder_import")
        return 0.0
