"""Car Tag: geometry, timing, action repair, vectorised == scalar reference, determinism, speed."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from fmsp.baselines.car_tag.evader_flee import FleeDirectly
from fmsp.baselines.car_tag.evader_flee_and_turn import FleeAndTurn
from fmsp.baselines.car_tag.pursuer_proportional_navigation import ProportionalNavigation
from fmsp.baselines.car_tag.pursuer_pure_pursuit import PurePursuit
from fmsp.domain import Domain, PolicyCode
from fmsp.domains.car_tag import (
    closest_approach,
    initial_states,
    make_car_tag,
    make_config,
    simulate,
    simulate_scalar,
)
from fmsp.sandbox import Sandbox


class Constant:
    """A policy returning the same value for every game (a test fixture, not a strategy)."""

    def __init__(self, value):
        self.value = value

    def __call__(self, obs):
        return self.value


def code(cls_source: str, name: str = "p", side: str = "pursuer") -> PolicyCode:
    return PolicyCode(name, "", cls_source, side)


def test_closest_approach_catches_a_pass_through():
    # pursuer passes straight through the evader between two step ends: end points are 1.0 away each
    rel = np.array([[1.0, 0.1]])  # evader relative to pursuer
    vel = np.array([[-2.0, 0.0]])  # relative velocity (evader - pursuer)
    assert closest_approach(rel, vel, 1.0)[0] == pytest.approx(0.1)
    assert closest_approach(rel, np.array([[1.0, 0.0]]), 1.0)[0] == pytest.approx(math.hypot(1.0, 0.1))


@pytest.mark.parametrize(
    ("evader_heading", "gap", "expected"),
    [
        (0.0, 5.0, 9),  # evader flees along the pursuer's line: closing 0.5/step, gap 0.5 after 9 steps
        (math.pi, 6.0, 3),  # head-on: closing 1.5/step, the gap crosses 0.5 during step index 3
    ],
)
def test_capture_timing_on_a_line(evader_heading, gap, expected):
    cfg = make_config(n_games=1, max_steps=50)
    starts = np.array([[0.0, 0.0, 0.0, gap, 0.0]])  # pursuer at the origin facing +x, evader ahead
    result = simulate(Constant(0.0), Constant(evader_heading), cfg, starts=starts)
    assert result.survived[0] == expected
    assert result.evader_score == pytest.approx(expected / 50)


def test_never_caught_when_pursuer_circles():
    cfg = make_config(n_games=10, max_steps=300, start_distance=[4.0, 6.0])
    # the pursuer turns full left forever (a circle of radius 1); the evader flees: never caught
    result = simulate(Constant(1.0), FleeDirectly(), cfg)
    assert (result.survived == 300).all()
    assert result.evader_score == 1.0
    out = Sandbox().play(
        make_car_tag(n_games=10, max_steps=300, start_distance=[4.0, 6.0]),
        code("class C:\n    name='c'\n    description=''\n    def __call__(self, o):\n        return 1.0\n"),
        code(_FLEE_SRC, "flee", "evader"),
    )
    assert out.score_a == 0.0 and out.score_b == 1.0


_FLEE_SRC = (
    "import numpy as np\nclass F:\n    name='f'\n    description=''\n"
    "    def __call__(self, o):\n        return np.arctan2(o['evader_y']-o['pursuer_y'], o['evader_x']-o['pursuer_x'])\n"
)


def test_actions_are_clipped_wrapped_and_nan_counted():
    cfg = make_config(n_games=4, max_steps=20)
    a = simulate(Constant(7.0), Constant(1.0 + 2 * math.pi), cfg)
    b = simulate(Constant(1.0), Constant(1.0), cfg)
    np.testing.assert_array_equal(a.survived, b.survived)  # 7 -> 1 and psi wrapped by 2 pi
    assert a.pursuer_stats.out_of_range > 0 and a.evader_stats.out_of_range > 0
    c = simulate(Constant(float("nan")), Constant(float("inf")), cfg)
    d = simulate(Constant(0.0), Constant(0.0), cfg)
    np.testing.assert_array_equal(c.survived, d.survived)
    assert c.details()["pursuer_invalid_actions"] > 0 and c.details()["evader_invalid_actions"] > 0
    with pytest.raises(ValueError, match="shape"):
        simulate(Constant(np.zeros(3)), Constant(0.0), cfg)
    with pytest.raises(ValueError, match="expected a float"):
        simulate(Constant("left"), Constant(0.0), cfg)


@pytest.mark.parametrize("pursuer", [PurePursuit, ProportionalNavigation])
@pytest.mark.parametrize("evader", [FleeDirectly, FleeAndTurn])
def test_vectorised_equals_scalar_reference(pursuer, evader):
    cfg = make_config(n_games=12, max_steps=200, seed=3)
    np.testing.assert_array_equal(
        simulate(pursuer(), evader(), cfg).survived, simulate_scalar(pursuer, evader, cfg)
    )


def test_deterministic_by_seed():
    cfg = make_config(n_games=20, max_steps=200, seed=5)
    a = simulate(PurePursuit(), FleeAndTurn(), cfg).survived
    assert (a == simulate(PurePursuit(), FleeAndTurn(), cfg).survived).all()
    assert not np.array_equal(initial_states(cfg), initial_states({**cfg, "seed": 6}))


def test_domain_contract_baselines_and_unit_tests():
    domain, sandbox = make_car_tag(), Sandbox()
    assert isinstance(domain, Domain)
    assert domain.sides == ("pursuer", "evader")
    for side in domain.sides:
        baselines = domain.baselines(side)
        assert len(baselines) == 2
        for policy in baselines:
            result = sandbox.unit_test(domain, policy, side)
            assert result.ok, result.error
        assert "n_games" in domain.task_prompt(side)
    out_of_range = code("class C:\n    name='c'\n    description='d'\n    def __call__(self, o):\n        return 3.0\n")
    result = sandbox.unit_test(domain, out_of_range, "pursuer")
    assert not result.ok and result.kind == "assertion" and "outside [-1, 1]" in result.error
    nan = code("class C:\n    name='c'\n    description='d'\n    def __call__(self, o):\n        return float('nan')\n",
               side="evader")  # fmt: skip
    result = sandbox.unit_test(domain, nan, "evader")
    assert not result.ok and "NaN" in result.error
    result = sandbox.unit_test(domain, code("x = 1\n"), "pursuer")
    assert not result.ok and result.kind == "load" and "exactly one class" in result.error
    wrong_shape = code("class C:\n    name='c'\n    description='d'\n    def __call__(self, o):\n        return [0.0] * 3\n")
    result = sandbox.unit_test(domain, wrong_shape, "pursuer")
    assert not result.ok and "shape (3,)" in result.error
    with pytest.raises(ValueError, match="unknown car_tag config"):
        make_car_tag(speed=2)


PER_GAME = """import math


