"""The contract between the FMSP core (search loops, archives, the sandbox harness) and its domains.

A domain says what the FM must write (`task_prompt`), which hand-written policies seed the archives
(`baselines`) and what a policy class must define (`interface`). It runs matches and unit tests as
*trusted harness code*: the game, its bookkeeping and the scores live in the harness process, and each
policy is an `envs.sandbox.SandboxedPolicy`, its own contained process that only receives observations and
returns values over a pipe (see `fmsp.sandbox`, which starts the processes and turns failures into results).

- `play_match(a, b) -> {"score_a", "score_b", "details"}`: policy `a` plays ``sides[0]``, `b` plays
  ``sides[1]``; scores lie in [0, 1]. The harness validates every value a policy returns (type, shape,
  legality, NaN) and rejects a bad one with ``raise policy.failure("invalid_action", why)``; a
  `PolicyError` (raised by the handle or by the harness) ends the match as that policy's failure.
- `unit_test(policy, side) -> None`: raises AssertionError with a message the repair prompt can show the FM
  (or a PolicyError from the policy's process).

Handles offer `call(method, *args)`, `submit`/`result` (pipelined; `envs.base.act_all` asks several at
once), `new_instance()`, `loaded()` (the class's name/description) and `failure(kind, message)`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

from envs.sandbox import SandboxedPolicy


@dataclass(frozen=True)
class PolicyCode:
    """One generated or hand-written policy: Python source defining the class the domain asks for."""

    name: str
    description: str
    code: str
    side: str

    def to_dict(self) -> dict[str, Any]:
        """Plain dict: what archives store."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PolicyCode:
        return cls(name=data["name"], description=data["description"], code=data["code"], side=data["side"])


@dataclass(frozen=True)
class PolicyInterface:
    """What a side's policy class must define, and modules its process imports before the policy loads."""

    methods: tuple[str, ...]
    preload: tuple[str, ...] = ()


@runtime_checkable
class Domain(Protocol):
    """A two-sided FMSP domain (Car Tag, Gandalf, a SEPO game). See the module docstring."""

    name: str
    sides: tuple[str, str]  # e.g. ("pursuer", "evader"); ("attacker", "defender"); ("exploiter", "cooperator")
    allowed_imports: tuple[str, ...]  # the modules the task prompt offers the FM (math, random, numpy, ...)

    def task_prompt(self, side: str) -> str:
        """The API the FM must implement for `side`: class signature, observation format, goal."""
        ...

    def baselines(self, side: str) -> list[PolicyCode]:
        """Human-designed seed policies for `side` (real code strings)."""
        ...

    def match_config(self) -> dict[str, Any]:
        """JSON-able config of a match (seeds, number of games, ...), recorded with runs."""
        ...

    def interface(self, side: str) -> PolicyInterface:
        """The methods `side`'s class must define (and what to preload)."""
        ...

    def play_match(self, a: SandboxedPolicy, b: SandboxedPolicy) -> dict[str, Any]:
        """One match in the trusted harness; see the module docstring."""
        ...

    def unit_test(self, policy: SandboxedPolicy, side: str) -> None:
        """Check a new policy before it enters an archive; AssertionError says what to fix."""
        ...
