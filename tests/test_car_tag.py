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
from fmsp.domain import Domain
from fmsp.domains.car_tag import (
    closest_approach,
    initial_states,
    make_car_tag,
    make_config,
    play_match,
    simulate,
    simulate_scalar,
    unit_test,
)


class Constant:
    """A policy returning the same value for every game (a test fixture, not a strategy)."""

    def __init__(self, value):
        self.value = value

    def __call__(self, obs):
        return self.value


def code(cls_source: str, name: str = "p", side: str = "pursuer") -> dict:
    return {"name": name, "description": "", "code": cls_source, "side": side}


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
    out = play_match(
        code("class C:\n    name='c'\n    description=''\n    def __call__(self, o):\n        return 1.0\n"),
        code(_FLEE_SRC, "flee", "evader"),
        cfg,
    )
    assert out["score_a"] == 0.0 and out["score_b"] == 1.0


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
    domain = make_car_tag()
    assert isinstance(domain, Domain)
    assert domain.sides == ("pursuer", "evader")
    for side in domain.sides:
        baselines = domain.baselines(side)
        assert len(baselines) == 2
        for policy in baselines:
            unit_test(policy.to_dict(), side, domain.match_config())
        assert "n_games" in domain.task_prompt(side)
    with pytest.raises(AssertionError, match="outside"):
        unit_test(
            code(
                "class C:\n    name='c'\n    description='d'\n    def __call__(self, o):\n        return 3.0\n"
            ),
            "pursuer",
            domain.match_config(),
        )
    with pytest.raises(AssertionError, match="NaN"):
        unit_test(
            code(
                "class C:\n    name='c'\n    description='d'\n    def __call__(self, o):\n        return float('nan')\n",
                side="evader",
            ),
            "evader",
            domain.match_config(),
        )
    with pytest.raises(AssertionError, match="exactly one class"):
        unit_test(code("x = 1\n"), "pursuer", domain.match_config())
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
    config = make_car_tag().match_config()
    with pytest.raises(AssertionError, match="plays a single game but not a batch of 8") as info:
        unit_test(code(PER_GAME), "pursuer", config)
    assert "np.arctan2" in str(info.value)
    # a policy that fails for another reason gets no such hint
    broken = "class C:\n    name='c'\n    description='d'\n    def __call__(self, o):\n        return 1 / 0\n"
    with pytest.raises(AssertionError, match="ZeroDivisionError") as info:
        unit_test(code(broken), "pursuer", config)
    assert "batch" not in str(info.value)
    assert "Per-game code" in make_car_tag().task_prompt("evader")


def test_benchmark_pairing_time(capsys):
    domain = make_car_tag()
    p, e = domain.baselines("pursuer")[1], domain.baselines("evader")[0]
    start = time.perf_counter()
    out = play_match(p.to_dict(), e.to_dict(), domain.match_config())  # 100 games x up to 1000 steps
    never = simulate(Constant(1.0), FleeDirectly(), domain.match_config())  # all 100 x 1000 steps
    elapsed = time.perf_counter() - start
    assert never.survived.min() == 1000 and 0.0 <= out["score_b"] < 0.1
    with capsys.disabled():
        print(f"\n[car_tag] one baseline pairing + one full 100x1000-step pairing: {elapsed:.3f} s")


def test_match_and_unit_test_run_inside_the_sandbox():
    from fmsp.sandbox import Sandbox

    domain = make_car_tag(n_games=20)
    p, e = domain.baselines("pursuer")[0].to_dict(), domain.baselines("evader")[1].to_dict()
    result = Sandbox().run(domain.match_entry, [[p, e, domain.match_config()]], domain.allowed_imports)
    assert result.ok, result.error
    assert result.value[0] == play_match(p, e, domain.match_config())
    sneaky = code(
        "import os\nclass C:\n    name='c'\n    description='d'\n    def __call__(self, o):\n        return 0.0\n"
    )
    result = Sandbox().run(
        domain.unit_test_entry, [[sneaky, "pursuer", domain.match_config()]], domain.allowed_imports
    )
    assert not result.ok and "not allowed" in result.error
