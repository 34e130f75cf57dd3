"""`python -m fmsp.gandalf_levels`: per-level attack success of Gandalf runs (the paper's Table 1).

A Gandalf attack run (`configs/fmsp/gandalf_attack_levels_qdsp.yaml`, `gandalf_open_loop.yaml`) freezes the
defenders at human-designed levels and scores every attacker against each of them: those are the quality
reference matches (`fmsp.search`), stored with the attacker as `scores["vs"]`. The table reads them back, no
game is replayed. Per run and level it gives the best success rate of any attacker the run ever accepted (retired
ones too: what matters is whether the run found a way through) and, as a second row, of the human baseline
attackers. Each rate has a 95% Wilson interval over the level's `n_games` games. The best attacker is picked on
those same games, so the best rate is optimistic.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fmsp.archive import ArchiveEntry
from fmsp.evaluation import Run, load_runs
from sepo.config.checks import UsageError
from sepo.config.recipes import RecipeParser
from sepo.config.subcommands import report_usage_errors
from sepo.files import write_json_atomic, write_text_atomic

PROG = "python -m fmsp.gandalf_levels"
_LEVEL = re.compile(r"^gandalf_level_(\d)$")


def wilson_interval(successes: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (95% by default)."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _levels(run: Run) -> dict[str, int]:
    """Defender baseline id -> its Gandalf level."""
    out = {}
    for entry in run.archives["defender"].entries:
        match = _LEVEL.match(entry.name)
        if entry.origin == "baseline" and match:
            out[entry.id] = int(match.group(1))
    return out


def _n_games(run: Run) -> int:
    path = run.path / "domain.json"
    if path.exists():
        return int(json.loads(path.read_text())["match_config"]["n_games"])
    return int(run.config.get("domain_config", {}).get("n_games", 1))


def _best(attackers: Sequence[ArchiveEntry], defender_id: str) -> tuple[float, str] | None:
    scored = [(e.scores["vs"][defender_id], e.name) for e in attackers if defender_id in e.scores.get("vs", {})]
    return max(scored) if scored else None


def level_table(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """One row per run and attacker origin ("generated", "baseline"); cells by level (see module docstring)."""
    rows = []
    for run in runs:
        levels, n = _levels(run), _n_games(run)
        for origin in ("generated", "baseline"):
            attackers = [e for e in run.archives["attacker"].entries if (e.origin == "baseline") == (origin == "baseline")]
            cells = {}
            for defender_id, level in sorted(levels.items(), key=lambda item: item[1]):
                best = _best(attackers, defender_id)
                if best is not None:
                    low, high = wilson_interval(best[0] * n, n)
                    cells[level] = {"success": best[0], "ci_low": low, "ci_high": high, "attacker": best[1]}
            rows.append({"run": run.name, "attackers": origin, "n_attackers": len(attackers), "n_games": n,
                         "levels": cells})  # fmt: skip
    return rows


def level_markdown(rows: list[dict[str, Any]]) -> str:
    """The table as markdown: best success rate [95% CI] per level."""
    levels = sorted({level for row in rows for level in row["levels"]})
    lines = ["# Gandalf: best attacker success per defence level", "",
             "| run | attackers | " + " | ".join(f"level {k}" for k in levels) + " |",
             "|---|---|" + "---:|" * len(levels)]  # fmt: skip
    for row in rows:
        cells = []
        for level in levels:
            c = row["levels"].get(level)
            cells.append("–" if c is None else f"{c['success']:.2f} [{c['ci_low']:.2f}, {c['ci_high']:.2f}]")
        lines.append(f"| {row['run']} | {row['attackers']} ({row['n_attackers']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


@dataclass
class LevelsConfig:
    """The keys of the level table (command line or `--config` recipe)."""

    runs: list[str] = field(metadata={"help": "a run directory, optionally labelled (repeat for several runs)",
                                      "metavar": "[NAME=]DIR", "repeatable": True})
    out: str = field(metadata={"help": "output directory for levels.json and levels.md"})


def parser() -> RecipeParser:
    """The command line of the level table."""
    return RecipeParser((LevelsConfig,), prog=PROG, description=__doc__.split("\n")[0])


def main(argv: list[str] | None = None) -> int:
    (args,) = parser().parse(argv)
    runs = load_runs(args.runs)
    for run in runs:
        if set(run.archives) != {"attacker", "defender"}:
            raise UsageError(f"{run.path} is not a Gandalf run (archives: {sorted(run.archives)})")
    rows = level_table(runs)
    out = Path(args.out)
    write_json_atomic(out / "levels.json", rows)
    write_text_atomic(out / "levels.md", level_markdown(rows))
    print(level_markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, lambda: main(sys.argv[1:])))
