"""The episodes `sepo eval` plays: one unit per (pool, opponent), its seeded specs, and its JSON rows.

A unit is always played as one lock-step batch of its own episodes with sampling seeds derived from the unit,
so its result does not depend on which other units were played in the same run: a rerun that resumes some
units and plays the others gets exactly what an uninterrupted run gets.
An episode row is `EpisodeRecord.to_dict()` (spec, rounds with payoffs / signals / game record, turns, the
conversation); everything `sepo eval` reports is computed from rows, so stored rows are all a resume needs.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sepo import objective
from sepo.objective import EpisodeTerms
from sepo.pools import POOL_NAMES

Row = dict[str, Any]


@dataclass(frozen=True)
class Unit:
    """One (pool, opponent) of one game: the smallest piece of an evaluation that is played and stored."""

    game: str
    pool: str
    opponent: str

    @property
    def key(self) -> str:
        return f"{self.pool}.{self.opponent}"


def units(game: str, pools: Any, which: Sequence[str] = POOL_NAMES) -> list[Unit]:
    """Every (pool, opponent) of `game` in the pools `which`, in pool order."""
    return [Unit(game, pool, name) for pool in POOL_NAMES if pool in which for name in pools.names(pool)]


def episode_seed(seed: int, unit: Unit, index: int) -> int:
    """The seed of episode `index` of `unit` (private values, cards, opponent randomness)."""
    return random.Random(f"{seed}/{unit.game}/{unit.pool}/{unit.opponent}/{index}").randrange(2**31)


def unit_specs(unit: Unit, episodes: int, seed: int, params: Mapping[str, Any] | None = None) -> list:
    """`episodes` seeded specs for one unit, seats alternating (episode i plays seat i % 2)."""
    from sepo.rollout.engine import EpisodeSpec

    return [EpisodeSpec(game=unit.game, game_params=dict(params or {}), pool=unit.pool, opponent=unit.opponent,
                        seed=episode_seed(seed, unit, i), seat=i % 2) for i in range(episodes)]


def unit_sampling_seed(seed: int, unit: Unit) -> int:
    """The sampling seed of a unit's generation calls (independent of the other units of the run)."""
    return zlib.crc32(f"{seed}/{unit.game}/{unit.key}".encode()) % 2**31


def play_unit(unit: Unit, episodes: int, seed: int, params: Mapping[str, Any], backend: Any, renderer: Any,
              sampling: Any, opponents: Mapping[str, Callable[[], Any]], progress: bool = False) -> list[Row]:
    """Play one unit's episodes in one lock-step batch; one JSON row per episode, in spec order."""
    from dataclasses import replace

    from sepo.rollout.engine import play_episodes

    specs = unit_specs(unit, episodes, seed, params)
    unit_sampling = replace(sampling, seed=unit_sampling_seed(seed, unit))
    results = play_episodes(specs, backend, renderer, unit_sampling, opponents=opponents, fallback=True,
                            trajectories=False, progress=progress)
    return [record.to_dict() for record, _ in results]


def terms_from_dict(episode: Mapping[str, Any], max_payoff: float) -> EpisodeTerms:
    """The objective's per-round signals of the agent seat, from an `EpisodeRecord.to_dict()`."""
    seat, other = episode["agent_seat"], 1 - episode["agent_seat"]
    rounds = episode["rounds"]
    return EpisodeTerms(
        pool=episode["spec"]["pool"],
        opponent=episode["spec"]["opponent"],
        scale=objective.scale(max_payoff),
        payoffs=tuple(float(r["payoffs"][seat]) for r in rounds),
        opp_payoffs=tuple(float(r["payoffs"][other]) for r in rounds),
        collusion=tuple(r["signals"][seat]["collusion"] for r in rounds),
        externality=tuple(float(r["signals"][seat]["externality"]) for r in rounds),
    )


def transcript_line(label: str, row: Row) -> dict[str, Any]:
    """One transcript line: who played whom, the conversation, each turn's action and how it was decided,
    and the outcome."""
    return {
        "model": label,
        **{k: row["spec"][k] for k in ("game", "pool", "opponent", "seed", "seat")},
        "totals": row["totals"],
        "turns": [{k: t[k] for k in ("round", "action", "parsed", "fallback")} for t in row["turns"]],
        "messages": row["messages"],
    }
