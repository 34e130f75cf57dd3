"""Untrusted policies in OS-level sandboxes that can only return actions (pure Python, no torch).

The harness keeps the game, the bookkeeping and the scores; every policy runs in its own contained process
(`SandboxedPolicy`: bubblewrap namespaces, an unprivileged uid, seccomp, rlimits, a wall-clock kill; see
`envs.sandbox.layers`) and talks to the harness over a pipe, one JSON line per request and reply
(`envs.sandbox.protocol`). `SandboxedStrategy` makes such a process an `envs.base.Strategy`; `envs.base.act_all`
asks several at once.

    from envs.sandbox import SandboxConfig, SandboxedPolicy, SandboxedStrategy

Names are imported on first use: a policy process imports `envs.sandbox.worker`, and so this package, and must
start without loading the harness's side (subprocess, the layers, the process driver).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "FAILURE_KINDS": "envs.sandbox.config",
    "PolicyError": "envs.sandbox.config",
    "SandboxConfig": "envs.sandbox.config",
    "Layers": "envs.sandbox.layers",
    "SandboxUnavailable": "envs.sandbox.layers",
    "detect_layers": "envs.sandbox.layers",
    "require_layers": "envs.sandbox.layers",
    "SandboxedPolicy": "envs.sandbox.process",
    "SandboxedStrategy": "envs.sandbox.strategy",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'envs.sandbox' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


__all__ = list(_EXPORTS)
