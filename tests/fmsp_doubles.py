"""Test doubles, spies and a toy domain for the FMSP core tests.

`ScriptedFMTestDouble` stands in for a strong code-writing FM (which cannot run here): it is `fmsp.fm.ScriptedFM`
loaded with the hand-written policies below. `RecordingFM` is a spy around a real FM client (it keeps the
messages of every call); `assert_honest_failed_iteration` is the shared check for runs of real weak models.
`NumberDuel` is a tiny real domain (sides "high" and "low" pick a number in [0, 1] each round; the one closer to
a hidden target wins the round); its harness runs here, the policies in sandboxed processes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from envs.base import act_all
from envs.sandbox import SandboxedPolicy
from fmsp.domain import PolicyCode, PolicyInterface
from fmsp.domains import DOMAINS
from fmsp.fm import ScriptedFM

TASK = (
    "Write a Python class `Policy` with a method `act(self, obs: dict) -> float` returning a number in [0, 1]. "
    "`obs` has keys 'round' (int) and 'last_target' (float or None). Each round, the player whose number is "
    "closer to a hidden target drawn from Beta(2, 5) wins. Allowed imports: math, random."
)


def _policy(name: str, body: str, side: str = "high") -> PolicyCode:
    code = f"class Policy:\n    def act(self, obs):\n        {body}\n"
    return PolicyCode(name=name, description=f"returns {body.removeprefix('return ')}", code=code, side=side)


BASELINES = {
    "high": [_policy("half", "return 0.5", "high")],
    "low": [_policy("third", "return 0.3", "low")],
}
# Several baselines per side, of different strength (the target's mode is 0.2, its mean 2/7).
MANY_BASELINES = {
    "high": [_policy("half", "return 0.5", "high"), _policy("fifth", "return 0.2", "high"),
             _policy("most", "return 0.9", "high")],
    "low": [_policy("third", "return 0.3", "low"), _policy("tenth", "return 0.1", "low")],
}  # fmt: skip

# Hand-written "FM outputs": distinct, working policies (plus one buggy one to exercise repair).
SCRIPTED_POLICIES = [
    "class Policy:\n    def act(self, obs):\n        return 0.28\n",
    "import math\n\nclass Policy:\n    def act(self, obs):\n        return 0.25 + 0.05 * math.sin(obs['round'])\n",
    "class Policy:\n    def act(self, obs)\n        return 0.2\n",  # syntax error: the repair loop must see it
    "class Policy:\n    def __init__(self):\n        self.seen = []\n    def act(self, obs):\n"
    "        if obs['last_target'] is not None:\n            self.seen.append(obs['last_target'])\n"
    "        return sum(self.seen) / len(self.seen) if self.seen else 0.3\n",
    "import random\n\nclass Policy:\n    def __init__(self):\n        self.rng = random.Random(0)\n"
    "    def act(self, obs):\n        return self.rng.uniform(0.2, 0.35)\n",
]


def ScriptedFMTestDouble(judge_answers: list[str] | None = None) -> ScriptedFM:  # noqa: N802 - named double
    """The named FM test double: cycles through SCRIPTED_POLICIES and the given judge answers."""
    return ScriptedFM(policies=SCRIPTED_POLICIES, judge_answers=judge_answers or ["Decision: Yes"])


def _pick(policy: SandboxedPolicy, value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise policy.failure("invalid_action", f"act must return a float, got {type(value).__name__}")
    return float(value)


def duel_match(a: SandboxedPolicy, b: SandboxedPolicy, config: dict) -> dict[str, Any]:
    """Play `config['games']` games of `config['rounds']` rounds (fresh instances per game); scores are mean
    round-win fractions."""
    rng = random.Random(config["seed"])
    wins = [0.0, 0.0]
    for _ in range(config["games"]):
        a.new_instance()
        b.new_instance()
        last = None
        for r in range(config["rounds"]):
            target = rng.betavariate(2, 5)
            obs = {"round": r, "last_target": last}
            picks = [_pick(p, v) for p, v in zip((a, b), act_all([(a, obs), (b, obs)]))]
            da, db = abs(picks[0] - target), abs(picks[1] - target)
            wins[0] += 1.0 if da < db else 0.5 if da == db else 0.0
            wins[1] += 1.0 if db < da else 0.5 if da == db else 0.0
            last = target
    total = config["games"] * config["rounds"]
    return {"score_a": wins[0] / total, "score_b": wins[1] / total, "details": {"rounds": total}}


def duel_unit_test(policy: SandboxedPolicy) -> None:
    """A policy must construct, and return a float in [0, 1] for 20 rounds."""
    for r in range(20):
        value = policy.call("act", {"round": r, "last_target": 0.3 if r else None})
        assert isinstance(value, int | float), f"act must return a float, got {type(value).__name__}"
        assert 0.0 <= value <= 1.0, f"act returned {value}, outside [0, 1]"


class NumberDuel:
    """A toy `fmsp.domain.Domain` for tests."""

    name = "number_duel"
    sides = ("high", "low")
    allowed_imports = ("math", "random")

    def __init__(self, games: int = 5, rounds: int = 20, seed: int = 0,
                 baselines: dict[str, list[PolicyCode]] | None = None) -> None:  # fmt: skip
        self.config = {"games": games, "rounds": rounds, "seed": seed}
        self._baselines = baselines or BASELINES

    def task_prompt(self, side: str) -> str:
        return f"You write policies for the side '{side}'. {TASK}"

    def baselines(self, side: str) -> list[PolicyCode]:
        return list(self._baselines[side])

    def match_config(self) -> dict[str, Any]:
        return dict(self.config)

    def interface(self, side: str) -> PolicyInterface:
        return PolicyInterface(("act",))

    def play_match(self, a: SandboxedPolicy, b: SandboxedPolicy) -> dict[str, Any]:
        return duel_match(a, b, self.config)

    def unit_test(self, policy: SandboxedPolicy, side: str) -> None:
        duel_unit_test(policy)


class RecordingFM:
    """Wraps a real FM client and keeps the messages of every call (to check what the repair prompt carried)."""

    def __init__(self, fm) -> None:
        self.fm, self.calls = fm, []

    def __getattr__(self, name):
        return getattr(self.fm, name)

    def complete(self, messages, **kw):
        self.calls.append([dict(m) for m in messages])
        return self.fm.complete(messages, **kw)


def run_that_fails(config: Any, **kwargs: Any) -> dict:
    """`fmsp.run.run` of a run whose every iteration fails: it must raise RunFailed after writing its summary,
    whose status says so; returns that summary."""
    from fmsp import run as fmsp_run

    with pytest.raises(fmsp_run.RunFailed, match="every iteration failed"):
        fmsp_run.run(config, **kwargs)
    summary = json.loads((Path(config.output_dir) / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["failed_because"], summary
    return summary


def assert_honest_failed_iteration(run_dir: Path, summary: dict, calls: list, max_tokens: int) -> None:
    """One iteration whose two attempts (generate + one repair) both fail: records, counters, usage agree."""
    (rec,) = [json.loads(line) for line in (run_dir / "iterations.jsonl").read_text().splitlines()]
    assert rec["outcome"] == "unit_test_failed" and rec["candidate"] is None, rec
    assert len(rec["attempts"]) == 2 == len(calls)
    assert all(a["stage"] in ("format", "unit_test", "timeout") and a["error"] for a in rec["attempts"])
    counters = summary["counters"]
    assert counters["unit_test_failures"] == 2 and counters["repair_attempts"] == 1
    assert counters["added"] == counters["replaced"] == counters["rejected"] == 0
    # The repair call continues the conversation with the first answer and its error.
    assert calls[1][: len(calls[0])] == calls[0] and calls[1][-2]["role"] == "assistant"
    assert rec["attempts"][0]["error"][:60] in calls[1][-1]["content"]
    usage = summary["fm_usage"]
    assert usage["calls"] == 2 and rec["fm_usage"] == usage
    assert 0 < usage["completion_tokens"] <= 2 * max_tokens and usage["prompt_tokens"] > 0
    assert summary["archive_sizes"] == {"high": 1, "low": 1}  # the baselines only


# The toy domain is a name FMSPConfig accepts in the tests (runs are given the NumberDuel object itself).
DOMAINS.setdefault("number_duel", ("fmsp_doubles", "NumberDuel"))
