"""Car Tag: the homicidal-chauffeur pursuit-evasion game on the unbounded plane (FMSP's first domain).

Kinematics per step (heading angles in radians, counter-clockwise from the +x axis, dt = `dt`):
    pursuer: heading += u * max_turn_rate * dt with u in [-1, 1] and max_turn_rate = pursuer_speed /
             turn_radius; then it moves pursuer_speed * dt along its new heading.
    evader:  moves evader_speed * dt along the heading psi in [-pi, pi] it chose (no turn limit).
Capture is tested on the swept segment of the step (closest approach of the two straight-line moves),
so a fast pursuer cannot jump through the capture disc. The evader scores n / max_steps, where n is
the number of steps it survived completely (max_steps if never caught); the pursuer scores 1 - that.

All games of a pairing run at once (numpy arrays of shape (n_games,)), and each policy is called once
per step with the batch; see `task_prompt` for the observation a policy receives. In a match both
policies are sandboxed processes asked together (one message per step for all games, `act_all`), and the
game, the capture test and the scores stay in the harness. `simulate_scalar` is an independent
one-game-at-a-time reference of the same rules, used to test the vectorised code.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.base import act_all
from envs.sandbox import PolicyError, SandboxedPolicy
from fmsp.baselines import baseline_codes
from fmsp.baselines.car_tag.evader_flee import FleeDirectly
from fmsp.baselines.car_tag.pursuer_pure_pursuit import PurePursuit
from fmsp.domain import PolicyCode, PolicyInterface

SIDES = ("pursuer", "evader")

DEFAULT_CONFIG: dict[str, Any] = {
    "pursuer_speed": 1.0,
    "evader_speed": 0.5,
    "turn_radius": 1.0,
    "capture_radius": 0.5,
    "dt": 1.0,
    "max_steps": 1000,
    "n_games": 100,
    "seed": 0,
    "start_box": 10.0,  # pursuer starts uniformly in [-start_box, start_box]^2
    "start_distance": [2.0, 10.0],  # evader starts at a uniform distance in this range, uniform bearing
}

Policy = Callable[[dict[str, Any]], Any]


def make_config(**overrides: Any) -> dict[str, Any]:
    """The default Car Tag config with `overrides` applied; unknown keys are an error listing the valid ones."""
    unknown = set(overrides) - set(DEFAULT_CONFIG)
    if unknown:
        raise ValueError(
            f"unknown car_tag config key(s) {sorted(unknown)}; valid: {', '.join(DEFAULT_CONFIG)}"
        )
    config = {**DEFAULT_CONFIG, **overrides}
    lo, hi = config["start_distance"]
    if not config["capture_radius"] < lo <= hi:
        raise ValueError(
            f"car_tag: need capture_radius < start_distance[0] <= start_distance[1], got {config}"
        )
    return config


def initial_states(config: Mapping[str, Any]) -> np.ndarray:
    """Seeded random starts, shape (n_games, 5): pursuer x, y, heading, evader x, y."""
    rng = np.random.default_rng(config["seed"])
    n, box = config["n_games"], config["start_box"]
    pursuer = rng.uniform(-box, box, size=(n, 2))
    heading = rng.uniform(-math.pi, math.pi, size=n)
    dist = rng.uniform(*config["start_distance"], size=n)
    bearing = rng.uniform(-math.pi, math.pi, size=n)
    evader = pursuer + np.stack([dist * np.cos(bearing), dist * np.sin(bearing)], axis=1)
    return np.column_stack([pursuer, heading, evader])


def wrap_angle(a: np.ndarray) -> np.ndarray:
    """Angles mapped into [-pi, pi)."""
    return (a + np.pi) % (2 * np.pi) - np.pi


def _constants(config: Mapping[str, Any]) -> dict[str, float]:
    return {
        "pursuer_speed": float(config["pursuer_speed"]),
        "evader_speed": float(config["evader_speed"]),
        "turn_radius": float(config["turn_radius"]),
        "max_turn_rate": float(config["pursuer_speed"]) / float(config["turn_radius"]),
        "capture_radius": float(config["capture_radius"]),
        "dt": float(config["dt"]),
        "max_steps": int(config["max_steps"]),
    }


def _observation(state: np.ndarray, active: np.ndarray, step: int, const: dict[str, float]) -> dict[str, Any]:
    return {
        "pursuer_x": state[:, 0].copy(),
        "pursuer_y": state[:, 1].copy(),
        "pursuer_heading": state[:, 2].copy(),
        "evader_x": state[:, 3].copy(),
        "evader_y": state[:, 4].copy(),
        "active": active.copy(),
        "step": step,
        **const,
    }


@dataclass
class ActionStats:
    """How often a side's outputs had to be repaired (counted over games still in play)."""

    invalid: int = 0  # NaN / inf, replaced by 0
    out_of_range: int = 0  # pursuer: clipped to [-1, 1]; evader: wrapped into [-pi, pi]


