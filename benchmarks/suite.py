"""`python -m benchmarks [--quick] [--only a,b] [--out PATH] [--gpu] [--merge PATH]`: the performance suite, ratios against named baselines.

Parts (each a function returning a dict of figures):
  rollout   batched lock-step rollouts vs one-episode-at-a-time generation (benchmarks/rollout.py;
            64 episodes on a tiny model, or a 4B-shaped bf16 random-weight model with --gpu) - goal >= 10x;
  planning  the KV prefix cache's planning of a call at batch 32 to 256, turn lengths varying, keyed rows
            against the planner that searched every row (benchmarks/rollout.py --planning);
  overhead  SEPO's own share of a SEPO-GRPO step (games, opponents, parsing, chat rendering, rewards,
            advantages) next to generation and the model's forward/backward/optimizer - goal <= 5%;
  engine    the rollout engine's own microseconds per episode-decision with an instant replay backend and
            SmolLM2's tokenizer, 256 episodes of every game, split by phase (benchmarks/engine.py), against
            the straightforward reference - goal <= 50 us for the baseline game;
  envs      each game's engine against the reference library it is checked against: matches vs Axelrod
            4.13.1, exact exploitability vs OpenSpiel (benchmarks/games.py);
  car_tag   one FMSP Car Tag pairing: 100 games x 1000 steps, vectorised vs the one-game-at-a-time scalar
            reference (extrapolated) - goal <= 1 s;
  sandbox   the same Car Tag pairing and a game match with both policies in sandboxed processes vs in-process
            (benchmarks/sandbox.py) - goals <= 1.5 s and <= 5 ms per episode.
The games each part plays are settings (configs/benchmarks/<part's module>.yaml) or every registered game.
Every run appends one JSON line (date, machine, git sha, figures) to `--out` (default
benchmarks/results.jsonl) and regenerates RESULTS.md next to it.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

import envs
from benchmarks import car_tag, engine, games, overhead, rollout, sandbox
from benchmarks.settings import game_settings
from sepo.config.provenance import git_sha, machine_info
from sepo.config.recipes import RecipeParser
from sepo.config.subcommands import report_usage_errors
from sepo.files import write_jsonl_atomic, write_text_atomic

PARTS = ("rollout", "planning", "overhead", "engine", "envs", "car_tag", "sandbox")
DEFAULT_OUT = Path("benchmarks/results.jsonl")
PROG = "python -m benchmarks"


# ------------------------------------------------------------------------------------------------
# parts


RUNNERS: dict[str, Callable[[bool, bool], dict[str, Any]]] = {
    "rollout": rollout.bench,
    "planning": rollout.bench_planning,
    "overhead": overhead.bench,
    "engine": engine.bench,
    "envs": games.bench,
    "car_tag": car_tag.bench,
    "sandbox": sandbox.bench,
}


# ------------------------------------------------------------------------------------------------
# table, results file, RESULTS.md


def _title(game: str) -> str:
    """A game's name as tables write it (its registration's title)."""
    return envs.game_spec(game).title


def rows(figures: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(benchmark, ours, named baseline, ratio, goal) rows of the figures that were measured."""
    out = []
    if r := figures.get("rollout"):
        played = _title(game_settings(rollout.RolloutSettings, "rollout").game)
        out.append((f"rollouts: {r['episodes']} {played} episodes, {r['model']} on {r['device']}",
                    f"{r['batched_s']:.2f} s batched lock-step", f"{r['one_at_a_time_s']:.2f} s one at a time (HF "
                    "generate per episode)", f"{r['speedup']:.1f}x",
                    "speedup >= 10x" if r["device"] == "cpu" else "speedup >= 30x"))
        if "batched_no_reuse_s" in r:  # the two causes apart: batching alone, and reusing the KV cache
            out.append(("  of which batching (both re-encode each round)", f"{r['batched_no_reuse_s']:.2f} s batched",
                        f"{r['one_at_a_time_s']:.2f} s one at a time", f"{r['batching_speedup']:.1f}x", "-"))
            out.append(("  of which KV reuse across rounds (+ preallocated cache)", f"{r['batched_s']:.2f} s reuse",
                        f"{r['batched_no_reuse_s']:.2f} s re-encode", f"{r['prefix_reuse_speedup']:.1f}x", "-"))
    if r := figures.get("planning"):
        for b in r["batches"]:
            out.append((f"KV prefix planning, batch {b['batch']}, round {r['rounds']}, turn lengths vary: rows found",
                        f"{1e3 * b['keyed_match_s']:.2f} ms keyed", f"{1e3 * b['searching_match_s']:.1f} ms searching",
                        f"{b['match_speedup']:.0f}x", "same plan" if b["same_plan"] else "PLANS DIFFER"))
            out.append(("  the whole plan (masks, cache copy)", f"{1e3 * b['keyed_plan_s']:.1f} ms",
                        f"{1e3 * b['searching_plan_s']:.1f} ms", f"{b['plan_speedup']:.1f}x", "-"))
    if r := figures.get("overhead"):
        # per step: lines from before the per-step figures (no `seconds_per_step`) hold sums over measured_steps
        n = 1 if "seconds_per_step" in r else r.get("measured_steps", 1)
        step, gen = r["step_s"] / n, r["generation_s"] / n
        own = (r["sepo_rollout_s"] + r["sepo_rewards_s"] + r["sepo_advantages_s"]) / n
        steps = r.get("measured_steps", 1)
        out.append((f"SEPO overhead per GRPO step: {r['model']}", f"{own:.3f} s SEPO own",
                    f"{step:.3f} s a step, mean of {steps} after a warm-up (gen {gen:.2f} s)",
                    f"{100 * r['sepo_overhead_share']:.1f}%", "share <= 5%"))
        if "model_compute_s" in r and "other_s" in r:
            out.append(("  of which logprobs + backward + optimizer / untimed rest", f"{r['model_compute_s'] / n:.3f} s",
                        f"{r['other_s'] / n:.3f} s rest", f"{100 * r['model_compute_s'] / r['step_s']:.0f}%", "-"))
    if r := figures.get("decode"):  # the GPU check's part (benchmarks/gpu/check.py)
        for arm in r.get("batches", [r]):  # the check's decode part: one arm per batch size (older lines: one)
            out.append((f"decode at batch {arm['batch']}: {r['model']}", f"{arm['decode_tokens_per_s']:.0f} tokens/s",
                        f"{arm['roofline_tokens_per_s']:.0f} tokens/s memory roofline ({r['bandwidth_tb_s']:g} TB/s)",
                        f"{100 * arm['roofline_fraction']:.0f}%", ">= 30%" if arm["batch"] > 1 else "-"))
    if r := figures.get("engine"):
        # the baseline game: the one whose cost the others are a ratio to (lines since the ratio goals), else the
        # settings' baseline (the one the absolute goal was for)
        base = next((k[3:] for k in r if k.startswith("vs_")), None)
        ratios = base is not None
        base = base or engine.engine_settings().baseline
        for game, g in r["games"].items():
            split = ", ".join(f"{p} {v:.1f}" for p, v in g["warm"]["split_us"].items())
            ours = f"{g['warm']['us_per_decision']:.1f} us/decision ({g['cold']['us_per_decision']:.0f} cold)"
            if ratios and game != base:  # the goal as a ratio in the same run
                out.append((f"engine cost, {game} ({r['episodes']} episodes; us: {split})", ours,
                            f"{r['games'][base]['warm']['us_per_decision']:.1f} us {_title(base)}",
                            f"{r[f'vs_{base}'][game]:.1f}x", f"<= {r[f'goal_vs_{base}']:g}x {_title(base)}"))
            else:
                out.append((f"engine cost, {game} ({r['episodes']} episodes; us: {split})", ours, "-", "-",
                            f"<= {r['goal_us']:g} us" if game == base and not ratios else "-"))
        if ref := r.get("reference"):
            goal = f">= {r['goal_reference_speedup']:g}x" if "goal_reference_speedup" in r else "-"
            out.append((f"  engine vs straightforward reference ({ref['game']}, {ref['episodes']} episodes)",
                        f"{r['games'][ref['game']]['warm']['us_per_decision']:.1f} us/decision",
                        f"{ref['us_per_decision']:.0f} us/decision reference", f"{ref['speedup']:.0f}x", goal))
    if r := figures.get("envs"):
        out.extend(games.suite_rows(r, _title))
    if r := figures.get("car_tag"):
        out.append((f"Car Tag pairing {r['games']} x {r['max_steps']} steps", f"{r['pairing_s']:.3f} s",
                    f"{r['scalar_reference_s']:.2f} s scalar reference", f"{r['speedup']:.1f}x", "<= 1 s"))
    if r := figures.get("sandbox"):
        game = next(k for k in r if k in envs.GAMES)  # the game match's figures sit under the game's name
        c, i, p = r["car_tag"], r[game], r["parts"]
        out.append((f"Car Tag pairing {c['games']} x {c['steps']} steps, both policies sandboxed", f"{c['sandboxed_s']:.3f} s",
                    f"{c['in_process_s']:.3f} s in-process", f"{c['ratio']:.1f}x", "<= 1.5 s"))
        out.append((f"{_title(game)} episode ({i['rounds']} rounds), both sandboxed, over {i['episodes']} episodes",
                    f"{i['sandboxed_ms_per_episode']:.2f} ms", f"{i['in_process_ms_per_episode']:.3f} ms in-process",
                    f"{i['ratio']:.0f}x", "<= 5 ms"))
        out.append(("  sandbox start-up, one policy process / one pipelined step of two", f"{p['start_s']:.3f} s",
                    f"{p['pipelined_step_ms']:.3f} ms", "-", "-"))
        if "load_average_1min" in r:
            out.append(("  machine load (1-min average) at the part's start / end",
                        " / ".join(f"{x:.2f}" for x in r["load_average_1min"]), "-", "-", "-"))
    return out


