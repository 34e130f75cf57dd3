"""FMSP's harness around `envs.sandbox`: matches and unit tests of policy code, every policy in its own process.

`Sandbox.play_all(domain, pairs)` starts two contained processes per pair (`envs.sandbox.SandboxedPolicy`,
labelled "a" and "b"), lets the domain's trusted `play_match` drive them, and ends both; the next pair's
processes start while the current pair plays. No process serves two matches, so nothing a policy does
(module globals, monkeypatching, a learned opponent model) reaches another match, and the game and the
scores never share a process with policy code. A policy that fails yields a `MatchOutcome` naming it
(`failure_a`/`failure_b`, with the kind from `envs.sandbox.FAILURE_KINDS`); the other side is not blamed.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from envs.sandbox import PolicyError, SandboxConfig, SandboxedPolicy, require_layers
from fmsp.domain import Domain, PolicyCode


@dataclass
class MatchOutcome:
    """One played pair: both scores, or the failure of the policy that failed (scores are then None)."""

    score_a: float | None
    score_b: float | None
    failure_a: dict[str, Any] | None = None
    failure_b: dict[str, Any] | None = None
    details: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    cpu_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.failure_a is None and self.failure_b is None

    def to_dict(self) -> dict[str, Any]:
        """The `fmsp match` record: {"a": {"score", "failure"}, "b": {...}, "details", "wall_s", "cpu_s"}."""
        return {"a": {"score": self.score_a, "failure": self.failure_a},
                "b": {"score": self.score_b, "failure": self.failure_b},
                "details": self.details, "wall_s": self.wall_s, "cpu_s": self.cpu_s}  # fmt: skip


@dataclass
class BatchResult:
    """The outcomes of `Sandbox.play_all`, with the summary fields the search records."""

    outcomes: list[MatchOutcome]
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes)

    @property
    def value(self) -> list[dict[str, Any]]:
        """Per pair: {"score_a", "score_b", "details"} (scores None for a failed pair)."""
        return [{"score_a": o.score_a, "score_b": o.score_b, "details": o.details} for o in self.outcomes]

    def _first_failure(self) -> dict[str, Any] | None:
        return next((f for o in self.outcomes for f in (o.failure_a, o.failure_b) if f is not None), None)

    @property
    def error(self) -> str | None:
        failure = self._first_failure()
        return None if failure is None else f"policy {failure['policy']!r} failed ({failure['kind']}): {failure['message']}"

    @property
    def error_type(self) -> str | None:
        failure = self._first_failure()
        return None if failure is None else failure["kind"]

    @property
    def traceback(self) -> str | None:
        failure = self._first_failure()
        return None if failure is None else failure["detail"]

    @property
    def timed_out(self) -> bool:
        return self.error_type == "timeout"

    @property
    def cpu_s(self) -> float:
        return sum(o.cpu_s for o in self.outcomes)


@dataclass
class UnitTestResult:
    """A unit test of one policy: ok, or the error (assertion message or the policy's failure) and its detail."""

    ok: bool
    error: str | None = None
    traceback: str | None = None
    kind: str | None = None  # "assertion" or a failure kind

    @property
    def timed_out(self) -> bool:
        return self.kind == "timeout"


class Sandbox:
    """Plays FMSP matches and unit tests with every policy contained (see the module docstring)."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()

    def check(self) -> str:
        """The isolation layers in force (one line); SandboxUnavailable if one is missing and not `unsafe`."""
        return require_layers(self.config).describe()

    def policy(self, domain: Domain, policy: PolicyCode, label: str) -> SandboxedPolicy:
        """A not-yet-started process for `policy` with its side's interface."""
        interface = domain.interface(policy.side)
        return SandboxedPolicy(policy.code, label=label, config=self.config, methods=interface.methods,
                               name=policy.name, preload=interface.preload)  # fmt: skip

    def play_all(self, domain: Domain, pairs: Sequence[tuple[PolicyCode, PolicyCode]]) -> BatchResult:
        """Every (first-side, second-side) pair, in order; the next pair's processes start during this one."""
        t0 = time.monotonic()
        outcomes = []
        upcoming = self._start(domain, pairs[0]) if pairs else None
        for index, pair in enumerate(pairs):
            current = upcoming
            upcoming = self._start(domain, pairs[index + 1]) if index + 1 < len(pairs) else None
            outcomes.append(self._finish(domain, pair, current))
        return BatchResult(outcomes, time.monotonic() - t0)

    def play(self, domain: Domain, a: PolicyCode, b: PolicyCode) -> MatchOutcome:
        """One match of `a` (first side) against `b`."""
        return self.play_all(domain, [(a, b)]).outcomes[0]

    def unit_test(self, domain: Domain, policy: PolicyCode, side: str) -> UnitTestResult:
        """The domain's unit test on `policy` in its own process. The test looks at nothing but this policy's
        replies, so any exception it raises is this policy's failure (kind `invalid_action`, with the harness's
        traceback as detail), never the end of the run."""
        with self.policy(domain, policy, "candidate") as handle:
            try:
                domain.unit_test(handle, side)
            except AssertionError as exc:
                return UnitTestResult(False, str(exc) or "a unit-test assertion failed", None, "assertion")
            except PolicyError as exc:
                return UnitTestResult(False, str(exc), exc.detail, exc.kind)
            except Exception as exc:  # noqa: BLE001 - see the docstring
                error = PolicyError("candidate", "invalid_action", f"{type(exc).__name__}: {exc}",
                                    "".join(traceback.format_exception(exc, limit=-8)))  # fmt: skip
                return UnitTestResult(False, str(error), error.detail, error.kind)
        return UnitTestResult(True)

    def _start(self, domain: Domain, pair: tuple[PolicyCode, PolicyCode]) -> tuple[SandboxedPolicy, SandboxedPolicy]:
        handles = (self.policy(domain, pair[0], "a"), self.policy(domain, pair[1], "b"))
        for handle in handles:
            try:
                handle.start()
            except PolicyError:
                pass  # kept in the handle: the match reports it as this policy's failure
        return handles

    def _finish(self, domain: Domain, pair: tuple[PolicyCode, PolicyCode],
                handles: tuple[SandboxedPolicy, SandboxedPolicy]) -> MatchOutcome:  # fmt: skip
        t0 = time.monotonic()
        try:
            for handle in handles:
                handle.loaded()
            value = domain.play_match(*handles)
            outcome = MatchOutcome(float(value["score_a"]), float(value["score_b"]), details=value.get("details", {}))
        except PolicyError as exc:
            failed = {"policy": pair[0 if exc.label == "a" else 1].name, **exc.to_dict()}
            outcome = MatchOutcome(None, None, *((failed, None) if exc.label == "a" else (None, failed)))
        finally:
            for handle in handles:
                handle.close()
        outcome.wall_s = time.monotonic() - t0
        outcome.cpu_s = sum(h.cpu_s for h in handles)
        return outcome
