"""Sandbox v3 (issue 35), the harness side: a reply cannot stall or crash the harness, and `fmsp match` / `fmsp run`
always write their result. Each test plays the attack that got through on the earlier harness:
- a tagged array whose shape holds huge integers (the harness multiplied them before any bound);
- Gandalf defences with a 2.6 MB regex, a regex nested 600 groups deep, and `input_regex: null` (the harness
  compiled and listed them itself: 25 s of the harness's time, a RecursionError, a TypeError);
- a unit test that raises something other than an assertion on a candidate's reply (`fmsp run`'s path).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from envs.sandbox import SandboxConfig, SandboxedPolicy
from envs.sandbox.protocol import decode, encode
from fmsp.domain import PolicyCode
from fmsp.domains import make_domain
from fmsp.domains.gandalf import level_defender
from fmsp.match import main as match_main
from fmsp.sandbox import Sandbox

REPO = Path(__file__).resolve().parent.parent
HUGE = 10**4000  # 4001 digits: within Python's default limit for str <-> int, so it crosses the pipe as JSON

SHAPE_BOMB = '''
class ShapeBomb:
    name = "shape_bomb"
    description = "replies with a tagged array whose shape holds huge integers"

    def __call__(self, obs):
        return {"__nd__": "<f8", "shape": [10**4000] * 600, "b64": ""}
'''


def test_a_shape_of_huge_integers_is_refused_before_any_product():
    """600 entries of 4001 digits: the product of the old decoder grew to 2.4 million digits (tens of seconds of
    the harness's CPU). A shape longer than 32 entries is refused before its entries are read, and a huge entry
    before it is multiplied."""
    with pytest.raises(ValueError, match="a shape of 600 entries"):
        decode(encode({"__nd__": "<f8", "shape": [HUGE] * 600, "b64": ""}), finite=True)
    with pytest.raises(ValueError, match="bad array shape entry"):
        decode(encode({"__nd__": "<f8", "shape": [HUGE] * 32, "b64": ""}), finite=True)
    empty = decode(encode({"v": {"__nd__": "<f8", "shape": [0, 5], "b64": ""}}))["v"]
    assert empty.shape == (0, 5)  # an empty array of five columns is still data


def test_a_shape_bomb_reply_is_the_policys_protocol_failure_and_the_match_is_recorded(tmp_path):
    hostile, out = tmp_path / "bomb.py", tmp_path / "match.json"
    hostile.write_text(SHAPE_BOMB)
    status = match_main(["--domain", "car_tag", "--games", "2", "--call-timeout", "2", "--json", str(out),
                         "--a", str(REPO / "fmsp/baselines/car_tag/pursuer_pure_pursuit.py"), "--b", str(hostile)])  # fmt: skip
    record = json.loads(out.read_text())
    assert status == 0 and record["a"]["failure"] is None, record
    assert record["b"]["failure"]["kind"] == "protocol" and "a shape of 600 entries" in record["b"]["failure"]["message"]


def _defender(body: str) -> PolicyCode:
    code = f"class D:\n    name = 'd'\n    description = 'hostile defence'\n\n    def defence(self):\n        {body}\n"
    return PolicyCode("d", "", code, "defender")


# patterns: 2.6 MB of groups (compiles, slowly), the same left open (does not compile, after all the parsing),
# 600 nested groups (RecursionError in the compiler), and a null list
DEFENCES = {
    "huge_regex": "return {'input_regex': ['(a)' * 870_000]}",
    "huge_bad_regex": "return {'input_regex': ['(a)' * 870_000 + '(']}",
    "deep_regex": "return {'input_regex': ['(' * 600 + 'a' + ')' * 600]}",
    "null_regex": "return {'input_regex': None}",
    "regex_string": "return {'input_regex': 'password'}",
    "bad_keys": "return {('x' * 10_000): 1}",
}


@pytest.fixture()
def harness_compiles(monkeypatch) -> list[int]:
    """The lengths of every pattern of more than 10,000 characters that the harness process compiles."""
    seen: list[int] = []
    compile_ = re._compile

    def spy(pattern, flags):
        if isinstance(pattern, str) and len(pattern) > 10_000:
            seen.append(len(pattern))
        return compile_(pattern, flags)

    monkeypatch.setattr(re, "_compile", spy)
    return seen


@pytest.mark.parametrize("name", sorted(DEFENCES))
def test_a_hostile_gandalf_defence_is_the_defenders_failure_on_its_own_budget(name, harness_compiles, tmp_path):
    """Through `fmsp match`: the record is written with exit 0, the defender fails (invalid, or out of time while
    its own process compiles the pattern), the attacker is not blamed, and the harness compiled no pattern of the
    defender's (the earlier harness compiled it in `validate_defence`, on its own time)."""
    defender, out = tmp_path / f"{name}.py", tmp_path / "match.json"
    defender.write_text(_defender(DEFENCES[name]).code)
    status = match_main(["--domain", "gandalf", "--domain-config", '{"target": "scripted-test-double"}',
                         "--call-timeout", "2", "--json", str(out),
                         "--a", str(REPO / "fmsp/baselines/gandalf/attacker_direct_ask.py"), "--b", str(defender)])  # fmt: skip
    record = json.loads(out.read_text())
    assert status == 0 and record["a"]["failure"] is None, record
    assert record["b"]["failure"]["kind"] in {"invalid_action", "timeout"}, record["b"]
    assert harness_compiles == []
    if name in ("deep_regex", "null_regex", "regex_string"):  # cheap to reject: the reason is given
        assert record["b"]["failure"]["kind"] == "invalid_action", record["b"]


@pytest.mark.parametrize("name", ["deep_regex", "null_regex", "bad_keys"])
def test_fmsp_runs_unit_test_of_a_hostile_defence_fails_the_candidate_not_the_run(name):
    domain = make_domain("gandalf", target="scripted-test-double")
    result = Sandbox(SandboxConfig(call_timeout_s=5)).unit_test(domain, _defender(DEFENCES[name]), "defender")
    assert not result.ok and result.kind in {"assertion", "invalid_action"}, result


def test_a_unit_test_that_raises_on_a_reply_is_the_candidates_failure():
    """A domain whose unit test trips over a candidate's reply (a TypeError, not an assertion): the candidate
    fails with `invalid_action` and the traceback; the run goes on."""

    class Fragile:
        name, sides = "fragile", ("x",)

        def interface(self, side):
            return make_domain("gandalf", target="scripted-test-double").interface("defender")

        def unit_test(self, policy, side):
            list(policy.call("defence")["input_regex"])  # None -> TypeError

    result = Sandbox().unit_test(Fragile(), _defender(DEFENCES["null_regex"]), "x")
    assert not result.ok and result.kind == "invalid_action" and "TypeError" in result.error, result
    assert "list(policy.call" in result.traceback


def test_fmsp_match_writes_its_record_when_the_harness_itself_fails(tmp_path, monkeypatch, capsys):
    def broken(self, domain, a, b):
        raise KeyError("harness bug")

    monkeypatch.setattr(Sandbox, "play", broken)
    out = tmp_path / "match.json"
    baseline = REPO / "fmsp/baselines/car_tag"
    status = match_main(["--domain", "car_tag", "--games", "1", "--json", str(out),
                         "--a", str(baseline / "pursuer_pure_pursuit.py"), "--b", str(baseline / "evader_flee.py")])  # fmt: skip
    record = json.loads(out.read_text())
    assert status == 1 and record["a"]["score"] is None and record["b"]["failure"] is None
    assert "KeyError: 'harness bug'" in record["harness_error"] and "the harness failed" in capsys.readouterr().err


def test_a_benign_level_defender_still_validates_and_plays():
    domain = make_domain("gandalf", target="scripted-test-double")
    sandbox = Sandbox()
    for level in (5, 7):
        assert sandbox.unit_test(domain, level_defender(level), "defender").ok
    with SandboxedPolicy(level_defender(5).code, label="b", methods=("defence",)) as policy:
        assert policy.call("defence")["input_regex"] == ["password", "secret"]