class Chase:
    name = "chase"
    description = "per-game code: steer at the evader with math on scalars"

    def __call__(self, obs):
        bearing = math.atan2(obs["evader_y"] - obs["pursuer_y"], obs["evader_x"] - obs["pursuer_x"])
        error = (bearing - obs["pursuer_heading"] + math.pi) % (2 * math.pi) - math.pi
        return max(-1.0, min(1.0, error))
"""


def test_unit_test_names_the_batch_api_when_per_game_code_fails_on_a_batch():
    domain, sandbox = make_car_tag(), Sandbox()
    result = sandbox.unit_test(domain, code(PER_GAME), "pursuer")
    assert not result.ok and "plays a single game but not a batch of 8" in result.error
    assert "np.arctan2" in result.error
    # a policy that fails for another reason gets no such hint
    broken = "class C:\n    name='c'\n    description='d'\n    def __call__(self, o):\n        return 1 / 0\n"
    result = sandbox.unit_test(domain, code(broken), "pursuer")
    assert not result.ok and "ZeroDivisionError" in result.error and "batch" not in result.error
    assert "Per-game code" in domain.task_prompt("evader")


def test_benchmark_pairing_time(capsys):
    domain = make_car_tag()
    start = time.perf_counter()
    out = simulate(PurePursuit(), FleeDirectly(), domain.match_config())  # 100 games x up to 1000 steps
    never = simulate(Constant(1.0), FleeDirectly(), domain.match_config())  # all 100 x 1000 steps
    elapsed = time.perf_counter() - start
    assert never.survived.min() == 1000 and 0.0 <= out.evader_score < 0.1
    with capsys.disabled():
        print(f"\n[car_tag] one baseline pairing + one full 100x1000-step pairing: {elapsed:.3f} s")


def test_sandboxed_match_equals_the_in_process_game():
    """Both baselines in their own processes, the game in the harness: the very same games as in-process."""
    domain = make_car_tag(n_games=20)
    p, e = domain.baselines("pursuer")[0], domain.baselines("evader")[1]  # proportional navigation, flee-and-turn
    outcome = Sandbox().play(domain, p, e)
    assert outcome.ok, (outcome.failure_a, outcome.failure_b)
    reference = simulate(ProportionalNavigation(), FleeAndTurn(), domain.match_config())
    assert outcome.score_b == reference.evader_score and outcome.details == reference.details()
    assert 0.0 < outcome.score_b < 1.0