def table(figures: dict[str, Any]) -> str:
    """A fixed-width text table of `rows`."""
    header = ("benchmark", "ours", "baseline", "ratio", "goal")
    body = [header, *rows(figures)]
    widths = [max(len(r[i]) for r in body) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in body]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def results_markdown(lines: list[dict[str, Any]]) -> str:
    """RESULTS.md: one section per recorded run, newest first, with its ratio table."""
    out = ["# Benchmark results", "", "Generated by `python -m benchmarks` (`make bench`) from results.jsonl (newest first).", ""]
    for line in reversed(lines):
        m = line["machine"]
        where = m["cpu"] + (f"; {m['gpu']}" if m.get("gpu") else "")
        mode = "quick" if line.get("quick") else "full"
        out += [f"## {line['date']} ({mode}, git {line['git_sha']})", "", f"Machine: {where}", "", "```",
                table(line["figures"]), "```", ""]
        if line.get("errors"):
            out += [f"Errors: {json.dumps(line['errors'])}", ""]
    return "\n".join(out)


def append_results(out: Path, record: dict[str, Any]) -> None:
    """Add `record` as one JSON line to `out` and regenerate RESULTS.md next to it (both atomically)."""
    lines = [json.loads(x) for x in out.read_text().splitlines() if x.strip()] if out.is_file() else []
    lines.append(record)
    write_jsonl_atomic(out, lines)
    write_text_atomic(out.with_name("RESULTS.md"), results_markdown(lines))


