"""The contract between the FMSP core (search loops, sandbox, archives) and its domains.

A domain says what the FM must write (`task_prompt`), which hand-written policies seed the archives
(`baselines`), and names two functions the sandbox worker imports and runs with policy *code strings*:

- `match_entry` = "module:function": ``f(policy_a, policy_b, config) -> {"score_a", "score_b", "details"}``
  where `policy_a`/`policy_b` are `PolicyCode`-shaped dicts (name, description, code, side), policy_a
  plays ``sides[0]``, policy_b plays ``sides[1]``, and scores lie in [0, 1]. The whole batch of games
  runs inside the sandbox worker; only this JSON-able dict comes back.
- `unit_test_entry` = "module:function": ``f(policy, side, config) -> None``; raises AssertionError with
  a message the repair prompt can show the FM.

Entries receive policies as plain dicts (`PolicyCode.to_dict()`, decoded from JSON) and may compile
them with `fmsp.sandbox_worker.load_policy(policy) -> dict` (a fresh namespace with the class defined).
Any code compiled from a string (e.g. a plain `exec(policy["code"], ns)`) is import-restricted by the
worker's guard to `allowed_imports` as well; entries never run outside the sandbox worker in a search.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class PolicyCode:
    """One generated or hand-written policy: Python source defining the class the domain asks for."""

    name: str
    description: str
    code: str
    side: str

    def to_dict(self) -> dict[str, Any]:
        """Plain dict: what crosses the sandbox boundary and what archives store."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PolicyCode:
        return cls(name=data["name"], description=data["description"], code=data["code"], side=data["side"])


@runtime_checkable
class Domain(Protocol):
    """A two-sided FMSP domain (Car Tag, Gandalf, a SEPO game). See the module docstring for the entries."""

    name: str
    sides: tuple[str, str]  # e.g. ("pursuer", "evader"); ("attacker", "defender"); ("exploiter", "cooperator")
    match_entry: str  # "module:function" importable in the sandbox worker
    unit_test_entry: str  # "module:function" importable in the sandbox worker
    allowed_imports: tuple[str, ...]  # top-level modules generated code may import (e.g. math, random, numpy)

    def task_prompt(self, side: str) -> str:
        """The API the FM must implement for `side`: class signature, observation format, goal."""
        ...

    def baselines(self, side: str) -> list[PolicyCode]:
        """Human-designed seed policies for `side` (real code strings)."""
        ...

    def match_config(self) -> dict[str, Any]:
        """JSON-able config passed to both entries (seeds, number of games, ...)."""
        ...
