"""SEPO games as FMSP domains: scripted baselines as code, hand-checked IPD scores, unit tests, sandbox."""

from __future__ import annotations

import pytest

from envs import GAMES
from fmsp.domain import Domain
from fmsp.domains import make_domain
from fmsp.domains.sepo_games import play_match, scripted_policy_code, unit_test
from fmsp.sandbox import Sandbox

ALWAYS_FIRST = """class First:
    name = "first_legal"
    description = "always the first legal action"
    def act(self, view):
        return view["legal_actions"][0]
"""


def policy(code: str, name: str = "p", side: str = "exploiter") -> dict:
    return {"name": name, "description": "", "code": code, "side": side}


@pytest.mark.parametrize("game", list(GAMES))
def test_baselines_pass_unit_tests_and_scores_are_in_range(game):
    domain = make_domain(game, n_episodes=4)
    assert isinstance(domain, Domain) and domain.sides == ("exploiter", "cooperator")
    cfg = domain.match_config()
    exploiters, cooperators = domain.baselines("exploiter"), domain.baselines("cooperator")
    assert exploiters and cooperators
    assert len({m.name for m in cooperators}) == len(cooperators)  # a name in two pools is one baseline
    for side, members in (("exploiter", exploiters), ("cooperator", cooperators)):
        for member in members:
            unit_test(member.to_dict(), side, cfg)
        assert "legal_actions" in domain.task_prompt(side)
    for a in exploiters:
        out = play_match(a.to_dict(), cooperators[0].to_dict(), cfg)
        assert 0.0 <= out["score_a"] <= 1.0 and 0.0 <= out["score_b"] <= 1.0


def test_ipd_scores_match_hand_computation():
    domain = make_domain("ipd", n_episodes=2)
    cfg = domain.match_config()
    ad = scripted_policy_code("ipd", "always_defect", "exploiter").to_dict()
    tft = scripted_policy_code("ipd", "tit_for_tat", "cooperator").to_dict()
    allc = scripted_policy_code("ipd", "always_cooperate", "cooperator").to_dict()
    out = play_match(
        ad, tft, cfg
    )  # 8 rounds: T then 7 x P for AD, S then 7 x P for TFT; scale [S, T] = [0, 5]
    assert out["score_a"] == pytest.approx((5 + 7 * 1) / 8 / 5)
    assert out["score_b"] == pytest.approx((0 + 7 * 1) / 8 / 5)
    assert play_match(ad, allc, cfg)["score_a"] == pytest.approx(1.0)  # T every round
    out = play_match(tft, allc, cfg)
    assert out["score_a"] == out["score_b"] == pytest.approx(3 / 5)  # R every round


def test_unit_test_rejects_illegal_and_broken_policies():
    cfg = make_domain("ipd").match_config()
    unit_test(policy(ALWAYS_FIRST), "exploiter", cfg)
    illegal = ALWAYS_FIRST.replace('view["legal_actions"][0]', '"BETRAY"')
    with pytest.raises(AssertionError, match="illegal action"):
        unit_test(policy(illegal), "exploiter", cfg)
    broken = ALWAYS_FIRST.replace('view["legal_actions"][0]', "view['nope']")
    with pytest.raises(AssertionError, match="KeyError"):
        unit_test(policy(broken), "cooperator", cfg)
    with pytest.raises(AssertionError, match="exactly one class"):
        unit_test(policy("def act(view):\n    return 'DEFECT'\n"), "exploiter", cfg)
    with pytest.raises(ValueError, match="choose one of"):
        make_domain("chess")
    with pytest.raises(ValueError, match="valid: n_episodes"):
        make_domain("ipd", rounds=3)


def test_match_runs_inside_the_sandbox():
    domain = make_domain("kuhn", n_episodes=6)
    a, b = domain.baselines("exploiter")[0], domain.baselines("cooperator")[0]
    result = Sandbox().run(
        domain.match_entry, [[a.to_dict(), b.to_dict(), domain.match_config()]], domain.allowed_imports
    )
    assert result.ok, result.error
    assert result.value[0] == play_match(a.to_dict(), b.to_dict(), domain.match_config())