def run_suite(parts: list[str], quick: bool, gpu: bool, out: Path | None) -> dict[str, Any]:
    """Run the chosen parts, print the table, append the results line; a failing part is recorded, not fatal."""
    figures: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for part in tqdm(parts, desc="benchmarks", unit="part"):
        tqdm.write(f"[bench] {part} ...")
        start = time.perf_counter()
        try:
            figures[part] = RUNNERS[part](quick, gpu)
        except Exception as exc:  # one broken part must not lose the others' figures
            errors[part] = f"{type(exc).__name__}: {exc}"
            tqdm.write(f"[bench] {part} failed: {errors[part]}")
        tqdm.write(f"[bench] {part} done in {time.perf_counter() - start:.1f} s")
    record = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(gpu),
        "git_sha": git_sha(),
        "quick": quick,
        "gpu": gpu,
        "parts": parts,
        "figures": figures,
        "errors": errors,
    }
    print(table(figures))
    if out is not None:
        append_results(out, record)
        print(f"appended to {out}; regenerated {out.with_name('RESULTS.md')}")
    return record


@dataclass
class SuiteConfig:
    """The keys of `python -m benchmarks` (command line or `--config` recipe)."""

    quick: bool = field(default=False, metadata={"help": "small sizes (seconds, for tests), not for records"})
    only: str | None = field(default=None, metadata={"help": f"comma-separated parts: {', '.join(PARTS)} (default: all)"})
    out: str = field(default=str(DEFAULT_OUT), metadata={"help": "results JSONL to append to ('' = none)"})
    gpu: bool = field(default=False, metadata={"help": "rollout and overhead on a 4B-shaped bf16 model on cuda"})
    merge: str | None = field(
        default=None, metadata={"help": "append the lines of another results JSONL (e.g. from the GPU run) to --out"})


def parser() -> RecipeParser:
    """The command line of the performance suite."""
    return RecipeParser((SuiteConfig,), prog=PROG, description=__doc__.splitlines()[0])


def main(argv: list[str] | None = None) -> int:
    (ns,) = parser().parse(sys.argv[1:] if argv is None else argv)
    if ns.merge:
        for line in Path(ns.merge).read_text().splitlines():
            if line.strip():
                append_results(Path(ns.out), json.loads(line))
        print(f"merged {ns.merge} into {ns.out}")
        return 0
    parts = [p for p in (ns.only.split(",") if ns.only else PARTS) if p]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        print(f"benchmarks: unknown part(s) {unknown}; choose from: {', '.join(PARTS)}", file=sys.stderr)
        return 2
    record = run_suite(parts, ns.quick, ns.gpu, Path(ns.out) if ns.out else None)
    return 1 if record["errors"] else 0


if __name__ == "__main__":
    sys.exit(report_usage_errors(PROG, main))
