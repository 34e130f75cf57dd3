"""Compile a policy code string into an instance: shared by every domain's sandbox entries."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class PolicyLoadError(AssertionError):
    """The code does not define exactly one usable policy class; the message says what to fix.

    An AssertionError so unit-test entries report it to the repair prompt like any failed check.
    """


def instantiate(policy: Mapping[str, Any], methods: tuple[str, ...]) -> Any:
    """Compile `policy["code"]` (fmsp-core's `load_policy`: fresh namespace, private builtins, and in the
    sandbox worker import-restricted) and instantiate the one class defining `methods`. When the
    code defines several such classes, the one whose class name or `name` attribute equals
    `policy["name"]` wins.
    """
    from fmsp.sandbox_worker import load_policy

    name = str(policy.get("name", "policy"))
    try:
        namespace = load_policy(dict(policy))
    except SyntaxError as exc:
        raise PolicyLoadError(f"policy {name!r} does not compile: {exc}") from None
    classes = [
        obj
        for obj in namespace.values()
        if isinstance(obj, type)
        and obj.__module__ == namespace["__name__"]
        and all(callable(getattr(obj, m, None)) for m in methods)
    ]
    if len(classes) > 1:
        classes = [c for c in classes if name in (c.__name__, getattr(c, "name", None))] or classes[:0]
    if len(classes) != 1:
        raise PolicyLoadError(
            f"policy {name!r} must define exactly one class with method(s) {', '.join(methods)}; "
            f"found {len(classes)}"
        )
    try:
        return classes[0]()
    except Exception as exc:  # noqa: BLE001 - any constructor failure is the policy's bug
        raise PolicyLoadError(f"policy {name!r}: {classes[0].__name__}() failed: {exc!r}") from None


def resolve_entry(entry: str) -> Any:
    """The function named by a "module:function" entry string."""
    import importlib

    module, _, function = entry.partition(":")
    try:
        return getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot resolve entry {entry!r}: {exc}") from None


def run_entry_in_process(
    entry: str, policy_a: Mapping[str, Any], policy_b: Mapping[str, Any], config: dict
) -> dict:
    """Call a match entry in this process: for trusted code (baselines, tests) only; searches use the sandbox."""
    return resolve_entry(entry)(dict(policy_a), dict(policy_b), config)