class InvalidActionError(ValueError):
    """A policy output that cannot be an action (wrong type or shape); `side` says whose."""

    def __init__(self, side: str, message: str) -> None:
        super().__init__(message)
        self.side = side


def clean_action(raw: Any, n: int, side: str, active: np.ndarray, stats: ActionStats) -> np.ndarray:
    """A policy output as a float array of shape (n,): scalars broadcast, NaN/inf -> 0, range enforced.

    A wrong shape or a non-numeric output is the policy's bug and raises InvalidActionError with the reason.
    """
    try:
        action = np.array(raw, dtype=float)
    except (TypeError, ValueError, OverflowError):
        raise InvalidActionError(side, f"{side} policy returned {type(raw).__name__}, expected a float or array") from None
    if action.ndim == 0:
        action = np.full(n, float(action))
    elif action.shape != (n,):
        raise InvalidActionError(side, f"{side} policy returned shape {action.shape}, expected () or ({n},)")
    bad = ~np.isfinite(action)
    stats.invalid += int(np.count_nonzero(bad & active))
    action[bad] = 0.0
    if side == "pursuer":
        outside = np.abs(action) > 1.0
        action = np.clip(action, -1.0, 1.0)
    else:
        outside = np.abs(action) > math.pi
        action = np.where(outside, wrap_angle(action), action)
    stats.out_of_range += int(np.count_nonzero(outside & active))
    return action


def closest_approach(rel: np.ndarray, rel_vel: np.ndarray, dt: float) -> np.ndarray:
    """Minimum distance over t in [0, dt] of rel + rel_vel * t (rows are games)."""
    speed2 = np.einsum("ij,ij->i", rel_vel, rel_vel)
    t = np.where(speed2 > 0, -np.einsum("ij,ij->i", rel, rel_vel) / np.where(speed2 > 0, speed2, 1.0), 0.0)
    t = np.clip(t, 0.0, dt)
    return np.linalg.norm(rel + rel_vel * t[:, None], axis=1)


@dataclass
class CarTagResult:
    """Per-game outcome of one pairing."""

    survived: np.ndarray  # int steps survived per game (max_steps if never caught)
    pursuer_stats: ActionStats
    evader_stats: ActionStats
    max_steps: int

    @property
    def evader_score(self) -> float:
        return float(np.mean(self.survived) / self.max_steps)

    def details(self) -> dict[str, Any]:
        return {
            "mean_steps_survived": float(np.mean(self.survived)),
            "capture_rate": float(np.mean(self.survived < self.max_steps)),
            "pursuer_invalid_actions": self.pursuer_stats.invalid,
            "pursuer_clipped_actions": self.pursuer_stats.out_of_range,
            "evader_invalid_actions": self.evader_stats.invalid,
            "evader_wrapped_actions": self.evader_stats.out_of_range,
        }


def simulate(
    pursuer: Policy, evader: Policy, config: Mapping[str, Any], starts: np.ndarray | None = None
) -> CarTagResult:
    """Play all games of a pairing at once; each policy is called once per step (sandboxed policies are asked
    together, `act_all`).

    `starts` (shape (n, 5), as from `initial_states`) replaces the seeded random starts.
    """
    const = _constants(config)
    state = np.array(initial_states(config) if starts is None else starts, dtype=float)
    n, max_steps, dt = len(state), const["max_steps"], const["dt"]
    survived = np.full(n, max_steps, dtype=int)
    active = np.ones(n, dtype=bool)
    p_stats, e_stats = ActionStats(), ActionStats()
    for step in range(max_steps):
        requests = [(pursuer, _observation(state, active, step, const)), (evader, _observation(state, active, step, const))]
        raw_u, raw_psi = act_all(requests, method="__call__")  # one observation copy each: no shared arrays
        u = clean_action(raw_u, n, "pursuer", active, p_stats)
        psi = clean_action(raw_psi, n, "evader", active, e_stats)
        heading = wrap_angle(state[:, 2] + u * const["max_turn_rate"] * dt)
        v_p = const["pursuer_speed"] * np.stack([np.cos(heading), np.sin(heading)], axis=1)
        v_e = const["evader_speed"] * np.stack([np.cos(psi), np.sin(psi)], axis=1)
        caught = active & (
            closest_approach(state[:, 3:5] - state[:, 0:2], v_e - v_p, dt) < const["capture_radius"]
        )
        moving = active[:, None]
        state[:, 0:2] = np.where(moving, state[:, 0:2] + v_p * dt, state[:, 0:2])
        state[:, 2] = np.where(active, heading, state[:, 2])
        state[:, 3:5] = np.where(moving, state[:, 3:5] + v_e * dt, state[:, 3:5])
        survived[caught] = step
        active &= ~caught
        if not active.any():
            break
    return CarTagResult(survived, p_stats, e_stats, max_steps)


