"""Progress bars with totals for every phase of `sepo eval` (tqdm), or none when progress is off."""

from __future__ import annotations

from typing import Any

from tqdm.auto import tqdm


def bar(enabled: bool, total: int, desc: str, unit: str) -> Any:
    """A tqdm bar over `total` items, or None (callers check) when progress is off."""
    if not enabled:
        return None

    return tqdm(total=total, desc=desc, unit=unit)
