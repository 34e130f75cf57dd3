"""`sepo eval --report_to wandb`: every metric with its interval, the plots, and a table of sample episodes
(the first episode against every opponent, with its conversation)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sepo.eval.episodes import Row

EPISODE_COLUMNS = ["model", "game", "pool", "opponent", "seed", "seat", "agent_total", "opponent_total",
                   "fallbacks", "parse_failures", "actions", "transcript"]


def entry_logs(prefix: str, entries: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """`prefix/metric` (and `prefix/metric/ci_low`, `.../ci_high`) for every measured entry."""
    out: dict[str, float] = {}
    for name, e in entries.items():
        if e["value"] is None:
            continue
        out[f"{prefix}/{name}"] = e["value"]
        if e["ci"]:
            out[f"{prefix}/{name}/ci_low"], out[f"{prefix}/{name}/ci_high"] = e["ci"]
    return out


def result_entries(result: Mapping[str, Any]) -> dict[str, Any]:
    """Every reported entry of one model on one game (the metrics, plus the exploitability where it was measured)."""
    extra = {"exploitability": result["exploitability"]} if "exploitability" in result else {}
    return {**result["metrics"], **extra}


def sample_episodes(label: str, rows: list[Row]) -> list[list[Any]]:
    """Table rows from one opponent's episodes: the first in each seat."""
    first = {}
    for r in rows:
        first.setdefault(r["agent_seat"], r)
    out = []
    for r in first.values():
        spec = r["spec"]
        seat = r["agent_seat"]
        transcript = "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in r["messages"])
        out.append([label, spec["game"], spec["pool"], spec["opponent"], spec["seed"], seat, r["totals"][seat],
                    r["totals"][1 - seat], r["n_fallbacks"], r["n_parse_failures"],
                    " ".join(t["action"] for t in r["turns"]), transcript])
    return out


def log_run(cfg: Any, results: dict[str, Any], stored: dict[tuple[str, str], dict[str, list[Row]]],
            pngs: list[Path]) -> None:
    """One wandb run (job_type eval): metrics, plots and the sample-episode table."""
    # deferred: wandb (~0.3 s to import) and sepo.recipes (transformers' argument parser, ~1.4 s); only a run
    # with report_to=wandb needs them
    import wandb

    from sepo.recipes import wandb_dir

    run = wandb.init(project=cfg.wandb_project, job_type="eval", config=asdict(cfg), dir=wandb_dir(cfg.output_dir))
    for label, per in results.items():
        for game, result in per.items():
            run.log(entry_logs(f"{label}/{game}", result_entries(result)))
    table = wandb.Table(columns=EPISODE_COLUMNS,
                        data=[row for (label, _), by_unit in stored.items() for rows in by_unit.values()
                              for row in sample_episodes(label, rows)])
    run.log({"episodes": table, **{p.stem: wandb.Image(str(p)) for p in pngs}})
    run.finish()
    wandb.teardown()  # drop wandb's process-wide settings (its dir), so a later run in this process reads its own
