"""The SEPO games and their role-separated pools behind the field's environment APIs.

- `sepo.interop.episode`: one episode stepped from outside (the core the adapters share; no third-party library).
- `sepo.interop.pettingzoo_env`: PettingZoo `ParallelEnv` (simultaneous moves) and `AECEnv` (one seat at a time).
- `sepo.interop.textarena_env`: every registered game as a TextArena environment.
- `sepo.interop.openenv_env`: an OpenEnv environment, its HTTP server (OpenEnv's app factory) and client.
- `sepo.interop.trl_env`: a TRL `environment_factory` class playing a group-dataset row behind one `act` tool.

Each adapter imports its library only when it is used; the libraries are the `interop` extra
(`pip install -e '.[interop]'`), and a missing one is reported in one line (`require`).
"""

from __future__ import annotations

import importlib
from types import ModuleType

EXTRA = "interop"


class MissingExtraError(ImportError):
    """A library of the `interop` extra is not installed; the message is the one line that says how to get it."""


def require(module: str, package: str) -> ModuleType:
    """Import `module` of PyPI package `package`, or raise MissingExtraError naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{package} is not installed: pip install 'sepo-fmsp[{EXTRA}]' (or pip install -e '.[{EXTRA}]' in a "
            f"checkout) ({exc})"
        ) from None
