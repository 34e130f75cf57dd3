"""What the policy sandbox costs: FMSP matches with both policies in their own contained processes, end to end,
against the same games with the same policies in-process (the named baseline, measured in the same run).

Figures: one Car Tag pairing (100 games x 1000 steps, every step played: a circling pursuer never catches a
fleeing evader) - goal <= 1.5 s; a match of the game configs/benchmarks/sandbox.yaml names (its default
parameters) between two of its scripted strategies, played as an FMSP domain - goal <= 5 ms per episode; and the parts of the cost: starting one policy process (bubblewrap, setpriv, Python, numpy,
seccomp) and one pipelined step of both Car Tag policies.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.settings import game_settings
from envs import make_game, make_strategy, play_episode
from envs.base import act_all
from envs.sandbox import SandboxedPolicy
from fmsp.baselines import baseline_codes
from fmsp.baselines.car_tag.evader_flee import FleeDirectly
from fmsp.domain import PolicyCode
from fmsp.domains import make_domain
from fmsp.domains.car_tag import make_car_tag, simulate
from fmsp.domains.sepo_games import scripted_policy_code
from fmsp.sandbox import Sandbox

CIRCLE = ("import numpy as np\n\n\nclass Circle:\n    name = 'circle'\n    description = 'full left turn'\n\n"
          "    def __call__(self, obs):\n        return np.ones_like(obs['pursuer_x'])\n")  # fmt: skip


def _car_tag(games: int, steps: int) -> dict[str, Any]:
    domain = make_car_tag(n_games=games, max_steps=steps)
    flee = next(p for p in baseline_codes("car_tag", "evader") if p.name == FleeDirectly.name)
    sandbox = Sandbox()
    sandbox.check()
    start = time.perf_counter()
    outcome = sandbox.play(domain, PolicyCode("circle", "", CIRCLE, "pursuer"), flee)
    sandboxed = time.perf_counter() - start
    namespace: dict[str, Any] = {}
    exec(CIRCLE, namespace)  # noqa: S102 - our own constant policy, run in-process for the baseline
    start = time.perf_counter()
    reference = simulate(namespace["Circle"](), FleeDirectly(), domain.match_config())
    in_process = time.perf_counter() - start
    if outcome.score_b != reference.evader_score:
        raise RuntimeError(f"sandboxed and in-process Car Tag differ: {outcome.score_b} vs {reference.evader_score}")
    played = int(reference.survived.max())
    return {"games": games, "steps": played, "sandboxed_s": sandboxed, "in_process_s": in_process,
            "overhead_per_step_ms": 1000 * (sandboxed - in_process) / played, "ratio": sandboxed / in_process}  # fmt: skip


@dataclass(frozen=True)
class SandboxSettings:
    """The game match the sandbox plays (configs/benchmarks/sandbox.yaml)."""

    game: str
    players: list[dict[str, str]]  # two scripted policies: {strategy: a strategy of the game, side: its FMSP side}


def _game_match(settings: SandboxSettings, episodes: int) -> dict[str, Any]:
    """`episodes` episodes between the settings' two scripted strategies, sandboxed and in-process."""
    game_name = settings.game
    domain = make_domain(game_name, n_episodes=episodes)
    a, b = (scripted_policy_code(game_name, p["strategy"], p["side"]) for p in settings.players)
    start = time.perf_counter()
    outcome = Sandbox().play(domain, a, b)
    sandboxed = time.perf_counter() - start
    game = make_game(game_name)
    start = time.perf_counter()
    for i in range(episodes):
        play_episode(game, [make_strategy(game_name, a.name), make_strategy(game_name, b.name)], random.Random(i))
    in_process = time.perf_counter() - start
    if not outcome.ok:
        raise RuntimeError(f"the sandboxed {game_name} match failed: {outcome.failure_a or outcome.failure_b}")
    return {"episodes": episodes, "rounds": game.num_rounds, "sandboxed_ms_per_episode": 1000 * sandboxed / episodes,
            "in_process_ms_per_episode": 1000 * in_process / episodes, "ratio": sandboxed / in_process}  # fmt: skip


def _parts(calls: int) -> dict[str, Any]:
    """Start-up of one process, and one pipelined Car Tag step (100 games) of two processes."""
    starts = []
    for _ in range(3):
        start = time.perf_counter()
        with SandboxedPolicy(CIRCLE, label="circle", methods=("__call__",), preload=("numpy",)) as policy:
            policy.loaded()
        starts.append(time.perf_counter() - start)
    obs = {k: np.zeros(100) for k in ("pursuer_x", "pursuer_y", "pursuer_heading", "evader_x", "evader_y")}
    obs.update(active=np.ones(100, dtype=bool), step=0)
    policies = [SandboxedPolicy(CIRCLE, label=str(i), methods=("__call__",), preload=("numpy",)) for i in range(2)]
    try:
        for policy in policies:
            policy.loaded()
        start = time.perf_counter()
        for _ in range(calls):
            act_all([(p, obs) for p in policies], method="__call__")
        step = (time.perf_counter() - start) / calls
    finally:
        for policy in policies:
            policy.close()
    return {"start_s": float(np.median(starts)), "pipelined_step_ms": 1000 * step}


def bench(quick: bool, gpu: bool) -> dict[str, Any]:
    """The sandbox's cost next to the same games in-process (see the module docstring)."""
    games, steps = (20, 200) if quick else (100, 1000)
    load = os.getloadavg()  # the machine's load when the part starts and ends: these are wall-clock figures
    settings = game_settings(SandboxSettings, "sandbox")
    figures = {"car_tag": _car_tag(games, steps), settings.game: _game_match(settings, 20 if quick else 200),
               "parts": _parts(100 if quick else 1000)}
    return {**figures, "load_average_1min": [load[0], os.getloadavg()[0]]}
