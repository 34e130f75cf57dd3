"""The episodes `sepo eval` plays: one unit per (pool, opponent), its seeded specs, and its JSON rows.

Units are played in lock-step batches of whole units (`batches`: consecutive units until a batch holds
`batch_episodes` episodes; with the default sizes, one opponent per batch) with sampling seeds derived from the
batch, and the grouping depends only on the settings: a batch always holds the same units and draws the same
samples, so a rerun that resumes some batches and plays the others gets exactly what an uninterrupted run gets.
An episode row is `EpisodeRecord.to_dict()` (spec, rounds with payoffs / signals / game record, turns, the
conversation); everything `sepo eval` reports is computed from rows, so stored rows are all a resume needs.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from envs.base import EMPTY, RoundResult, Signals
from sepo import objective
from sepo.objective import EpisodeTerms
from sepo.pools import POOL_NAMES
from sepo.rollout.engine import EpisodeSpec, play_episodes

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
    return [EpisodeSpec(game=unit.game, game_params=dict(params or {}), pool=unit.pool, opponent=unit.opponent,
                        seed=episode_seed(seed, unit, i), seat=i % 2) for i in range(episodes)]


def batches(all_units: Sequence[Unit], episodes: int, min_batch: int) -> list[list[Unit]]:
    """Consecutive units grouped into lock-step batches of at least `min_batch` episodes (the last may be
    smaller). The grouping depends only on the units and the two sizes, never on what is already stored."""
    out: list[list[Unit]] = [[]]
    for unit in all_units:
        if out[-1] and len(out[-1]) * episodes >= min_batch:
            out.append([])
        out[-1].append(unit)
    return [b for b in out if b]


def batch_sampling_seed(seed: int, batch: Sequence[Unit]) -> int:
    """The sampling seed of a batch's generation calls (independent of the other batches of the run)."""
    names = "/".join(f"{u.game}/{u.key}" for u in batch)
    return zlib.crc32(f"{seed}/{names}".encode()) % 2**31


def play_batch(batch: Sequence[Unit], episodes: int, seed: int, params: Mapping[str, Any], backend: Any,
               renderer: Any, sampling: Any, opponents: Mapping[str, Callable[[], Any]],
               progress: bool = False, turn_decode: str = "free") -> dict[str, list[Row]]:
    """Play a batch of units' episodes in one lock-step run (`turn_decode`: `play_episodes`'); {unit key: one
    JSON row per episode}."""
    specs = [spec for unit in batch for spec in unit_specs(unit, episodes, seed, params)]
    batch_sampling = replace(sampling, seed=batch_sampling_seed(seed, batch))
    results = play_episodes(specs, backend, renderer, batch_sampling, opponents=opponents, fallback=True,
                            trajectories=False, progress=progress, turn_decode=turn_decode)
    rows = [record.to_dict() for record, _ in results]
    return {unit.key: rows[k * episodes : (k + 1) * episodes] for k, unit in enumerate(batch)}


def terms_from_dict(episode: Mapping[str, Any], max_payoff: float) -> EpisodeTerms:
    """The objective's terms of the agent seat (`objective.episode_terms`), from an `EpisodeRecord.to_dict()`."""
    rounds = [RoundResult(i, tuple(r["payoffs"]), tuple(Signals(**s) for s in r["signals"]), EMPTY)
              for i, r in enumerate(episode["rounds"])]  # the terms read only payoffs and signals
    spec = episode["spec"]
    return objective.episode_terms(rounds, episode["agent_seat"], spec["pool"], max_payoff, spec["opponent"])


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
