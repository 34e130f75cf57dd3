"""The study's recorded rollouts: written by a trainer rollout hook, read back as the objective's terms."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sepo import objective
from sepo.files import write_text_atomic
from sepo.objective import EpisodeTerms


class RolloutRecorder:
    """A SEPOTrainer rollout hook that appends every generation batch (each episode's record and, for
    credit shared / auxiliary, the records of its probe episodes) to a JSONL file, one line per batch."""

    def __init__(self, path: Path) -> None:
        self.path, self.batches = path, 0
        write_text_atomic(path, "")

    def __call__(self, trainer: Any, results: list[tuple[Any, Any, list[Any]]]) -> None:
        line = {
            "batch": self.batches,
            "step": trainer.state.global_step,
            "num_generations": trainer.num_generations,
            "episodes": [{**record.to_dict(), "probes": [p.to_dict() for p in probes]}
                         for record, _, probes in results],
        }
        with self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")
        self.batches += 1


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


def read_batches(path: Path) -> list[dict[str, Any]]:
    """The recorded generation batches of one arm."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