def simulate_scalar(
    make_pursuer: Callable[[], Policy], make_evader: Callable[[], Policy], config: Mapping[str, Any]
) -> np.ndarray:
    """Reference implementation: each game alone with `math` scalars (fresh policies per game).

    Policies are called with one-game observations (arrays of shape (1,)). Returns steps survived.
    """
    const = _constants(config)
    dt, v1, v2 = const["dt"], const["pursuer_speed"], const["evader_speed"]
    survived = []
    for xp, yp, th, xe, ye in initial_states(config).tolist():
        pursuer, evader = make_pursuer(), make_evader()
        n = const["max_steps"]
        for step in range(const["max_steps"]):
            state = np.array([[xp, yp, th, xe, ye]])
            active = np.ones(1, dtype=bool)
            u = float(
                clean_action(
                    pursuer(_observation(state, active, step, const)), 1, "pursuer", active, ActionStats()
                )[0]
            )
            psi = float(
                clean_action(
                    evader(_observation(state, active, step, const)), 1, "evader", active, ActionStats()
                )[0]
            )
            th = float(wrap_angle(np.array(th + u * const["max_turn_rate"] * dt)))
            vpx, vpy, vex, vey = v1 * math.cos(th), v1 * math.sin(th), v2 * math.cos(psi), v2 * math.sin(psi)
            rx, ry, wx, wy = xe - xp, ye - yp, vex - vpx, vey - vpy
            w2 = wx * wx + wy * wy
            t = min(max(-(rx * wx + ry * wy) / w2, 0.0), dt) if w2 > 0 else 0.0
            xp, yp, xe, ye = xp + vpx * dt, yp + vpy * dt, xe + vex * dt, ye + vey * dt
            if math.hypot(rx + wx * t, ry + wy * t) < const["capture_radius"]:
                n = step
                break
        survived.append(n)
    return np.array(survived)


# --- the harness ------------------------------------------------------------------------------


def play_match(pursuer: SandboxedPolicy, evader: SandboxedPolicy, config: Mapping[str, Any]) -> dict:
    """Match: `pursuer` against `evader` over all seeded games of `config`; an unusable action ends the match
    as its policy's `invalid_action` failure."""
    try:
        result = simulate(pursuer, evader, config)
    except InvalidActionError as exc:
        raise (pursuer if exc.side == "pursuer" else evader).failure("invalid_action", str(exc)) from None
    score = result.evader_score
    return {"score_a": 1.0 - score, "score_b": score, "details": result.details()}


def unit_test(policy: SandboxedPolicy, side: str, config: Mapping[str, Any]) -> None:
    """The class has a name and description, and plays short games against a human baseline (run in the
    harness) with finite, in-range outputs of the right shape. Raises AssertionError."""
    assert side in SIDES, f"side must be one of {SIDES}, got {side!r}"
    info = policy.loaded()
    for attr in ("name", "description"):
        assert isinstance(info.get(attr), str), f"the policy class needs a string `{attr}` attribute"
    small = {**config, "n_games": 8, "max_steps": 200}
    try:
        if side == "pursuer":
            stats = simulate(policy, FleeDirectly(), small).pursuer_stats
        else:
            stats = simulate(PurePursuit(), policy, small).evader_stats
    except InvalidActionError as exc:
        raise AssertionError(f"the {side} policy returned an unusable action: {exc}") from None
    except PolicyError as exc:  # the policy raised inside its process: say whether a one-game batch works
        if exc.kind != "exception":
            raise
        hint = _BATCH_HINT.format(n=small["n_games"]) if _plays_one_game(policy, side, small) else ""
        raise AssertionError(f"the {side} policy failed during a game: {exc.message}{hint}") from None
    assert stats.invalid == 0, f"the {side} policy returned NaN or inf {stats.invalid} times"
    limit = "[-1, 1]" if side == "pursuer" else "[-pi, pi]"
    assert stats.out_of_range == 0, (
        f"the {side} policy returned values outside {limit} {stats.out_of_range} times"
    )


