"""SEPO games as FMSP domains: scripted baselines as code, hand-checked IPD scores, unit tests, sandbox."""

from __future__ import annotations

import pytest

from envs import GAMES, make_game, make_strategy, play_episode
from envs.sandbox.rng import private_copy
from fmsp.domain import Domain, PolicyCode
from fmsp.domains import make_domain
from fmsp.domains.sepo_games import episode_rng, scripted_policy_code
from fmsp.sandbox import Sandbox

ALWAYS_FIRST = """class First:
    name = "first_legal"
    description = "always the first legal action"
    def act(self, view):
        return view["legal_actions"][0]
"""


def policy(code: str, name: str = "p", side: str = "exploiter") -> PolicyCode:
    return PolicyCode(name, "", code, side)


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox()


@pytest.mark.parametrize("game", list(GAMES))
def test_baselines_pass_unit_tests_and_scores_are_in_range(game, sandbox):
    domain = make_domain(game, n_episodes=4)
    assert isinstance(domain, Domain) and domain.sides == ("exploiter", "cooperator")
    exploiters, cooperators = domain.baselines("exploiter"), domain.baselines("cooperator")
    assert exploiters and cooperators
    assert len({m.name for m in cooperators}) == len(cooperators)  # a name in two pools is one baseline
    for side, members in (("exploiter", exploiters), ("cooperator", cooperators)):
        for member in members:
            result = sandbox.unit_test(domain, member, side)
            assert result.ok, result.error
        assert "legal_actions" in domain.task_prompt(side)
    batch = sandbox.play_all(domain, [(a, cooperators[0]) for a in exploiters])
    assert batch.ok, batch.error
    assert all(0.0 <= o.score_a <= 1.0 and 0.0 <= o.score_b <= 1.0 for o in batch.outcomes)


def test_ipd_scores_match_hand_computation(sandbox):
    domain = make_domain("ipd", n_episodes=2)
    ad = scripted_policy_code("ipd", "always_defect", "exploiter")
    tft = scripted_policy_code("ipd", "tit_for_tat", "cooperator")
    allc = scripted_policy_code("ipd", "always_cooperate", "cooperator")
    out, vs_allc, mutual = sandbox.play_all(domain, [(ad, tft), (ad, allc), (tft, allc)]).outcomes
    # 8 rounds: T then 7 x P for AD, S then 7 x P for TFT; scale [S, T] = [0, 5]
    assert out.score_a == pytest.approx((5 + 7 * 1) / 8 / 5)
    assert out.score_b == pytest.approx((0 + 7 * 1) / 8 / 5)
    assert vs_allc.score_a == pytest.approx(1.0)  # T every round
    assert mutual.score_a == mutual.score_b == pytest.approx(3 / 5)  # R every round


def test_unit_test_rejects_illegal_and_broken_policies(sandbox):
    domain = make_domain("ipd")
    assert sandbox.unit_test(domain, policy(ALWAYS_FIRST), "exploiter").ok
    illegal = ALWAYS_FIRST.replace('view["legal_actions"][0]', '"BETRAY"')
    result = sandbox.unit_test(domain, policy(illegal), "exploiter")
    assert not result.ok and result.kind == "invalid_action" and "'BETRAY', not one of" in result.error
    broken = ALWAYS_FIRST.replace('view["legal_actions"][0]', "view['nope']")
    result = sandbox.unit_test(domain, policy(broken, side="cooperator"), "cooperator")
    assert not result.ok and result.kind == "exception" and "KeyError" in result.error
    assert "view['nope']" in result.traceback  # the policy's own traceback, for the repair prompt
    result = sandbox.unit_test(domain, policy("def act(view):\n    return 'DEFECT'\n"), "exploiter")
    assert not result.ok and "exactly one class" in result.error
    with pytest.raises(ValueError, match="choose one of"):
        make_domain("chess")
    with pytest.raises(ValueError, match="valid: n_episodes"):
        make_domain("ipd", rounds=3)


def test_sandboxed_match_equals_the_in_process_games(sandbox):
    """Kuhn (sequential, private cards) with both scripted baselines sandboxed: every episode is the one the
    scripted strategies play in-process given the same keyed rngs (the deal from `episode_rng` under the run's
    key, each seat the keyed private copy of its rng; the rng crosses the pipe as its exact state)."""
    domain = make_domain("kuhn", n_episodes=6)
    a, b = domain.baselines("exploiter")[0], domain.baselines("cooperator")[0]
    outcome = sandbox.play(domain, a, b)
    assert outcome.ok, (outcome.failure_a, outcome.failure_b)
    game = make_game("kuhn")
    lo, hi = game.payoff_range
    totals, rounds = [0.0, 0.0], 0
    key = sandbox.config.rng_key

    class Keyed:  # what SandboxedStrategy.reset hands the policy in place of the harness's rng
        def __init__(self, name):
            self.inner, self.name = make_strategy("kuhn", name), name

        def reset(self, game, seat, rng):
            self.inner.reset(game, seat, private_copy(key, rng, "policy"))

        def act(self, view):
            return self.inner.act(view)

    for i in range(6):
        seats = [Keyed(a.name), Keyed(b.name)]
        seats = seats if i % 2 == 0 else seats[::-1]
        episode = play_episode(game, seats, episode_rng(key, 0, i))  # the domain's seed 0
        totals[0] += episode.totals[i % 2]
        totals[1] += episode.totals[1 - i % 2]
        rounds += len(episode.rounds)
    assert outcome.score_a == pytest.approx((totals[0] / rounds - lo) / (hi - lo), abs=1e-12)
    assert outcome.score_b == pytest.approx((totals[1] / rounds - lo) / (hi - lo), abs=1e-12)
