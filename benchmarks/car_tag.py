"""One FMSP Car Tag pairing, vectorised, against the one-game-at-a-time scalar reference."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from fmsp.baselines.car_tag.evader_flee import FleeDirectly
from fmsp.domains.car_tag import make_config, simulate, simulate_scalar


def bench(quick: bool, gpu: bool) -> dict[str, Any]:
    """One Car Tag pairing that lasts every step (a pursuer circling at full turn rate never catches an
    evader fleeing directly), vectorised, against the scalar one-game-at-a-time reference."""
    def circling(obs: dict[str, Any]) -> Any:
        return np.ones_like(obs["pursuer_x"])

    games, steps = (20, 200) if quick else (100, 1000)
    config = make_config(n_games=games, max_steps=steps)
    start = time.perf_counter()
    result = simulate(circling, FleeDirectly(), config)
    ours = time.perf_counter() - start
    reference_games = 2 if quick else 5
    start = time.perf_counter()
    simulate_scalar(lambda: circling, FleeDirectly, make_config(n_games=reference_games, max_steps=steps))
    scalar = (time.perf_counter() - start) * games / reference_games
    return {
        "games": games,
        "max_steps": steps,
        "steps_played": int(result.survived.sum()),
        "pairing_s": ours,
        "scalar_reference_s": scalar,
        "scalar_extrapolated_from_games": reference_games,
        "speedup": scalar / ours,
    }


