"""Private rngs for sandboxed policies: seeded by a keyed hash (HMAC-SHA256) under a per-run secret key.

A policy that is handed a `random.Random` can read its whole state, and from a state seeded by public numbers
(the episode seed, a fixed derivation) it can recover the seed and with it the deal and the opponent's stream.
So every rng a sandboxed policy receives is `private_rng(key, ...)` of what the harness would have given it:
the same key and the same episode seed give the same stream (runs replay from the recorded key, and episodes
with one seed stay paired across a study's arms), while without the key the stream says nothing about the
seed, the deal or the other seat. The key lives in the harness (`SandboxConfig.rng_key`) and is never sent.

The run's key: `set_run_rng_key` (a CLI sets it from its config or the run directory, `persist_run_rng_key`);
unset, a fresh random key for this process (never a public constant).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import random
import secrets
import time
from array import array
from pathlib import Path

KEY_FILE = "rng_key.json"
_RUN_KEY: str | None = None


def new_rng_key() -> str:
    """A fresh secret key (256 bits, hex)."""
    return secrets.token_hex(32)


def run_rng_key() -> str:
    """The key of this run: the one set with `set_run_rng_key`, else a random key made once per process."""
    global _RUN_KEY
    if _RUN_KEY is None:
        _RUN_KEY = new_rng_key()
    return _RUN_KEY


def set_run_rng_key(key: str) -> str:
    """Make `key` the run's key (the default `SandboxConfig.rng_key` from now on); returns it."""
    global _RUN_KEY
    if not isinstance(key, str) or len(key) < 32:
        raise ValueError("rng_key must be a secret string of at least 32 characters (e.g. 64 hex digits)")
    _RUN_KEY = key
    return key


def persist_run_rng_key(directory: str | Path, configured: str = "", create: bool = True) -> str:
    """The run's key, recorded in `directory/rng_key.json` and set for this process: `configured` if given
    (it must match a key already recorded there), else the recorded one (a resumed run), else a new one.
    `create=False` (a distributed run's other ranks) waits for the file rank 0 writes instead."""
    path = Path(directory) / KEY_FILE
    deadline = time.monotonic() + 300
    while not create and not configured and not path.is_file() and time.monotonic() < deadline:
        time.sleep(0.5)
    recorded = None
    if path.is_file():
        recorded = json.loads(path.read_text(encoding="utf-8")).get("rng_key")
    if configured and recorded and configured != recorded:
        raise ValueError(f"rng_key differs from the one recorded in {path}; a run keeps one key (resume with it)")
    key = configured or recorded or new_rng_key()
    if recorded is None and create:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump({"rng_key": key, "note": "keys the rngs of sandboxed policies; secret from the policies"}, fh)
        os.replace(tmp, path)
    return set_run_rng_key(key)


def keyed_seed(key: str, *parts: object) -> int:
    """HMAC-SHA256 of `parts` (joined by ':') under `key`, as a 256-bit integer."""
    message = ":".join(str(p) for p in parts).encode()
    return int.from_bytes(hmac.new(key.encode(), message, hashlib.sha256).digest(), "big")


def private_rng(key: str, *parts: object) -> random.Random:
    """`random.Random` seeded by `keyed_seed(key, *parts)`."""
    return random.Random(keyed_seed(key, *parts))


def private_copy(key: str, rng: random.Random, label: str = "policy") -> random.Random:
    """The private rng a policy gets in place of `rng`: keyed on `rng`'s exact state (which the harness derives
    from the episode seed), so it is a keyed function of that seed; `rng` itself is not advanced."""
    version, internal, gauss = rng.getstate()
    digest = hashlib.sha256(array("L", internal).tobytes() + repr(gauss).encode()).hexdigest()
    return private_rng(key, label, version, digest)