_BATCH_HINT = (
    "\nIt plays a single game but not a batch of {n}: every obs value is a numpy array of shape (n_games,), so "
    "use numpy element-wise functions (np.arctan2, np.hypot, np.where) instead of math.* and Python if/else on "
    "them, or loop over the games; return an array of shape (n_games,)."
)


def _plays_one_game(policy: SandboxedPolicy, side: str, config: Mapping[str, Any]) -> bool:
    """Whether a fresh process of `policy` finishes a batch of one game (per-game code written for scalars)."""
    one = {**config, "n_games": 1}
    with policy.fresh() as again:
        try:
            simulate(again, FleeDirectly(), one) if side == "pursuer" else simulate(PurePursuit(), again, one)
        except (PolicyError, InvalidActionError):  # any failure means it is not (only) an API mismatch
            return False
    return True


# --- the domain --------------------------------------------------------------------------------

_PROMPT = """You write the {side} policy for Car Tag, a pursuit-evasion game on the unbounded 2-D plane
(the homicidal chauffeur). The pursuer is fast (speed {pursuer_speed}) but turns at most {max_turn_rate} rad
per unit time (turning radius {turn_radius}); the evader is slow (speed {evader_speed}) and can move in any
direction. Each step lasts dt={dt}. The evader is caught when the two come within {capture_radius}
(closest approach during the step). A game lasts at most {max_steps} steps.
{goal}

Write ONE Python class (imports allowed: {imports}) like:

class MyPolicy:
    name = "short_unique_name"
    description = "one line: the idea of the policy"
    def __call__(self, obs: dict) -> "np.ndarray | float": ...

`__call__` is called once per step for a whole batch of independent games at once (vectorise with
numpy). `obs` holds numpy float arrays of shape (n_games,): pursuer_x, pursuer_y, pursuer_heading,
evader_x, evader_y, and a bool array `active` (False once a game has ended); plus the int `step`
(0 at the start of the games; reset any per-game memory then, sized to n_games) and the floats
pursuer_speed, evader_speed, turn_radius, max_turn_rate, capture_radius, dt, max_steps.
Per-game code (math.atan2 on these arrays, Python if/else on their values) fails with more than one game:
use numpy element-wise functions (np.arctan2, np.hypot, np.where) or loop over the games.
Headings are radians counter-clockwise from the +x axis: a unit moves by speed*dt*(cos h, sin h).
{action}
Return an array of shape (n_games,) (or one float for all games). NaN/inf count as 0 and are reported."""

_GOALS = {
    "pursuer": "Goal: catch the evader as early as possible (your score is 1 - steps survived / max_steps).",
    "evader": "Goal: survive as long as possible (your score is steps survived / max_steps).",
}
_ACTIONS = {
    "pursuer": "Return the turn command u in [-1, 1] (positive turns left): heading += u*max_turn_rate*dt.",
    "evader": "Return the absolute heading psi in [-pi, pi] to move along this step.",
}


@dataclass(frozen=True)
class CarTagDomain:
    """Car Tag as an FMSP domain: pursuer vs evader, scores from `n_games` seeded vectorised games."""

    config: Mapping[str, Any]
    name: str = "car_tag"
    sides: tuple[str, str] = SIDES
    allowed_imports: tuple[str, ...] = ("math", "numpy", "random")

    def task_prompt(self, side: str) -> str:
        _check_side(side)
        const = _constants(self.config)
        return _PROMPT.format(
            side=side,
            goal=_GOALS[side],
            action=_ACTIONS[side],
            imports=", ".join(self.allowed_imports),
            **const,
        )

    def baselines(self, side: str) -> list[PolicyCode]:
        _check_side(side)
        return baseline_codes("car_tag", side)

    def match_config(self) -> dict[str, Any]:
        return dict(self.config)

    def interface(self, side: str) -> PolicyInterface:
        _check_side(side)
        return PolicyInterface(("__call__",), preload=("numpy",))

    def play_match(self, a: SandboxedPolicy, b: SandboxedPolicy) -> dict[str, Any]:
        return play_match(a, b, self.config)

    def unit_test(self, policy: SandboxedPolicy, side: str) -> None:
        unit_test(policy, side, self.config)


def _check_side(side: str) -> None:
    if side not in SIDES:
        raise ValueError(f"unknown car_tag side {side!r}; choose one of: {', '.join(SIDES)}")


def make_car_tag(**config: Any) -> CarTagDomain:
    """Car Tag with the default config overridden by `config` (see DEFAULT_CONFIG)."""
    return CarTagDomain(config=make_config(**config))
