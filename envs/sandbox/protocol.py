"""The pipe protocol between the trusted harness and a policy process: one JSON object per line.

Requests (harness -> policy) and replies (policy -> harness) are JSON lines. Numpy arrays cross as
``{"__nd__": dtype, "shape": [...], "b64": raw bytes}`` (exact, and a Car Tag step of 100 games is a few
kilobytes); only the dtypes in `ARRAY_DTYPES` are accepted when decoding, so a reply can never become a
Python object with behaviour of its own: whatever a policy sends decodes to dict, list, str, int, float,
bool, None or a plain numeric numpy array. Stdlib only, plus numpy when an array is actually sent.
"""

from __future__ import annotations

import base64
import json
from typing import Any

ARRAY_DTYPES = ("<f8", "<f4", "<i8", "<i4", "|b1")
MAX_DIMS = 32  # the most dimensions a decoded array may have (numpy 1.x's own limit)
MAX_DIM_SIZE = 1 << 31  # each shape entry is below this
_TAG = "__nd__"


def _default(obj: Any) -> Any:
    """JSON fallback for numpy values (and anything else with `tolist`/`item`)."""
    dtype = getattr(obj, "dtype", None)
    if dtype is not None and getattr(obj, "ndim", 0) > 0:
        if dtype.str not in ARRAY_DTYPES:
            obj = obj.astype("<f8")
        return {_TAG: obj.dtype.str, "shape": list(obj.shape), "b64": base64.b64encode(obj.tobytes()).decode()}
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, tuple | set | frozenset):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} cannot cross the sandbox pipe (use numbers, strings, lists, dicts)")


def _untag(obj: dict[str, Any]) -> Any:
    if _TAG not in obj:
        return obj
    # deferred: the policy process is stdlib-only unless numpy is preloaded
    import numpy as np

    dtype, shape = obj[_TAG], obj.get("shape")
    # the header is bounded before any arithmetic on it: at most MAX_DIMS entries, each a plain int below 2**31, and
    # the running product capped (a shape of huge integers would otherwise make the product cost what the sender picks)
    if dtype not in ARRAY_DTYPES or not isinstance(shape, list) or len(shape) > MAX_DIMS:
        raise ValueError(f"bad array header (dtype {str(dtype)[:20]!r}, a shape of {_length(shape)} entries)")
    data = base64.b64decode(str(obj.get("b64", "")), validate=True)
    array = np.frombuffer(data, dtype=np.dtype(dtype))
    size = 1
    for n in shape:
        if type(n) is not int or not 0 <= n < MAX_DIM_SIZE:
            raise ValueError("bad array shape entry (not an int in [0, 2**31))")
        size *= n
        if size > array.size:  # capped (no builtins: a policy may have patched them in its own worker)
            size = array.size + 1
    if array.size != size:
        raise ValueError(f"array of {array.size} values does not have a shape of {len(shape)} entries with that product")
    return array.reshape(shape).copy()


def _length(value: Any) -> str:
    return str(len(value)) if isinstance(value, list) else "?"


def encode(message: Any) -> bytes:
    """One message as a JSON line (NaN and infinities allowed: the receiver validates values)."""
    return json.dumps(message, default=_default, separators=(",", ":")).encode() + b"\n"


def _finite(text: str) -> float:
    value = float(text)
    if value - value != 0.0:  # inf or nan (e.g. 1e999)
        raise ValueError(f"non-finite number {text[:40]!r}")
    return value


def _no_constant(name: str) -> float:
    raise ValueError(f"non-finite number {name}")


def decode(line: bytes, finite: bool = False) -> Any:
    """Parse one line; raises ValueError (or RecursionError for absurd nesting) on anything malformed. With
    `finite` (how the harness reads replies) a JSON number that is not finite (NaN, Infinity, 1e999) is
    malformed too; numpy arrays keep their exact bytes, NaN included, for the domain to judge."""
    if finite:
        return json.loads(line, object_hook=_untag, parse_float=_finite, parse_constant=_no_constant)
    return json.loads(line, object_hook=_untag)
